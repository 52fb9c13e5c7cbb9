"""The channel-diagnoser playbook: probe what can be probed to one peer, no model needed.

Channels (each with its own short timeout, all probed at once):

- ``http``   GET ``http://<host>:<port>/health`` — ok on HTTP 2xx;
- ``tunnel`` GET ``http://127.0.0.1:<tunnel_port>/health`` — only when a tunnel port is known;
- ``ssh``    TCP connect to the SSH port and read the ``SSH-`` banner;
- ``nats``   TCP connect to the NATS server and read its ``INFO`` line;
- ``seed``   the peer's seed inbox ``<fleet dir>/<peer>/`` exists or can be made, and a file
  can be written there.

The probes are plain functions so the fleet code can reuse them one by one.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import secrets
import ssl
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.agents.context import Peer
from healer.agents.playbooks import PlaybookContext

TIMEOUTS = {"http": 3.0, "tunnel": 3.0, "ssh": 5.0, "nats": 2.0, "seed": 2.0}


@dataclass(frozen=True)
class Probe:
    """The outcome of probing one channel."""

    ok: bool
    detail: str
    latency_ms: float | None = None

    def as_result(self) -> dict[str, Any]:
        return {"ok": self.ok, "detail": self.detail[:2000],
                "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 1)}


def reason(exc: BaseException) -> str:
    """A short cause: refused / timed out / the error, looking behind library wrappers."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, ConnectionRefusedError) or (
                isinstance(seen, OSError) and seen.errno == errno.ECONNREFUSED):
            return "connection refused"
        if isinstance(seen, TimeoutError) or "Timeout" in type(seen).__name__:
            return "timed out"
        if type(seen).__name__ == "RemoteProtocolError":
            return "connection closed without an answer (nothing listens behind it?)"
        seen = seen.__cause__ or seen.__context__
    return f"{type(exc).__name__}: {exc or type(exc).__name__}"[:300]


@functools.cache
def _tls() -> ssl.SSLContext:
    # Loading the CA bundle costs ~20 ms; do it once, not per probe.
    return ssl.create_default_context()


async def probe_http(url: str, timeout: float = 3.0) -> Probe:
    """GET ``url``; ok on 2xx. Proxies from the environment are ignored (loopback stays local)."""
    import httpx

    start = time.monotonic()
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False, verify=_tls()) as client:
            resp = await client.get(url)
    except Exception as exc:  # every failure is a finding, not a crash
        return Probe(False, reason(exc))
    ms = (time.monotonic() - start) * 1000
    return Probe(200 <= resp.status_code < 300, f"HTTP {resp.status_code}", ms)


async def probe_banner(host: str, port: int, prefix: bytes, timeout: float) -> Probe:
    """TCP connect and read the first line; ok when it starts with ``prefix``."""
    start = time.monotonic()
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            line = await reader.readline()
    except Exception as exc:
        return Probe(False, reason(exc))
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
    ms = (time.monotonic() - start) * 1000
    shown = line[:80].decode(errors="replace").strip()
    if line.startswith(prefix):
        return Probe(True, shown, ms)
    return Probe(False, f"unexpected greeting {shown!r}" if shown else "closed without a "
                 "greeting", ms)


async def probe_ssh(host: str, port: int = 22, timeout: float = 5.0) -> Probe:
    return await probe_banner(host, port, b"SSH-", timeout)


async def probe_nats(host: str, port: int = 4222, timeout: float = 2.0) -> Probe:
    return await probe_banner(host, port, b"INFO ", timeout)


def _seed_writable(inbox: Path) -> Probe:
    start = time.monotonic()
    try:
        inbox.mkdir(parents=True, exist_ok=True)
        test = inbox / f".probe-{secrets.token_hex(4)}.tmp"
        fd = os.open(test, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, b"probe\n")
        finally:
            os.close(fd)
            test.unlink()
    except OSError as exc:
        return Probe(False, _inbox_trouble(inbox, exc))
    return Probe(True, f"{inbox} writable", (time.monotonic() - start) * 1000)


def _inbox_trouble(inbox: Path, exc: OSError) -> str:
    """What is wrong with a seed inbox, as a sentence a person reads in a diagnosis (not the
    bare ``…/n2: File exists`` of the failed ``mkdir``)."""
    if inbox.is_symlink():
        return f"the seed inbox {inbox} is a symbolic link, not a folder"
    if inbox.exists() and not inbox.is_dir():
        return f"the seed inbox {inbox} is a file, not a folder: no seed file can go in it"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"the seed inbox {inbox} is not writable ({exc.strerror})"
    return f"no seed file can be written in {inbox}: {exc.strerror or exc}"


async def probe_seed(inbox: Path, timeout: float = 2.0) -> Probe:
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.to_thread(_seed_writable, inbox)
    except TimeoutError:
        return Probe(False, f"{inbox}: timed out (slow or hung filesystem)")


async def probe_peer(peer: Peer, fleet_dir: Path,
                     budget_s: float | None = None) -> dict[str, Probe]:
    """Probe every channel to ``peer`` at once; ``budget_s`` caps each probe's timeout."""

    def t(name: str) -> float:
        return min(TIMEOUTS[name], budget_s) if budget_s else TIMEOUTS[name]

    probes: dict[str, Awaitable[Probe]] = {
        "http": probe_http(peer.health_url, t("http")),
        "ssh": probe_ssh(peer.host, peer.ssh_port, t("ssh")),
        "nats": probe_nats(peer.nats_host, peer.nats_port, t("nats")),
        "seed": probe_seed(fleet_dir / peer.name, t("seed")),
    }
    if peer.tunnel_port:
        probes["tunnel"] = probe_http(peer.tunnel_health_url, t("tunnel"))
    results = await asyncio.gather(*probes.values())
    return dict(zip(probes, results, strict=True))


# Superseded as the registered channel-diagnoser by healer.fleet.playbooks (all eight
# channels, fleet-aware); kept as the minimal transport-level diagnosis.
async def diagnose(ctx: PlaybookContext) -> dict[str, Any]:
    """Probe each channel to the peer once and report per-channel ok/detail."""
    peer: Peer = ctx.context["peer"]
    fleet_dir = Path(ctx.context.get("fleet_dir", ".fleet-messages"))
    # Leave a little of the run's time for writing the result.
    found = await probe_peer(peer, fleet_dir, budget_s=max(0.5, ctx.remaining() - 0.5))
    broken = sorted(name for name, p in found.items() if not p.ok)
    actions = [f"probed {name}: {'ok' if p.ok else 'FAILED'} ({p.detail})"
               for name, p in sorted(found.items())]
    if broken:
        summary = (f"{len(found) - len(broken)} of {len(found)} channels to {peer.name} work; "
                   f"broken: {', '.join(broken)}.")
    else:
        summary = f"All {len(found)} channels to {peer.name} work."
    ctx.log.info("channel-diagnoser %s: %s", peer.name, summary)
    return {
        "status": "diagnosed" if broken else "ok",
        "summary": summary,
        "actions_taken": actions,
        "channels": {name: p.as_result() for name, p in found.items()},
        "data": {"peer": {"name": peer.name, "host": peer.host, "port": peer.port,
                          "ssh_port": peer.ssh_port, "nats": f"{peer.nats_host}:"
                          f"{peer.nats_port}", "tunnel_port": peer.tunnel_port}},
    }
