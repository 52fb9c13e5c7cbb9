"""Where a node may move, and proof that it is there: the config updater's two walls.

A heartbeat or a discovery command can say a node is now somewhere else. Before the fleet
config (and with it the fleet token and every later message) follows, the new address must:

1. **lie inside the fleet's networks** (``destination_refusal``), decided from the text alone,
   before any connection:

   - never an unspecified (``0.0.0.0``, ``::``), link-local (``169.254.0.0/16`` — cloud
     metadata — and ``fe80::/10``), multicast, broadcast or reserved address;
   - inside ``fleet.allowed_networks``, or by default loopback plus the /24 (IPv4) or /64
     (IPv6) of every configured node's current address;
   - a host name only when the fleet config already names it, and then every address it
     resolves to must pass the same checks; any other name is refused without a lookup.

2. **answer the identity challenge** (``challenge``): ``GET /identity?nonce=<random>`` must
   return this node's id and ``signing.prove(secret, node, nonce, host, port)`` for the address
   asked. ``{}``, another node's id, a wrong proof or a proof for another address (a server
   relaying the challenge to the real node) is refused.

A refused move is never a config change: the config updater hands it to a person.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import socket
import time
from collections.abc import Iterable
from typing import Any

from healer.agents.probes import reason
from healer.config import NodeEntry
from healer.errors import ConfigError
from healer.fleet.signing import proves

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
_BROADCAST = ipaddress.ip_address("255.255.255.255")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")


def never_allowed(ip: IPAddress) -> str:
    """Why ``ip`` is never a node's address ("" when it may be)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified or (isinstance(ip, ipaddress.IPv4Address) and ip in _THIS_NETWORK):
        return "an unspecified address"
    if ip.is_link_local:
        return "a link-local address (where cloud metadata services answer)"
    if ip.is_multicast:
        return "a multicast address"
    if ip == _BROADCAST:
        return "the broadcast address"
    if ip.is_reserved:
        return "a reserved address"
    return ""


def allowed_networks(configured: Iterable[str], nodes: Iterable[NodeEntry]) -> list[IPNetwork]:
    """``fleet.allowed_networks``, or loopback plus the network of each node's address."""
    configured = list(configured)
    if configured:
        nets: list[IPNetwork] = []
        for text in configured:
            try:
                nets.append(ipaddress.ip_network(text, strict=False))
            except ValueError as exc:
                raise ConfigError(str(exc), key="fleet.allowed_networks",
                                  expected="CIDR networks such as 192.168.1.0/24") from exc
        return nets
    nets = list(LOOPBACK)
    for node in nodes:
        for host in {node.host, node.lan_ip} - {""}:
            try:
                ip = ipaddress.ip_address(host)
            except ValueError:
                continue  # a name: it gives no network
            if not never_allowed(ip):
                prefix = 24 if ip.version == 4 else 64
                nets.append(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))
    return list(dict.fromkeys(nets))


async def destination_refusal(host: str, configured: Iterable[str],
                              nodes: Iterable[NodeEntry]) -> str:
    """Why ``host`` may not become a node's address ("" when it may)."""
    nodes = list(nodes)
    nets = allowed_networks(configured, nodes)
    try:
        addresses: list[IPAddress] = [ipaddress.ip_address(host)]
    except ValueError:
        known = {h for n in nodes for h in (n.host, n.lan_ip) if h}
        if host not in known:
            return (f"{host} is a host name the fleet config does not know; healer moves "
                    "nodes to addresses, or to names the config already has")
        try:
            infos = await asyncio.to_thread(socket.getaddrinfo, host, None,
                                            type=socket.SOCK_STREAM)
        except OSError as exc:
            return f"{host} does not resolve: {exc}"
        addresses = [ipaddress.ip_address(str(i[4][0]).split("%")[0]) for i in infos]
        if not addresses:
            return f"{host} resolves to nothing"
    for ip in addresses:
        why = never_allowed(ip)
        if why:
            return f"{host} ({ip}) is {why}"
        if not any(ip in net for net in nets):
            shown = ", ".join(str(n) for n in nets[:8]) + (" …" if len(nets) > 8 else "")
            return (f"{host} ({ip}) is outside the fleet's networks ({shown}; setting "
                    "fleet.allowed_networks)")
    return ""


async def challenge(http: Any, secret: str, node_id: str, host: str, port: int,
                    timeout: float) -> tuple[bool, str]:
    """Ask ``host:port`` to prove it is ``node_id``; (proven, what happened)."""
    nonce = secrets.token_urlsafe(24)
    base = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    start = time.monotonic()
    try:
        resp = await http.get(f"{base}/identity", params={"nonce": nonce}, timeout=timeout,
                              follow_redirects=False)
    except Exception as exc:
        return False, f"identity challenge to {host}:{port} failed: {reason(exc)}"
    ms = (time.monotonic() - start) * 1000
    if resp.status_code != 200:
        return False, f"identity challenge: HTTP {resp.status_code}"
    try:
        body = resp.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return False, "identity challenge: the answer is not a JSON object"
    answered = body.get("nodeId")
    if answered != node_id:
        return False, (f"identity challenge: answered as {str(answered)[:64]!r}, expected "
                       f"{node_id!r}")
    if not proves(secret, node_id, nonce, host, port, body.get("proof")):
        return False, (f"identity challenge: no valid proof of {node_id}'s fleet secret for "
                       f"{host}:{port}")
    return True, f"{node_id} proved its identity at {host}:{port} ({ms:.0f} ms)"
