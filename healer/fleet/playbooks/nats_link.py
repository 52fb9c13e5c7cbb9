"""The playbook that repairs NATS to a peer: nats-reconnector (local server, the peer's server,
its daemon's link, its route)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from typing import Any

from healer.agents.playbooks import PlaybookContext, playbook
from healer.config import NodeEntry
from healer.core.proc import run_async
from healer.fleet import messages
from healer.fleet.channels import CHANNELS, FleetContext, Outcome
from healer.fleet.natslink import subject
from healer.fleet.peers import nats_hostport
from healer.fleet.playbooks.common import as_result, last_line, open_fleet, probe_one, probe_until
from healer.fleet.ssh import run_remote, shell_line


async def _nats_up(url: str) -> Outcome:
    from healer.agents.probes import probe_nats

    host, port = nats_hostport(url)
    p = await probe_nats(host, port, 2.0)
    return Outcome(p.ok, p.detail, p.latency_ms, "ok" if p.ok else "failed")


def _server_id(out: Outcome) -> str:
    """The ``server_id`` of a NATS server's INFO banner ("" if the probe has none)."""
    found = re.search(r'"server_id":"([A-Za-z0-9]+)"', out.detail)
    return found.group(1) if found else ""


async def _wait_server(url: str, seconds: float) -> Outcome:
    deadline = time.monotonic() + seconds
    out = await _nats_up(url)
    while not out.ok and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        out = await _nats_up(url)
    return out


async def _restart_nats(fctx: FleetContext, node: NodeEntry, actions: list[str]) -> bool:
    if not node.nats_restart:
        actions.append(f"{node.node_id} has no nats_restart command configured")
        return False
    res = await run_remote(fctx.fleet, node, list(node.nats_restart), timeout=30)
    why = "" if res.ok else (last_line(res.stderr) or last_line(res.stdout))
    actions.append(f"ran {shell_line(node.nats_restart)} over SSH: exit {res.returncode}"
                   + (" (timed out)" if res.timed_out else "") + (f": {why}" if why else ""))
    return res.ok


async def _daemon_on_nats(fctx: FleetContext, node: NodeEntry) -> bool | None:
    """What the node's daemon says about its own NATS link (direct or through the tunnel)."""
    urls = [f"http://{node.host}:{node.port}/health"]
    if node.tunnel_port:
        urls.append(f"http://127.0.0.1:{node.tunnel_port}/health")
    for url in urls:
        with contextlib.suppress(Exception):
            body = (await fctx.http.get(url, timeout=fctx.timeout("http"))).json()
            if isinstance(body, dict) and body.get("nodeId") == node.node_id:
                return bool(body.get("nats_connected"))
    return None


LINK_SETTLE_S = 5.0  # how long a daemon's NATS link may take to come back on its own
SERVER_SETTLE_S = 2.0  # a NATS server that does not answer may be starting: look again first


async def _daemon_link(fctx: FleetContext, node: NodeEntry, seconds: float) -> bool | None:
    """The daemon's word on its NATS link, asked until it says "up" or ``seconds`` pass.

    Right after its server restarted, a daemon's link is reconnecting for a moment: one
    reading would send the repair down the wrong path (a reconnect never brings a route back).
    """
    deadline = time.monotonic() + seconds
    said = await _daemon_on_nats(fctx, node)
    while said is not True and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        said = await _daemon_on_nats(fctx, node)
    return said


def _link_word(on_nats: bool | None) -> str:
    return {True: "up", False: "down", None: "unknown (no /health)"}[on_nats]


