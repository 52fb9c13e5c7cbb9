"""The fleet's channels, P1 to P7: each a probe and a send, each bounded by its own timeout.

=====  =========  ===========================================================  ==========
level  name       how                                                           timeout s
=====  =========  ===========================================================  ==========
P1     nats       request ``fleet.<node>.ping`` / ``fleet.<node>.message``      2 + 2 ¹
P2     http       ``GET /health`` / ``POST /message`` on ``<host>:<port>``     3
P2     tunnel     the same through ``127.0.0.1:<tunnel_port>`` (SSH tunnel)     3
P3     relay      ``POST /message`` to the chief's daemon, which forwards it    3
P4     seed       a seed file in ``<fleet dir>/<node>/``                        2
P5     ssh        ``ssh … true`` / a seed file written on the node over SSH     8
P6     wol        Wake-on-LAN magic packet (send only; reports "sent")          3
P7     git        a seed file committed in the fleet dir's git repository      10
=====  =========  ===========================================================  ==========

¹ connecting to the local NATS server (a one-shot CLI's first probe) has a timeout of its own;
the request to the peer then has the whole of another.

Nothing here blocks the event loop: network calls are async, subprocesses are awaited
(``run_async``), file work goes to a thread. ``probe_fleet`` probes every channel of every
peer at once, so probing N peers costs about one timeout, not N × channels × timeout.

A peer that is not in the fleet config (an ad-hoc ``healer agents run … --var host=…``) is
probed at the transport level only (NATS ``INFO``, the SSH banner): nothing says it runs a
node daemon that would answer a ping.
"""

from __future__ import annotations

import abc
import asyncio
import json
import secrets
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from healer.agents.probes import probe_banner, probe_seed, reason
from healer.config import NodeEntry, Settings
from healer.core import seeds
from healer.core.git import git_async
from healer.fleet import messages
from healer.fleet.context import FleetContext
from healer.fleet.natslink import LinkDown, subject
from healer.fleet.peers import nats_hostport
from healer.fleet.ssh import run_remote


