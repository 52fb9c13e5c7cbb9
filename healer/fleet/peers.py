"""The fleet as one node sees it: who is who (``.multifleet/config.json``) and who was heard.

``FleetView`` reads the node list (validated by ``healer.config.load_multifleet``: hostile
names, hosts and users never get past it), knows which node is this one and which is the chief,
and re-reads the file when it changes. A node whose entry is invalid is disabled — left out,
logged with the reason, and listed in ``skipped`` — while the other nodes keep working.
``Heartbeats`` remembers what each peer last announced (its address, its NATS server, whether
a person's interactive session is active there) — only from heartbeats signed with the fleet
secret (``healer.fleet.signing``), newer than the last one heard from that node.
``update_address`` is the one way the fleet config is rewritten: atomically, one node's
address fields only, under a lock.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from filelock import FileLock

from healer.agents.context import ChannelStatus, Peer
from healer.config import MultifleetConfig, NodeEntry, Settings, load_multifleet
from healer.core.files import atomic_write_bytes
from healer.core.names import safe_host, safe_name, safe_port
from healer.errors import ConfigError, SignatureError, UnsafeNameError, UsageError
from healer.fleet.signing import Verifier, signed_at

log = logging.getLogger(__name__)


class FleetView:
    """The node list, this node's id, the chief; re-read when the file changes."""

    def __init__(self, settings: Settings, *, path: str | Path | None = None,
                 self_id: str | None = None):
        self.settings = settings
        self.path = Path(path or settings.fleet.config).expanduser()
        self.self_id = self_id or settings.node
        self._config: MultifleetConfig | None = None
        self._stamp: tuple[int, int] | None = None

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_ino)

    def load(self, *, force: bool = False) -> MultifleetConfig:
        """The config; re-read if the file changed. A broken edit keeps the last good one."""
        stamp = self._file_stamp()
        if self._config is not None and stamp == self._stamp and not force:
            return self._config
        if stamp is None:
            if self._config is None:
                raise ConfigError("fleet config not found", file=str(self.path),
                                  expected="a .multifleet/config.json with a `nodes` map")
            return self._config
        try:
            config = load_multifleet(self.path)
        except ConfigError:
            if self._config is None:
                raise
            log.exception("fleet config %s is invalid; keeping the last good one", self.path)
        else:
            for node_id, why in config.skipped.items():
                log.warning("fleet config %s: node %r is disabled: %s", self.path, node_id, why)
            self._config = config
        self._stamp = stamp
        return self._config

    @property
    def skipped(self) -> dict[str, str]:
        """Nodes disabled because their entry is invalid: node id → why."""
        return dict(self.load().skipped)

    @property
    def exists(self) -> bool:
        return self.path.is_file()

    @property
    def nodes(self) -> dict[str, NodeEntry]:
        return dict(self.load().nodes)

    @property
    def peers(self) -> list[NodeEntry]:
        """Every node but this one, in config order."""
        return [n for n in self.load().nodes.values() if n.node_id != self.self_id]

    @property
    def chief(self) -> NodeEntry | None:
        cfg = self.load()
        if cfg.chief and cfg.chief in cfg.nodes:
            return cfg.nodes[cfg.chief]
        chiefs = [n for n in cfg.nodes.values() if n.role == "chief"]
        return chiefs[0] if chiefs else None

    @property
    def me(self) -> NodeEntry | None:
        return self.load().nodes.get(self.self_id)

    def peer(self, name: str) -> NodeEntry:
        """The peer called ``name``; ``UsageError`` listing the known ones otherwise."""
        try:
            safe_name(name, "peer name")
        except UnsafeNameError as exc:
            raise UsageError(str(exc)) from exc
        cfg = self.load()
        if name in cfg.skipped:
            raise UsageError(f"peer {name!r} is disabled: its entry in {self.path} is invalid "
                             f"({cfg.skipped[name]})")
        if name not in cfg.nodes:
            known = ", ".join(sorted(cfg.nodes)) or "none"
            raise UsageError(f"unknown peer {name!r} (nodes in {self.path}: {known})")
        return cfg.nodes[name]

    def endpoints(self) -> tuple[str, ...]:
        """Every ``host:port`` of the fleet's own channels — each node's daemon, SSH, NATS and
        tunnel port, and this node's NATS server: what a fleet agent's sandbox lets it reach
        (``AgentTask.network``). Empty without a readable fleet config."""
        try:
            nodes = list(self.nodes.values())
        except (ConfigError, OSError):
            nodes = []
        found = [e for node in nodes for e in as_agent_peer(node).endpoints()]
        host, port = nats_hostport(self.nats_url())
        found.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        return tuple(dict.fromkeys(found))

    def nats_url(self) -> str:
        """The NATS server this node talks to: configured, its own, the chief's, the default."""
        if self.settings.fleet.nats_url:
            return self.settings.fleet.nats_url
        for node in (self.me, self.chief) if self.exists else ():
            if node is not None and node.nats_url:
                return node.nats_url
        return self.settings.store.nats_urls[0]