@playbook("nats-reconnector")
async def reconnect_nats(ctx: PlaybookContext) -> dict[str, Any]:
    """Local server → the node's server → its daemon's link → its route; restart what is dead,
    verify with pings on ``fleet.<node>.ping`` until ``fleet.restart_verify_s`` passes."""
    async with open_fleet(ctx) as (fctx, node):
        actions: list[str] = []
        verify_s = max(fctx.fleet.restart_verify_s, 1.0)
        ping = await probe_one(fctx, node, "nats")
        actions.append(f"ping {subject(node.node_id, 'ping')}: {ping.detail}")
        if ping.ok:
            return {"status": "ok", "actions_taken": actions, "channels": {"nats": as_result(ping)},
                    "summary": f"NATS to {node.node_id} works."}
        link = fctx.nats()
        local = await _nats_up(link.url)
        actions.append(f"local NATS server {link.url}: {local.detail}")
        if not local.ok:
            me = fctx.view.me if fctx.view.exists else None
            if me is not None and me.nats_restart:
                res = await run_async(list(me.nats_restart), timeout=30)
                actions.append(f"ran {shell_line(me.nats_restart)}: exit {res.returncode}")
                local = await _wait_server(link.url, 5)
            if not local.ok:
                return {"status": "failed", "actions_taken": actions, "error": local.detail,
                        "summary": f"This node's NATS server {link.url} is down."}
        separate = bool(node.nats_url) and node.nats_url != link.url
        theirs = Outcome(False, "not probed", None, "failed")
        if separate:
            theirs = await _nats_up(node.nats_url)
            actions.append(f"{node.node_id}'s NATS server {node.nats_url}: {theirs.detail}")
            if not theirs.ok:
                # It may be (re)starting right now (a service manager, a person, a fault):
                # a second restart on top of that one is how two servers race for the port.
                theirs = await _wait_server(node.nats_url, SERVER_SETTLE_S)
                if theirs.ok:
                    actions.append(f"{node.node_id}'s NATS server came back on its own")
                    ping = await probe_until(fctx, node, "nats", verify_s)
                    actions.append(f"ping: {ping.detail}")
            if not theirs.ok and await _restart_nats(fctx, node, actions):
                theirs = await _wait_server(node.nats_url, max(5.0, verify_s))
                actions.append(f"after restart: {theirs.detail}")
                ping = await probe_until(fctx, node, "nats", verify_s)
                actions.append(f"ping: {ping.detail}")
        if not ping.ok:
            on_nats = await _daemon_link(fctx, node, LINK_SETTLE_S)
            if on_nats is not True:
                actions.append(f"the daemon says its NATS link is {_link_word(on_nats)}")
                msg = messages.make(messages.REPAIR, node.node_id, fctx.self_id,
                                    subject="your NATS link is stale: reconnect",
                                    action="reconnect_nats")
                for chan in ("http", "tunnel"):
                    sent = await CHANNELS[chan].send(fctx, node, msg, fctx.timeout(chan))
                    if sent.ok:
                        break
                actions.append(f"asked the daemon to reconnect NATS over {chan}: {sent.detail}")
                ping = await probe_until(fctx, node, "nats", 4.0)
                actions.append(f"ping: {ping.detail}")
                if not ping.ok:  # back on its server and still unreachable: look further
                    on_nats = await _daemon_link(fctx, node, LINK_SETTLE_S)
            if not ping.ok and on_nats is True:
                actions.append("the daemon says its NATS link is up")
                before = _server_id(theirs)
                if separate and await _restart_nats(fctx, node, actions):
                    # Server up, daemon on it, yet nothing arrives here: the route is gone.
                    # A restarted server's route and the daemon's link take a moment: ping
                    # until the deadline, not once.
                    after = await _wait_server(node.nats_url, max(5.0, verify_s))
                    if before and _server_id(after) == before:
                        why = (f"the restart command exited 0 but the same NATS server "
                               f"(server_id {before}) still answers at {node.nats_url}: it "
                               "was not restarted (check the restart command and its pid "
                               "file)")
                        actions.append(why)
                        return {"status": "failed", "actions_taken": actions, "error": why,
                                "channels": {"nats": as_result(ping)},
                                "summary": f"NATS to {node.node_id} still fails: {why}"}
                    ping = await probe_until(fctx, node, "nats", verify_s)
                    actions.append(f"ping after restarting its server: {ping.detail}")
        if ping.ok:
            return {"status": "healed", "actions_taken": actions,
                    "channels": {"nats": as_result(ping)},
                    "summary": f"NATS to {node.node_id} works again."}
        return {"status": "failed", "actions_taken": actions, "channels": {"nats": as_result(ping)},
                "error": ping.detail, "summary": f"NATS to {node.node_id} still fails: "
                                                 f"{ping.detail}"}
