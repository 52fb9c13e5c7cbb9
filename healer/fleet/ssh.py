"""SSH to fleet nodes: argv built from validated parts, remote commands quoted, tunnels managed.

Every SSH call is non-interactive (``BatchMode=yes``), has a connect timeout, and honours the
fleet's host-key policy (``fleet.ssh_strict_host_key_checking``, ``fleet.ssh_known_hosts``)
and key (``fleet.ssh_identity``). The host, user and port are re-checked here even though the
config loader checked them: a hostile value must never reach ssh's argv (``-oProxyCommand=…``
as a host is an old trick), and ``--`` ends the options before the host for good measure.
A remote command is an argv list joined with POSIX quoting, so the remote shell sees exactly
those words.

Tunnels are ``ssh -f -N -L 127.0.0.1:<tunnel_port>:<host>:<port>`` with keep-alives and
``ExitOnForwardFailure``; they are found again by their forward spec in the process table.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from healer.config import NodeEntry
from healer.core.names import safe_host, safe_port, safe_user
from healer.core.proc import ProcResult, run_async
from healer.errors import UnsafeNameError, UsageError


def _checked(node: NodeEntry) -> None:
    try:
        safe_host(node.host, "host")
        safe_port(node.ssh_port, "ssh_port")
        if node.user:
            safe_user(node.user, "user")
    except UnsafeNameError as exc:
        raise UsageError(f"refusing SSH to node {node.node_id!r}: {exc}") from exc


def ssh_options(fleet: Any, connect_timeout: float) -> list[str]:
    """The options every fleet SSH call carries."""
    opts = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, round(connect_timeout))}",
            "-o", f"StrictHostKeyChecking={fleet.ssh_strict_host_key_checking}",
            "-o", "LogLevel=ERROR"]
    if fleet.ssh_known_hosts:
        opts += ["-o", f"UserKnownHostsFile={fleet.ssh_known_hosts}"]
    if fleet.ssh_identity:
        opts += ["-i", str(Path(fleet.ssh_identity).expanduser()), "-o", "IdentitiesOnly=yes"]
    return opts


def ssh_base(fleet: Any, node: NodeEntry, *, connect_timeout: float = 5.0) -> list[str]:
    _checked(node)
    argv = ["ssh", *ssh_options(fleet, connect_timeout), "-p", str(node.ssh_port)]
    if node.user:
        argv += ["-l", node.user]
    return argv


def ssh_command(fleet: Any, node: NodeEntry, remote: Sequence[str], *,
                connect_timeout: float = 5.0) -> list[str]:
    """argv running ``remote`` (an argv) on ``node``."""
    if isinstance(remote, str):
        raise TypeError("remote must be an argv list, not a shell string")
    return [*ssh_base(fleet, node, connect_timeout=connect_timeout), "--", node.host,
            shlex.join(remote)]


def shell_line(argv: Sequence[str]) -> str:
    """An argv as a line a person can paste into a shell."""
    return shlex.join(argv)


async def run_remote(fleet: Any, node: NodeEntry, remote: Sequence[str], *, timeout: float,
                     input: str | None = None) -> ProcResult:
    """Run ``remote`` on ``node`` over SSH (never blocking the event loop)."""
    argv = ssh_command(fleet, node, remote, connect_timeout=min(timeout, 5.0))
    return await run_async(argv, timeout=timeout, input=input)


# ---------------------------------------------------------------------------------------------
# Tunnels


def forward_spec(node: NodeEntry) -> str:
    return f"127.0.0.1:{node.tunnel_port}:{node.host}:{node.port}"


def tunnel_argv(fleet: Any, node: NodeEntry) -> list[str]:
    """``ssh -f -N -L`` with keep-alives: the tunnel dies with the link instead of hanging."""
    if not node.tunnel_port:
        raise UsageError(f"node {node.node_id!r} has no tunnel_port")
    safe_port(node.tunnel_port, "tunnel_port")
    return [*ssh_base(fleet, node, connect_timeout=5.0), "-f", "-N",
            "-o", "ExitOnForwardFailure=yes",
            "-o", f"ServerAliveInterval={max(1, round(fleet.ssh_keepalive_s))}",
            "-o", "ServerAliveCountMax=3",
            "-L", forward_spec(node), "--", node.host]


def _proc_table() -> list[tuple[int, list[str]]]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path("/proc", entry, "cmdline").read_bytes()
        except OSError:
            continue
        if raw:
            out.append((int(entry), raw.rstrip(b"\0").decode(errors="replace").split("\0")))
    return out


async def _processes() -> list[tuple[int, list[str]]]:
    if os.path.isdir("/proc/self"):
        return await asyncio.to_thread(_proc_table)
    res = await run_async(["ps", "-axo", "pid=,command="], timeout=5)
    rows = []
    for line in res.stdout.splitlines():
        pid, _, cmd = line.strip().partition(" ")
        if pid.isdigit():
            rows.append((int(pid), cmd.split()))
    return rows


def _tunnels_in(table: list[tuple[int, list[str]]], tunnel_port: int) -> dict[int, str]:
    prefix = f"127.0.0.1:{tunnel_port}:"
    found = {}
    for pid, argv in table:
        if not argv or Path(argv[0]).name != "ssh" or pid == os.getpid():
            continue
        for i, arg in enumerate(argv[:-1]):
            if arg == "-L" and argv[i + 1].startswith(prefix):
                found[pid] = argv[i + 1]
    return found


def tunnel_pids(tunnel_port: int) -> dict[int, str]:
    """``find_tunnels`` for code without an event loop (Linux only)."""
    return _tunnels_in(_proc_table(), tunnel_port)


async def find_tunnels(tunnel_port: int) -> dict[int, str]:
    """pid → forward spec of every ssh forwarding local ``tunnel_port``."""
    return _tunnels_in(await _processes(), tunnel_port)


async def stop_tunnels(tunnel_port: int, *, keep: str = "") -> list[int]:
    """Kill tunnels on ``tunnel_port`` (except one forwarding exactly ``keep``)."""
    killed = []
    for pid, spec in (await find_tunnels(tunnel_port)).items():
        if keep and spec == keep:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
            killed.append(pid)
    for _ in range(40):
        if not any(pid in killed for pid in await find_tunnels(tunnel_port)):
            break
        await asyncio.sleep(0.05)
    return killed


async def start_tunnel(fleet: Any, node: NodeEntry, log_dir: Path, *,
                       timeout: float = 15.0) -> tuple[ProcResult, int | None]:
    """Start the tunnel; returns ssh's result and the pid of the tunnel left running."""
    argv = tunnel_argv(fleet, node)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_file = log_dir / f"tunnel-{node.node_id}.log"
    # ssh -f daemonises but keeps its stdout/stderr: pipes would never close, so a file.
    res = await run_async(argv, timeout=timeout, detach_output=log_file)
    pids = [pid for pid, spec in (await find_tunnels(node.tunnel_port)).items()
            if spec == forward_spec(node)]
    if not res.ok:
        with contextlib.suppress(OSError):
            tail = log_file.read_bytes()[-1000:].decode(errors="replace").strip()
            res = ProcResult(res.argv, res.returncode, res.stdout, tail, res.timed_out)
    return res, (pids[0] if pids else None)
