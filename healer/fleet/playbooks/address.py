"""The playbooks that repair how this node reaches a peer: tunnel-establisher (the SSH tunnel)
and config-updater (the peer's address in the fleet config)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from typing import Any

from healer.agents.playbooks import PlaybookContext, playbook
from healer.config import NodeEntry
from healer.core.names import safe_host, safe_port
from healer.core.proc import run_async
from healer.errors import ConfigError, UnsafeNameError
from healer.fleet.channels import FleetContext
from healer.fleet.moves import challenge, destination_refusal
from healer.fleet.natslink import subject
from healer.fleet.peers import update_address
from healer.fleet.playbooks.common import as_result, last_line, open_fleet, probe_one, probe_until
from healer.fleet.ssh import find_tunnels, forward_spec, start_tunnel
from healer.fleet.ssh import stop_tunnels as kill_tunnels


@playbook("tunnel-establisher")
async def establish_tunnel(ctx: PlaybookContext) -> dict[str, Any]:
    """(Re)start the SSH tunnel to the node's daemon and verify through it."""
    async with open_fleet(ctx) as (fctx, node):
        actions: list[str] = []
        if not node.tunnel_port:
            return {"status": "escalated", "summary": f"{node.node_id} has no tunnel_port.",
                    "error": "no tunnel_port in the node's fleet config entry"}
        now = await probe_one(fctx, node, "tunnel")
        actions.append(f"GET /health through 127.0.0.1:{node.tunnel_port}: {now.detail}")
        if now.ok:
            return {"status": "ok", "actions_taken": actions,
                    "channels": {"tunnel": as_result(now)},
                    "summary": f"The tunnel to {node.node_id} works."}
        existing = await find_tunnels(node.tunnel_port)
        if existing:
            killed = await kill_tunnels(node.tunnel_port)
            actions.append(f"stopped stale tunnel process(es) {killed} "
                           f"({', '.join(sorted(set(existing.values())))})")
        res, pid = await start_tunnel(fctx.fleet, node, fctx.work_dir)
        actions.append(f"started ssh -f -N -L {forward_spec(node)}: exit {res.returncode}"
                       + (f", pid {pid}" if pid else ""))
        if not res.ok:
            ssh = await probe_one(fctx, node, "ssh")
            why = last_line(res.stderr) or f"exit {res.returncode}"
            return {"status": "failed", "actions_taken": actions, "error": why,
                    "channels": {"tunnel": as_result(now), "ssh": as_result(ssh)},
                    "summary": (f"SSH itself fails ({ssh.detail}): the ssh channel is the "
                                "problem, not the tunnel.") if not ssh.ok else
                    f"The tunnel to {node.node_id} could not be started: {why}"}
        after = await probe_until(fctx, node, "tunnel", 3.0)
        actions.append(f"GET /health through the tunnel: {after.detail}")
        if not after.ok:
            return {"status": "failed", "actions_taken": actions,
                    "channels": {"tunnel": as_result(after)}, "error": after.detail,
                    "summary": f"The tunnel to {node.node_id} runs but its daemon does not "
                               "answer through it."}
        return {"status": "healed", "actions_taken": actions,
                "channels": {"tunnel": as_result(after)},
                "summary": f"Tunnel 127.0.0.1:{node.tunnel_port} → {node.host}:{node.port} "
                           "works.", "data": {"pid": pid}}


async def _heard(fctx: FleetContext, node: NodeEntry) -> tuple[str, int] | None:
    """Where the node last said it is: a heartbeat already heard, or one heard now."""
    beat = fctx.heartbeats.get(node.node_id)
    if beat is not None and fctx.heartbeats.age(node.node_id) is not None and \
            (fctx.heartbeats.age(node.node_id) or 0) < 3 * fctx.fleet.stale_s:
        return beat.host, beat.port
    link = fctx.nats()
    if not await link.wait_connected(2.0):
        return None
    got: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()

    async def on_beat(m: Any) -> None:
        rec = fctx.heartbeats.record(json.loads(m.data or b"{}"))
        if rec is not None and rec.node_id == node.node_id and not got.done():
            got.set_result((rec.host, rec.port))

    sub = await link.nc.subscribe(subject(node.node_id, "heartbeat"), cb=on_beat)
    try:
        return await asyncio.wait_for(got, max(2.0, 3 * fctx.fleet.heartbeat_s))
    except TimeoutError:
        return None
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def _discover(fctx: FleetContext, node: NodeEntry) -> tuple[str, int] | None:
    argv = [a.replace("{node}", node.node_id) for a in fctx.fleet.discovery_command]
    if not argv:
        return None
    res = await run_async(argv, timeout=10)
    if not res.ok:
        return None
    try:
        data = json.loads(res.stdout)
        return safe_host(data["host"], "host"), safe_port(int(data.get("port", node.port)))
    except (ValueError, KeyError, TypeError, UnsafeNameError):
        return None


