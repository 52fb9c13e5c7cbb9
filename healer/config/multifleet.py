"""The fleet's node list, ``.multifleet/config.json`` (``fleet.config``): read, validated, and
hostile names refused before anything uses them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer.config.loader import read_json_file
from healer.core.names import safe_host, safe_name, safe_port, safe_user
from healer.errors import ConfigError, UnsafeNameError


@dataclass(frozen=True)
class NodeEntry:
    """One fleet node as the multifleet config describes it."""

    node_id: str
    host: str
    user: str = ""
    port: int = 8855
    role: str = "worker"
    mac_address: str = ""
    lan_ip: str = ""
    tailscale_ip: str = ""
    tunnel_port: int = 0
    ssh_port: int = 22
    nats_url: str = ""
    restart: tuple[str, ...] = ()
    nats_restart: tuple[str, ...] = ()
    interactive_marker: str = ""
    fleet_dir: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MultifleetConfig:
    chief: str
    chief_host: str
    nodes: Mapping[str, NodeEntry]
    path: str = ""
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Nodes left out because their entry is invalid: node id (as written) → why."""


def _check_nats_url(url: str) -> None:
    """``nats://host:port``: a safe host and port, nothing else (no credentials, no options)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("nats", "tls"):
        raise UnsafeNameError(url, "nats_url", "must start with nats:// or tls://")
    host, _, port = rest.rstrip("/").rpartition(":")
    if not host or not port.isdigit():
        raise UnsafeNameError(url, "nats_url", "must be nats://<host>:<port>")
    safe_host(host.strip("[]"), "nats_url host")
    safe_port(int(port), "nats_url port")


def _check_node(node_id: str, entry: Mapping[str, Any]) -> None:
    """``UnsafeNameError`` for a node whose id, host, user, addresses or NATS URL are unsafe."""
    safe_name(node_id, "node id")
    safe_host(entry["host"], "host")
    if entry.get("user"):
        safe_user(entry["user"], "user")
    for ip_key in ("lan_ip", "tailscale_ip"):
        if entry.get(ip_key):
            safe_host(entry[ip_key], ip_key)
    safe_port(entry.get("port", 8855))
    if entry.get("nats_url"):
        _check_nats_url(entry["nats_url"])


def load_multifleet(path: str | Path) -> MultifleetConfig:
    """Read and validate ``.multifleet/config.json``; hostile names are refused here.

    A node whose entry is invalid (schema, or an unsafe id, host, user, address or NATS URL)
    is left out and listed in ``skipped`` with the reason; the other nodes are used. The file
    as a whole is refused (``ConfigError``) when it is not JSON, has the wrong shape outside
    the node entries or a bad ``chief.nodeId``, or when no valid node is left.
    """
    from healer.core.schemas import describe, validator

    p = Path(path)
    data = read_json_file(p)
    bad: dict[str, tuple[str, str]] = {}  # node id → (dotted key, message)
    found = sorted(validator("multifleet-config").iter_errors(data),
                   key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    for error in found:
        key, message = describe(error)
        where = list(error.absolute_path)
        if len(where) < 2 or where[0] != "nodes":
            raise ConfigError(message, file=str(p), key=key)
        bad.setdefault(str(where[1]), (key, message))
    known = {f.name for f in dataclasses.fields(NodeEntry)}
    argvs = ("restart", "nats_restart")
    nodes: dict[str, NodeEntry] = {}
    for node_id, entry in data.get("nodes", {}).items():
        if node_id in bad:
            continue
        try:
            _check_node(node_id, entry)
        except UnsafeNameError as exc:
            bad[node_id] = (f"nodes.{node_id}", str(exc))
            continue
        fields = {k: v for k, v in entry.items()
                  if k in known and k not in (*argvs, "node_id", "extra")}
        extra = {k: v for k, v in entry.items() if k not in known}
        nodes[node_id] = NodeEntry(node_id=node_id, extra=extra, **fields,
                                   **{k: tuple(entry.get(k, ())) for k in argvs})
    if bad and not nodes:
        key, message = next(iter(bad.values()))
        raise ConfigError(f"{message} (and no valid node is left)", file=str(p), key=key,
                          expected="at least one valid node entry")
    chief = data.get("chief", {})
    chief_id = chief.get("nodeId", "")
    if chief_id:
        try:
            safe_name(chief_id, "chief node id")
        except UnsafeNameError as exc:
            raise ConfigError(exc.reason, file=str(p), key="chief.nodeId") from exc
    skipped = {node_id: f"{key}: {message}" for node_id, (key, message) in sorted(bad.items())}
    return MultifleetConfig(chief=chief_id, chief_host=chief.get("host", ""), nodes=nodes,
                            path=str(p), skipped=skipped)