@dataclass(frozen=True)
class Outcome:
    """What one probe or one send found. ``status``: ok/failed (probes), delivered/sent/failed
    (sends)."""

    ok: bool
    detail: str
    latency_ms: float | None = None
    status: str = ""

    def as_result(self) -> dict[str, Any]:
        return {"ok": self.ok, "detail": self.detail[:2000],
                "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 1)}


def _ms(start: float) -> float:
    return (time.monotonic() - start) * 1000


class Channel(abc.ABC):
    """One way to reach a peer."""

    name: ClassVar[str]
    level: ClassVar[str]
    send_only: ClassVar[bool] = False
    carries_repairs: ClassVar[bool] = True
    #: how many timeouts a probe may take: a channel that first connects somewhere (NATS: the
    #: local server) gives the connect and the exchange a timeout each.
    stages: ClassVar[int] = 1

    def prepare(self, ctx: FleetContext, nodes: list[NodeEntry]) -> None:
        """Set-up the probes of ``nodes`` on this channel share (imports, a connection
        started), done before any probe's clock starts. Most channels need none."""
        return None

    async def applies(self, ctx: FleetContext, node: NodeEntry) -> str:
        """Why this channel does not apply to ``node`` ("" when it does)."""
        return ""

    @abc.abstractmethod
    async def probe(self, ctx: FleetContext, node: NodeEntry, timeout: float) -> Outcome: ...

    @abc.abstractmethod
    async def send(self, ctx: FleetContext, node: NodeEntry, msg: dict[str, Any],
                   timeout: float) -> Outcome: ...


# ---------------------------------------------------------------------------------------------
# P1 NATS


class NatsChannel(Channel):
    name, level = "nats", "P1"
    stages = 2

    def prepare(self, ctx: FleetContext, nodes: list[NodeEntry]) -> None:
        # A one-shot CLI imports nats-py (~0.2 s, a second on a busy machine) and connects at
        # its first probe: the import must not block the loop while other probes' clocks run.
        if any(ctx.in_fleet(n) for n in nodes):
            import nats  # noqa: F401

            ctx.nats()

    async def probe(self, ctx: FleetContext, node: NodeEntry, timeout: float) -> Outcome:
        if not ctx.in_fleet(node):
            host, port = nats_hostport(node.nats_url or f"nats://{node.host}:4222")
            p = await probe_banner(host, port, b"INFO ", timeout)
            return Outcome(p.ok, p.detail, p.latency_ms, "ok" if p.ok else "failed")
        return await self._request(ctx, node, "ping", {"from": ctx.self_id}, timeout)

    async def send(self, ctx: FleetContext, node: NodeEntry, msg: dict[str, Any],
                   timeout: float) -> Outcome:
        return await self._request(ctx, node, "message", ctx.signed(msg), timeout)

    async def _request(self, ctx: FleetContext, node: NodeEntry, what: str,
                       data: dict[str, Any], timeout: float) -> Outcome:
        import nats.errors

        link = ctx.nats()
        # Connecting to the local server is not the peer's latency: it gets its own timeout
        # (``stages``), and the request to the peer the whole of another.
        if not await link.wait_connected(timeout):
            return Outcome(False, f"local NATS server {link.url} unreachable"
                           + (f" ({link.last_error})" if link.last_error else ""), None, "failed")
        subj = subject(node.node_id, what)
        start = time.monotonic()
        try:
            reply = await link.request(subj, data, timeout)
        except nats.errors.NoRespondersError:
            return Outcome(False, f"no responder on {subj} (the node's daemon is not on NATS)",
                           None, "failed")
        except LinkDown as exc:
            return Outcome(False, str(exc), None, "failed")
        except Exception as exc:
            return Outcome(False, reason(exc), None, "failed")
        if what == "ping":
            if reply.get("nodeId") != node.node_id:
                return Outcome(False, f"pong from {reply.get('nodeId')!r}, expected "
                               f"{node.node_id!r}", _ms(start), "failed")
            return Outcome(True, f"pong from {node.node_id}", _ms(start), "ok")
        ok = reply.get("status") == "delivered"
        return Outcome(ok, f"{subj}: {reply.get('status') or reply.get('error')}", _ms(start),
                       "delivered" if ok else "failed")


# ---------------------------------------------------------------------------------------------
# P2 HTTP, direct and through the tunnel; P3 relay


async def _health(ctx: FleetContext, url: str, node: NodeEntry, timeout: float) -> Outcome:
    start = time.monotonic()
    try:
        resp = await ctx.http.get(url, timeout=timeout)
    except Exception as exc:
        return Outcome(False, reason(exc), None, "failed")
    ms = _ms(start)
    if not 200 <= resp.status_code < 300:
        return Outcome(False, f"HTTP {resp.status_code}", ms, "failed")
    try:
        body = resp.json()
    except ValueError:
        body = {}
    answered = body.get("nodeId") if isinstance(body, dict) else None
    if answered is not None and answered != node.node_id:
        # Another node took the address: the peer moved (DHCP) or a port was reused.
        return Outcome(False, f"HTTP {resp.status_code} from node {str(answered)[:64]!r}, "
                       f"expected {node.node_id!r}", ms, "failed")
    return Outcome(True, f"HTTP {resp.status_code}", ms, "ok")


async def _post(ctx: FleetContext, url: str, msg: dict[str, Any], timeout: float) -> Outcome:
    start = time.monotonic()
    try:
        resp = await ctx.http.post(url, json=ctx.signed(msg), headers=ctx.auth(),
                                   timeout=timeout)
    except Exception as exc:
        return Outcome(False, reason(exc), None, "failed")
    try:
        body = resp.json()
    except ValueError:
        body = {}
    status = body.get("status") if isinstance(body, dict) else None
    if resp.status_code < 300 and status in ("delivered", "relayed"):
        return Outcome(True, f"HTTP {resp.status_code} {status}", _ms(start), "delivered")
    why = body.get("error") if isinstance(body, dict) else ""
    return Outcome(False, f"HTTP {resp.status_code}" + (f": {why}" if why else ""), _ms(start),
                   "failed")


def _base(host: str, port: int) -> str:
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


class _OverHttp(Channel):
    def prepare(self, ctx: FleetContext, nodes: list[NodeEntry]) -> None:
        # A one-shot CLI imports httpx and makes its client at the first request (~0.3 s, a
        # few on a busy machine): not on a probe's clock, or a closed port reads "timed out".
        if nodes:
            ctx.http  # noqa: B018 - made now


class HttpChannel(_OverHttp):
    name, level = "http", "P2"

    async def probe(self, ctx: FleetContext, node: NodeEntry, timeout: float) -> Outcome:
        return await _health(ctx, _base(node.host, node.port) + "/health", node, timeout)

    async def send(self, ctx: FleetContext, node: NodeEntry, msg: dict[str, Any],
                   timeout: float) -> Outcome:
        return await _post(ctx, _base(node.host, node.port) + "/message", msg, timeout)


class TunnelChannel(_OverHttp):
    name, level = "tunnel", "P2"

    async def applies(self, ctx: FleetContext, node: NodeEntry) -> str:
        return "" if node.tunnel_port else "no tunnel_port configured"

    async def probe(self, ctx: FleetContext, node: NodeEntry, timeout: float) -> Outcome:
        return await _health(ctx, _base("127.0.0.1", node.tunnel_port) + "/health", node,
                             timeout)

    async def send(self, ctx: FleetContext, node: NodeEntry, msg: dict[str, Any],
                   timeout: float) -> Outcome:
        return await _post(ctx, _base("127.0.0.1", node.tunnel_port) + "/message", msg, timeout)


class RelayChannel(_OverHttp):
    """P3: the chief's daemon forwards the message over its own channels."""

    name, level = "relay", "P3"

    async def applies(self, ctx: FleetContext, node: NodeEntry) -> str:
        chief = ctx.view.chief if ctx.view.exists else None
        if chief is None:
            return "no chief in the fleet config"
        if chief.node_id in (node.node_id, ctx.self_id):
            return "the chief cannot relay to or for itself"
        return ""

    async def probe(self, ctx: FleetContext, node: NodeEntry, timeout: float) -> Outcome:
        chief = ctx.view.chief
        assert chief is not None
        out = await _health(ctx, _base(chief.host, chief.port) + "/health", chief, timeout)
        detail = f"chief {chief.node_id}: {out.detail}"
        return Outcome(out.ok, detail, out.latency_ms, out.status)

    async def send(self, ctx: FleetContext, node: NodeEntry, msg: dict[str, Any],
                   timeout: float) -> Outcome:
        chief = ctx.view.chief
        assert chief is not None
        return await _post(ctx, _base(chief.host, chief.port) + "/message", msg, timeout)


# ---------------------------------------------------------------------------------------------
# P4 seed file, P5 SSH


class SeedChannel(Channel):
    name, level = "seed", "P4"

    async def probe(self, ctx: FleetContext, node: NodeEntry, timeout: float) -> Outcome:
        p = await probe_seed(ctx.fleet_dir / node.node_id, timeout)
        return Outcome(p.ok, p.detail, p.latency_ms, "ok" if p.ok else "failed")

    async def send(self, ctx: FleetContext, node: NodeEntry, msg: dict[str, Any],
                   timeout: float) -> Outcome:
        start = time.monotonic()
        try:
            path = await asyncio.wait_for(asyncio.to_thread(
                seeds.write, ctx.fleet_dir, messages.to_seed(msg)), timeout)
        except Exception as exc:
            return Outcome(False, reason(exc), None, "failed")
        return Outcome(True, f"seed file {path.name}", _ms(start), "delivered")


_REMOTE_WRITE = 'mkdir -p -- "$1" && cat > "$1/.$2.tmp" && mv -f -- "$1/.$2.tmp" "$1/$2"'


class SshChannel(Channel):
    name, level = "ssh", "P5"

    async def probe(self, ctx: FleetContext, node: NodeEntry, timeout: float) -> Outcome:
        if not ctx.in_fleet(node):
            p = await probe_banner(node.host, node.ssh_port, b"SSH-", timeout)
            return Outcome(p.ok, p.detail, p.latency_ms, "ok" if p.ok else "failed")
        start = time.monotonic()
        res = await run_remote(ctx.fleet, node, ["true"], timeout=timeout)
        if res.ok:
            return Outcome(True, "ssh ok", _ms(start), "ok")
        why = "timed out" if res.timed_out else (res.stderr.strip().splitlines() or
                                                 [f"exit {res.returncode}"])[-1]
        return Outcome(False, why[:300], None, "failed")

    async def send(self, ctx: FleetContext, node: NodeEntry, msg: dict[str, Any],
                   timeout: float) -> Outcome:
        start = time.monotonic()
        seed = messages.to_seed(msg)
        inbox = f"{node.fleet_dir or '.fleet-messages'}/{node.node_id}"
        name = (time.strftime("%Y%m%d-%H%M%S", time.gmtime())
                + f"-{secrets.randbelow(9000) + 1000}-from-{seed.sender}.md")
        res = await run_remote(ctx.fleet, node, ["sh", "-c", _REMOTE_WRITE, "sh", inbox, name],
                               timeout=timeout, input=seeds.render(seed))
        if res.ok:
            return Outcome(True, f"seed file {name} written over SSH", _ms(start), "delivered")
        return Outcome(False, "timed out" if res.timed_out else
                       (res.stderr.strip() or f"exit {res.returncode}")[-300:], None, "failed")


# ---------------------------------------------------------------------------------------------
# P6 Wake-on-LAN, P7 git


def magic_packet(mac: str) -> bytes:
    raw = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    if len(raw) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    return b"\xff" * 6 + raw * 16


class WolChannel(Channel):
    """P6: wakes a sleeping machine; it delivers nothing, so it reports "sent"."""

    name, level = "wol", "P6"
    send_only = True

    async def applies(self, ctx: FleetContext, node: NodeEntry) -> str:
        return "" if node.mac_address else "no mac_address configured"

    async def probe(self, ctx: FleetContext, node: NodeEntry, timeout: float) -> Outcome:
        return Outcome(True, "send-only channel (not probed)", None, "ok")

    async def send(self, ctx: FleetContext, node: NodeEntry, msg: dict[str, Any],
                   timeout: float) -> Outcome:
        start = time.monotonic()
        addr = (ctx.fleet.wol_address, ctx.fleet.wol_port)
        try:
            packet = magic_packet(node.mac_address)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                if addr[0].endswith(".255"):  # only a configured broadcast address gets it
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                sock.sendto(packet, addr)
        except (OSError, ValueError) as exc:
            return Outcome(False, reason(exc), None, "failed")
        return Outcome(True, f"magic packet for {node.mac_address} sent to {addr[0]}:{addr[1]}",
                       _ms(start), "sent")


class GitChannel(Channel):
    """P7: a seed file committed (and pushed, if configured) in the fleet dir's repository.

    git runs inert (``healer.core.git``): no hooks, no fsmonitor, no inherited credentials;
    a push goes only over ``file`` or ``http(s)`` without credentials of healer's.
    """

    name, level = "git", "P7"
    carries_repairs = False

    async def applies(self, ctx: FleetContext, node: NodeEntry) -> str:
        return "" if await ctx.git_repo() else f"{ctx.fleet_dir} is not in a git repository"

    async def probe(self, ctx: FleetContext, node: NodeEntry, timeout: float) -> Outcome:
        start = time.monotonic()
        res = await git_async(ctx.fleet_dir, "status", "--porcelain", "--untracked-files=no",
                              timeout=timeout)
        if res.ok:
            return Outcome(True, "git repository ok", _ms(start), "ok")
        return Outcome(False, "timed out" if res.timed_out else res.stderr.strip()[-300:],
                       None, "failed")

    async def send(self, ctx: FleetContext, node: NodeEntry, msg: dict[str, Any],
                   timeout: float) -> Outcome:
        start = time.monotonic()
        try:
            path = await asyncio.to_thread(seeds.write, ctx.fleet_dir, messages.to_seed(msg))
        except Exception as exc:
            return Outcome(False, reason(exc), None, "failed")
        steps = [["add", "--", str(path)],
                 ["-c", "user.name=healer", "-c", "user.email=healer@localhost",
                  "commit", "-q", "-m", f"fleet: {msg['type']} to {node.node_id}", "--",
                  str(path)]]
        if ctx.fleet.git_push:
            steps.append(["push", "-q"])
        for args in steps:
            left = timeout - (time.monotonic() - start)
            res = await git_async(ctx.fleet_dir, *args, timeout=max(0.1, left))
            if not res.ok:
                verb = next(a for a in args if not a.startswith(("-", "user.")))
                return Outcome(False, f"{verb}: " + ("timed out" if res.timed_out else
                                                     res.stderr.strip()[-300:]), None,
                               "failed")
        return Outcome(True, f"committed {path.name}", _ms(start), "delivered")


CHANNELS: dict[str, Channel] = {c.name: c for c in (
    NatsChannel(), HttpChannel(), TunnelChannel(), RelayChannel(), SeedChannel(), SshChannel(),
    WolChannel(), GitChannel())}


def enabled(settings: Settings) -> list[Channel]:
    """The configured channels, in ladder order."""
    return [CHANNELS[n] for n in settings.fleet.channels if n in CHANNELS]


# ---------------------------------------------------------------------------------------------
# Probing


@dataclass
class PeerProbe:
    """Every channel to one peer, probed at one moment."""

    peer: str
    at: float
    channels: dict[str, Outcome] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def broken(self) -> list[str]:
        return [n for n, o in self.channels.items() if not o.ok]

    @property
    def ok(self) -> bool:
        return not self.broken

    def to_dict(self) -> dict[str, Any]:
        return {"peer": self.peer, "at": self.at, "ok": self.ok, "broken": self.broken,
                "channels": {n: o.as_result() for n, o in self.channels.items()},
                "skipped": dict(self.skipped)}


async def _bounded(ch: Channel, ctx: FleetContext, node: NodeEntry) -> Outcome:
    timeout = ctx.timeout(ch.name)
    try:
        # The channel has its own timeout; this one is the guarantee.
        return await asyncio.wait_for(ch.probe(ctx, node, timeout), timeout * ch.stages + 0.5)
    except TimeoutError:
        return Outcome(False, "timed out", None, "failed")
    except Exception as exc:
        return Outcome(False, reason(exc), None, "failed")


async def probe_peer(ctx: FleetContext, node: NodeEntry,
                     names: Iterable[str] | None = None) -> PeerProbe:
    """Probe every (or the named) channel to ``node``, all at once."""
    return (await probe_fleet(ctx, [node], names))[node.node_id]


async def probe_fleet(ctx: FleetContext, nodes: Iterable[NodeEntry],
                      names: Iterable[str] | None = None) -> dict[str, PeerProbe]:
    """Probe every channel of every node concurrently: about one timeout in all."""
    wanted = set(names) if names is not None else None
    chans = [c for c in enabled(ctx.settings) if wanted is None or c.name in wanted]
    nodes = list(nodes)
    result = {n.node_id: PeerProbe(n.node_id, time.time()) for n in nodes}
    jobs: list[tuple[str, str, Any]] = []
    reasons = await asyncio.gather(*(c.applies(ctx, n) for n in nodes for c in chans))
    it = iter(reasons)
    for n in nodes:
        for c in chans:
            why = next(it)
            if why:
                result[n.node_id].skipped[c.name] = why
            elif c.send_only:
                result[n.node_id].skipped[c.name] = "send-only"
            else:
                jobs.append((n.node_id, c.name, _bounded(c, ctx, n)))
    probed = {j[:2] for j in jobs}
    for c in chans:
        c.prepare(ctx, [n for n in nodes if (n.node_id, c.name) in probed])
    outcomes = await asyncio.gather(*(j[2] for j in jobs))
    for (peer, name, _), out in zip(jobs, outcomes, strict=True):
        result[peer].channels[name] = out
    return result


def dumps(probes: dict[str, PeerProbe]) -> str:
    return json.dumps({k: v.to_dict() for k, v in probes.items()}, indent=2)