@playbook("config-updater")
async def update_config(ctx: PlaybookContext) -> dict[str, Any]:
    """Find the node's current address (signed heartbeat, else discovery command); move the
    node there only when the address lies inside the fleet's networks and the node there
    proves its identity (``healer.fleet.moves``) — anything else goes to a person; rewrite the
    fleet config atomically, re-probe."""
    async with open_fleet(ctx) as (fctx, node):
        actions: list[str] = []
        now = await probe_one(fctx, node, "http")
        actions.append(f"GET http://{node.host}:{node.port}/health: {now.detail}")
        if now.ok:
            return {"status": "ok", "actions_taken": actions, "channels": {"http": as_result(now)},
                    "summary": f"{node.node_id} answers at its configured address."}
        found, source = await _heard(fctx, node), "its heartbeat"
        if found is None:
            found, source = await _discover(fctx, node), "the discovery command"
        if found is None:
            return {"status": "failed", "actions_taken": actions,
                    "error": "no heartbeat from the node and no discovery command result",
                    "summary": f"Could not learn {node.node_id}'s current address (no "
                               "heartbeat heard, no discovery command configured); healer "
                               "never scans networks."}
        host, port = found
        actions.append(f"{source} says {node.node_id} is at {host}:{port}")
        if (host, port) == (node.host, node.port):
            return {"status": "failed", "actions_taken": actions, "error": now.detail,
                    "summary": f"{node.node_id} announces its configured address, which does "
                               f"not answer ({now.detail})."}
        try:
            refusal = await destination_refusal(host, fctx.fleet.allowed_networks,
                                                fctx.view.nodes.values())
        except ConfigError as exc:
            refusal = str(exc)
        if refusal:
            actions.append(f"refused the move before any connection: {refusal}")
            return _refused(node, host, port, source, refusal, actions)
        proven, detail = await challenge(fctx.http, fctx.fleet.secret, node.node_id, host, port,
                                         fctx.timeout("http"))
        actions.append(detail)
        if not proven:
            return _refused(node, host, port, source, detail, actions)
        moved = dataclasses.replace(node, host=host, port=port)
        check = await probe_one(fctx, moved, "http")
        actions.append(f"GET http://{host}:{port}/health: {check.detail}")
        if not check.ok:
            return {"status": "failed", "actions_taken": actions, "error": check.detail,
                    "summary": f"{host}:{port} does not answer as {node.node_id}; config "
                               "left unchanged."}
        if not fctx.view.exists or node.node_id not in fctx.view.nodes:
            return {"status": "failed", "actions_taken": actions,
                    "error": "the node is not in the fleet config",
                    "summary": f"{node.node_id} is at {host}:{port}, but there is no fleet "
                               "config entry to update."}
        await asyncio.to_thread(update_address, fctx.view.path, node.node_id, host, port)
        fctx.view.load(force=True)
        actions.append(f"rewrote {fctx.view.path}: {node.node_id} {node.host}:{node.port} → "
                       f"{host}:{port}")
        after = await probe_one(fctx, fctx.view.peer(node.node_id), "http")
        actions.append(f"re-probed: {after.detail}")
        return {"status": "healed" if after.ok else "failed", "actions_taken": actions,
                "channels": {"http": as_result(after)},
                "summary": f"{node.node_id} moved from {node.host}:{node.port} to "
                           f"{host}:{port}; the fleet config says so now.",
                "data": {"old_host": node.host, "old_port": node.port, "new_host": host,
                         "new_port": port, "source": source}}


def _refused(node: NodeEntry, host: str, port: int, source: str, why: str,
             actions: list[str]) -> dict[str, Any]:
    """A move healer will not make: a person decides (the episode escalates at once)."""
    return {"status": "escalated", "actions_taken": actions, "error": why,
            "summary": f"{source} says {node.node_id} moved to {host}:{port}, but healer "
                       f"refused to follow: {why}. The fleet config is unchanged; if the move "
                       "is real, edit the node's host and port in the fleet config (or widen "
                       "fleet.allowed_networks).",
            "data": {"refused_host": host, "refused_port": port, "source": source,
                     "reason": why}}