def as_agent_peer(node: NodeEntry) -> Peer:
    """A node as the agent prompts know it."""
    return Peer(name=node.node_id, host=node.host, port=node.port, user=node.user,
                ssh_port=node.ssh_port, tunnel_port=node.tunnel_port, nats_url=node.nats_url,
                mac_address=node.mac_address, restart=tuple(node.restart))


def agent_context(node: NodeEntry, *, probe: Any = None, problem: str = "",
                  fleet: Any = None) -> dict[str, Any]:
    """What a fleet agent's task prompt is given about ``node``: the peer (validated names
    and hosts), the channels as ``probe`` (a ``PeerProbe``) saw them and the ``problem``
    (both fenced as data in the prompt: probe details are what peers answered)."""
    chans = [ChannelStatus(n, o.ok, o.detail, o.latency_ms)
             for n, o in (probe.channels.items() if probe is not None else ())]
    return {"fleet": fleet, "peer": as_agent_peer(node), "channels": chans, "problem": problem}


def from_agent_peer(peer: Peer) -> NodeEntry:
    """An ad-hoc peer (``healer agents run … --var host=…``) as a node entry."""
    return NodeEntry(node_id=peer.name, host=peer.host, user=peer.user, port=peer.port,
                     ssh_port=peer.ssh_port, tunnel_port=peer.tunnel_port,
                     nats_url=peer.nats_url, mac_address=peer.mac_address,
                     restart=tuple(peer.restart))


def nats_hostport(url: str) -> tuple[str, int]:
    rest = url.split("://", 1)[-1].rstrip("/")
    host, _, port = rest.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port) if port.isdigit() else 4222


# ---------------------------------------------------------------------------------------------
# What peers announce


@dataclass(frozen=True)
class Announcement:
    """A peer's last heartbeat: where it is and how it is."""

    node_id: str
    host: str
    port: int
    nats_url: str
    seen_at: float
    uptime_s: float = 0.0
    interactive_session: bool = False


def parse_heartbeat(data: Any, now: float) -> Announcement:
    """A heartbeat document → an announcement; ``UsageError`` for anything malformed."""
    if not isinstance(data, dict):
        raise UsageError("heartbeat is not an object")
    try:
        node = safe_name(data.get("nodeId"), "nodeId")
        host = safe_host(data.get("host"), "host")
        port = safe_port(data.get("port"), "port")
    except UnsafeNameError as exc:
        raise UsageError(str(exc)) from exc
    nats_url = data.get("natsUrl") or ""
    if not isinstance(nats_url, str) or len(nats_url) > 512:
        raise UsageError("natsUrl must be a short string")
    uptime = data.get("uptime_s", 0.0)
    return Announcement(node, host, port, nats_url, now,
                        float(uptime) if isinstance(uptime, int | float) else 0.0,
                        bool(data.get("interactive_session", False)))


class Heartbeats:
    """The latest signed heartbeat of every peer, and how old it is.

    A heartbeat counts only when ``verifier`` accepts its signature (no replay inside the
    window) and it was signed after the last one accepted from that node, so an older beat
    replayed with its own nonce cannot move a node back to where it was.
    """

    def __init__(self, verifier: Verifier, clock: Callable[[], float] = time.time):
        self.verifier = verifier
        self.clock = clock
        self._seen: dict[str, Announcement] = {}
        self._signed: dict[str, float] = {}

    @classmethod
    def for_settings(cls, settings: Settings, **kw: Any) -> Heartbeats:
        return cls(Verifier(settings.fleet.secret), **kw)

    @property
    def refused(self) -> dict[str, int]:
        """Heartbeats refused, by ``heartbeat:<reason>``."""
        return self.verifier.refusals.snapshot()

    def record(self, data: Any) -> Announcement | None:
        try:
            body = self.verifier.check(data, "heartbeat")
        except SignatureError:
            return None  # counted and logged by the verifier
        try:
            beat = parse_heartbeat(body, self.clock())
        except UsageError as exc:
            log.debug("ignored a malformed heartbeat: %s", exc)
            return None
        at = signed_at(data)
        if at <= self._signed.get(beat.node_id, float("-inf")):
            self.verifier.refusals.count("heartbeat", "replayed",
                                         f"{beat.node_id}: older than the last one heard")
            return None
        self._signed[beat.node_id] = at
        self._seen[beat.node_id] = beat
        return beat

    def get(self, node: str) -> Announcement | None:
        return self._seen.get(node)

    def age(self, node: str) -> float | None:
        """Seconds since ``node`` was last heard, or None if it never was."""
        beat = self._seen.get(node)
        return None if beat is None else max(0.0, self.clock() - beat.seen_at)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        now = self.clock()
        return {n: {"heartbeat_age_s": round(now - b.seen_at, 1), "host": b.host,
                    "port": b.port, "interactive_session": b.interactive_session}
                for n, b in sorted(self._seen.items())}


# ---------------------------------------------------------------------------------------------
# Rewriting a node's address


def update_address(path: str | Path, node: str, host: str, port: int) -> NodeEntry:
    """Point ``node`` at ``host:port`` in the fleet config, atomically, touching nothing else.

    The file is re-read under a lock, checked again after the change (so a bad address can
    never be written), and replaced in one rename. ``lan_ip`` follows ``host`` when it held
    the old address.
    """
    p = Path(path)
    safe_name(node, "node id")
    safe_host(host, "host")
    safe_port(port, "port")
    with FileLock(str(p) + ".lock", timeout=10):
        data = json.loads(p.read_text(encoding="utf-8"))
        entry = data.get("nodes", {}).get(node)
        if not isinstance(entry, dict):
            raise UsageError(f"node {node!r} is not in {p}")
        old = entry.get("host")
        entry["host"] = host
        entry["port"] = port
        if entry.get("lan_ip") and entry["lan_ip"] == old:
            entry["lan_ip"] = host
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        mode = p.stat().st_mode & 0o777
        checked = _check_candidate(p, text)
        if node in checked.skipped:
            raise ConfigError(checked.skipped[node], file=str(p), key=f"nodes.{node}",
                              expected="a valid node entry")
        atomic_write_bytes(p, text.encode(), mode=mode)
    log.info("fleet config: %s moved %s → %s:%s", node, old, host, port)
    return replace(checked.nodes[node])



def _check_candidate(path: Path, text: str) -> MultifleetConfig:
    """Validate ``text`` as the fleet config by loading it from a temp file beside ``path``.

    The temp file is made fresh (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600) under a random
    name: a symlink planted there is never followed, its target never written.
    """
    fd, name = _exclusive_temp(path.parent, f".{path.name}.", ".check")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        return load_multifleet(Path(name))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def _exclusive_temp(folder: Path, prefix: str, suffix: str) -> tuple[int, str]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        name = str(folder / f"{prefix}{secrets.token_hex(8)}{suffix}")
        try:
            return os.open(name, flags, 0o600), name
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temp file name in {folder}")
