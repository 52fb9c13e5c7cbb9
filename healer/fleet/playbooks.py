"""The fleet healing agents as deterministic playbooks (no model needed).

Each does what its agent definition in ``agents/`` says, with the same result contract
(``heal-<kind>-<peer>-<epoch>.json``):

===================  =======  ====================================================================
agent                kind     does
===================  =======  ====================================================================
channel-diagnoser    diagnose probes every channel, says which work and why the others fail
daemon-restarter     daemon   over SSH runs the node's ``restart`` argv, then waits for /health
tunnel-establisher   tunnel   ``ssh -f -N -L`` with keep-alives, verified through the tunnel
config-updater       config   the node's new address from its heartbeat or the discovery
                              command (never a scan), verified, written atomically, re-probed
nats-reconnector     nats     local server, the node's server, its daemon's link, its route
inbox-repairer       inbox    moves what blocks the seed inbox aside and recreates it
===================  =======  ====================================================================

The node comes from the fleet config when the target is a node there (so its restart
command, tunnel port and NATS server are known), else from the task's ``peer`` context (an
ad-hoc ``--var host=…`` run). In the loop, the fleet service passes its live ``FleetContext``
as ``context["fleet"]`` (shared NATS link, heartbeats); standalone runs open their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from healer.agents.playbooks import PlaybookContext, playbook
from healer.config import NodeEntry
from healer.core import seeds
from healer.core.names import safe_host, safe_port
from healer.core.proc import run_async
from healer.errors import UnsafeNameError, UsageError
from healer.fleet import messages
from healer.fleet.channels import CHANNELS, FleetContext, Outcome, probe_peer
from healer.fleet.diagnosis import plan
from healer.fleet.natslink import subject
from healer.fleet.peers import from_agent_peer, nats_hostport, update_address
from healer.fleet.ssh import find_tunnels, forward_spec, run_remote, shell_line, start_tunnel
from healer.fleet.ssh import stop_tunnels as kill_tunnels

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def _fleet(ctx: PlaybookContext) -> AsyncIterator[tuple[FleetContext, NodeEntry]]:
    shared = ctx.context.get("fleet")
    fctx = shared if isinstance(shared, FleetContext) else FleetContext.open(ctx.settings)
    try:
        if fctx.view.exists and ctx.task.target in fctx.view.nodes:
            node = fctx.view.nodes[ctx.task.target]
        elif "peer" in ctx.context:
            node = from_agent_peer(ctx.context["peer"])
        else:
            raise UsageError(f"{ctx.task.target!r} is not a node in {fctx.view.path}")
        yield fctx, node
    finally:
        if fctx is not shared:
            await fctx.aclose()


def _ch(out: Outcome) -> dict[str, Any]:
    return out.as_result()


async def _probe(fctx: FleetContext, node: NodeEntry, name: str) -> Outcome:
    return (await probe_peer(fctx, node, [name])).channels.get(
        name, Outcome(False, "channel not applicable", None, "failed"))


async def _until(fctx: FleetContext, node: NodeEntry, name: str, seconds: float,
                 every: float = 0.25) -> Outcome:
    """Probe ``name`` until it works or ``seconds`` pass; the last outcome."""
    deadline = time.monotonic() + seconds
    out = await _probe(fctx, node, name)
    while not out.ok and time.monotonic() < deadline:
        await asyncio.sleep(every)
        out = await _probe(fctx, node, name)
    return out


def _tail(text: str, n: int = 300) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[-n:]


# ---------------------------------------------------------------------------------------------


@playbook("channel-diagnoser")
async def diagnose(ctx: PlaybookContext) -> dict[str, Any]:
    """Probe every channel to the peer once: which work, why the others fail, what would fix
    them."""
    async with _fleet(ctx) as (fctx, node):
        found = await probe_peer(fctx, node)
    broken = sorted(found.broken)
    n = len(found.channels)
    actions = [f"probed {name}: {'ok' if o.ok else 'FAILED'} ({o.detail})"
               for name, o in sorted(found.channels.items())]
    actions += [f"skipped {name}: {why}" for name, why in sorted(found.skipped.items())]
    if broken:
        summary = f"{n - len(broken)} of {n} channels to {node.node_id} work; broken: " \
                  f"{', '.join(broken)}."
    else:
        summary = f"All {n} channels to {node.node_id} work."
    fix = plan(found)
    ctx.log.info("channel-diagnoser %s: %s", node.node_id, summary)
    return {
        "status": "diagnosed" if broken else "ok", "summary": summary, "actions_taken": actions,
        "channels": {name: _ch(o) for name, o in found.channels.items()},
        "data": {"peer": {"name": node.node_id, "host": node.host, "port": node.port,
                          "ssh_port": node.ssh_port, "nats": node.nats_url,
                          "tunnel_port": node.tunnel_port},
                 "skipped": found.skipped,
                 "repairs": [{"agent": r.agent, "channels": list(r.channels), "why": r.why}
                             for r in fix.repairs],
                 "needs_a_person": fix.unrepairable},
    }


# ---------------------------------------------------------------------------------------------


def marker_path(fctx: FleetContext, node: NodeEntry) -> str:
    return node.interactive_marker or fctx.fleet.interactive_marker


async def interactive_session(fctx: FleetContext, node: NodeEntry) -> bool | None:
    """Whether a person's interactive session holds the node's marker (None: cannot tell)."""
    res = await run_remote(fctx.fleet, node, ["test", "-e", marker_path(fctx, node)],
                           timeout=fctx.timeout("ssh"))
    if res.returncode in (0, 1):
        return res.returncode == 0
    return None


def leave_notice(fctx: FleetContext, node: NodeEntry, what: str, commands: list[str]) -> Path:
    """A seed file in the node's inbox for the person working there."""
    body = (f"healer wanted to {what} on `{node.node_id}`, but an interactive agent session "
            f"is active here (`{marker_path(fctx, node)}` exists), so it did not.\n\n"
            "When you are done, remove the marker (healer then repairs it on its own), or run:"
            "\n\n```sh\n" + "\n".join(commands) + "\n```\n")
    seed = seeds.Seed(sender=fctx.self_id, to=node.node_id, subject=f"healer: {what} postponed",
                      body=body, type="notice", severity="warning")
    try:
        return seeds.write(fctx.fleet_dir, seed)
    except OSError:  # the inbox itself may be what is broken: the human folder always works
        return seeds.write(fctx.fleet_dir, dataclasses.replace(seed, to=seeds.HUMAN))


@playbook("daemon-restarter")
async def restart_daemon(ctx: PlaybookContext) -> dict[str, Any]:
    """Restart the node's daemon with its configured command over SSH, then verify /health."""
    async with _fleet(ctx) as (fctx, node):
        actions: list[str] = []
        before = await _probe(fctx, node, "http")
        actions.append(f"GET /health: {before.detail}")
        if before.ok:
            return {"status": "ok", "summary": f"The daemon on {node.node_id} answers.",
                    "actions_taken": actions, "channels": {"http": _ch(before)}}
        if not node.restart:
            return {"status": "escalated", "actions_taken": actions,
                    "summary": f"No restart command is configured for {node.node_id}; not "
                               "inventing one.",
                    "error": "no `restart` argv in the node's fleet config entry"}
        session = await interactive_session(fctx, node)
        actions.append(f"interactive session marker: {'present' if session else 'absent'}"
                       if session is not None else "interactive session marker: unknown")
        if session is None:
            return {"status": "failed", "actions_taken": actions,
                    "summary": f"SSH to {node.node_id} fails; cannot restart its daemon.",
                    "error": "ssh failed", "channels": {"http": _ch(before),
                                                        "ssh": _ch(await _probe(fctx, node,
                                                                                "ssh"))}}
        if session:
            path = leave_notice(fctx, node, "restart the fleet daemon",
                                [shell_line(node.restart)])
            actions.append(f"left a notice: {path}")
            return {"status": "escalated", "actions_taken": actions,
                    "summary": f"A person's interactive session is active on {node.node_id}: "
                               "left a notice instead of restarting its daemon.",
                    "data": {"interactive_session": True, "notice": str(path)}}
        res = await run_remote(fctx.fleet, node, list(node.restart), timeout=30)
        actions.append(f"ran {shell_line(node.restart)} over SSH: exit {res.returncode}"
                       + (" (timed out)" if res.timed_out else ""))
        if not res.ok:
            why = _tail(res.stderr) or _tail(res.stdout) or f"exit {res.returncode}"
            return {"status": "failed", "actions_taken": actions, "error": why,
                    "summary": f"The restart command on {node.node_id} failed: {why}"}
        after = await _until(fctx, node, "http", fctx.fleet.restart_verify_s)
        actions.append(f"GET /health after restart: {after.detail}")
        if not after.ok:
            return {"status": "failed", "actions_taken": actions, "channels": {"http": _ch(after)},
                    "error": f"no /health answer within {fctx.fleet.restart_verify_s:g} s",
                    "summary": f"Restarted {node.node_id}'s daemon but it does not answer."}
        return {"status": "healed", "actions_taken": actions, "channels": {"http": _ch(after)},
                "summary": f"Restarted the daemon on {node.node_id}; /health answers again."}


# ---------------------------------------------------------------------------------------------


@playbook("tunnel-establisher")
async def establish_tunnel(ctx: PlaybookContext) -> dict[str, Any]:
    """(Re)start the SSH tunnel to the node's daemon and verify through it."""
    async with _fleet(ctx) as (fctx, node):
        actions: list[str] = []
        if not node.tunnel_port:
            return {"status": "escalated", "summary": f"{node.node_id} has no tunnel_port.",
                    "error": "no tunnel_port in the node's fleet config entry"}
        now = await _probe(fctx, node, "tunnel")
        actions.append(f"GET /health through 127.0.0.1:{node.tunnel_port}: {now.detail}")
        if now.ok:
            return {"status": "ok", "actions_taken": actions, "channels": {"tunnel": _ch(now)},
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
            ssh = await _probe(fctx, node, "ssh")
            why = _tail(res.stderr) or f"exit {res.returncode}"
            return {"status": "failed", "actions_taken": actions, "error": why,
                    "channels": {"tunnel": _ch(now), "ssh": _ch(ssh)},
                    "summary": (f"SSH itself fails ({ssh.detail}): the ssh channel is the "
                                "problem, not the tunnel.") if not ssh.ok else
                    f"The tunnel to {node.node_id} could not be started: {why}"}
        after = await _until(fctx, node, "tunnel", 3.0)
        actions.append(f"GET /health through the tunnel: {after.detail}")
        if not after.ok:
            return {"status": "failed", "actions_taken": actions,
                    "channels": {"tunnel": _ch(after)}, "error": after.detail,
                    "summary": f"The tunnel to {node.node_id} runs but its daemon does not "
                               "answer through it."}
        return {"status": "healed", "actions_taken": actions, "channels": {"tunnel": _ch(after)},
                "summary": f"Tunnel 127.0.0.1:{node.tunnel_port} → {node.host}:{node.port} "
                           "works.", "data": {"pid": pid}}


# ---------------------------------------------------------------------------------------------


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
    """Find the node's current address (heartbeat, else discovery command), verify it is that
    node, rewrite the fleet config atomically, re-probe."""
    async with _fleet(ctx) as (fctx, node):
        actions: list[str] = []
        now = await _probe(fctx, node, "http")
        actions.append(f"GET http://{node.host}:{node.port}/health: {now.detail}")
        if now.ok:
            return {"status": "ok", "actions_taken": actions, "channels": {"http": _ch(now)},
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
        moved = dataclasses.replace(node, host=host, port=port)
        check = await _probe(fctx, moved, "http")
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
        after = await _probe(fctx, fctx.view.peer(node.node_id), "http")
        actions.append(f"re-probed: {after.detail}")
        return {"status": "healed" if after.ok else "failed", "actions_taken": actions,
                "channels": {"http": _ch(after)},
                "summary": f"{node.node_id} moved from {node.host}:{node.port} to "
                           f"{host}:{port}; the fleet config says so now.",
                "data": {"old_host": node.host, "old_port": node.port, "new_host": host,
                         "new_port": port, "source": source}}


# ---------------------------------------------------------------------------------------------


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
    why = "" if res.ok else (_tail(res.stderr) or _tail(res.stdout))
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
    async with _fleet(ctx) as (fctx, node):
        actions: list[str] = []
        verify_s = max(fctx.fleet.restart_verify_s, 1.0)
        ping = await _probe(fctx, node, "nats")
        actions.append(f"ping {subject(node.node_id, 'ping')}: {ping.detail}")
        if ping.ok:
            return {"status": "ok", "actions_taken": actions, "channels": {"nats": _ch(ping)},
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
                    ping = await _until(fctx, node, "nats", verify_s)
                    actions.append(f"ping: {ping.detail}")
            if not theirs.ok and await _restart_nats(fctx, node, actions):
                theirs = await _wait_server(node.nats_url, max(5.0, verify_s))
                actions.append(f"after restart: {theirs.detail}")
                ping = await _until(fctx, node, "nats", verify_s)
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
                ping = await _until(fctx, node, "nats", 4.0)
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
                                "channels": {"nats": _ch(ping)},
                                "summary": f"NATS to {node.node_id} still fails: {why}"}
                    ping = await _until(fctx, node, "nats", verify_s)
                    actions.append(f"ping after restarting its server: {ping.detail}")
        if ping.ok:
            return {"status": "healed", "actions_taken": actions,
                    "channels": {"nats": _ch(ping)},
                    "summary": f"NATS to {node.node_id} works again."}
        return {"status": "failed", "actions_taken": actions, "channels": {"nats": _ch(ping)},
                "error": ping.detail, "summary": f"NATS to {node.node_id} still fails: "
                                                 f"{ping.detail}"}


# ---------------------------------------------------------------------------------------------


def _repair_inbox(box: Path) -> list[str]:
    done = []
    if box.is_symlink() or (box.exists() and not box.is_dir()):
        aside = box.with_name(f".{box.name}.blocked-{int(time.time())}")
        os.replace(box, aside)
        done.append(f"moved what blocked the inbox aside: {aside}")
    if not box.exists():
        box.mkdir(parents=True)
        done.append(f"created {box}")
    if not os.access(box, os.W_OK | os.X_OK):
        box.chmod(box.stat().st_mode | 0o700)
        done.append(f"made {box} writable for its owner")
    return done


@playbook("inbox-repairer")
async def repair_inbox(ctx: PlaybookContext) -> dict[str, Any]:
    """Make the node's seed inbox a writable folder again (what blocked it is kept aside)."""
    async with _fleet(ctx) as (fctx, node):
        box = fctx.fleet_dir / node.node_id
        before = await _probe(fctx, node, "seed")
        actions = [f"probe {box}: {before.detail}"]
        if before.ok:
            return {"status": "ok", "actions_taken": actions, "channels": {"seed": _ch(before)},
                    "summary": f"The seed inbox of {node.node_id} is writable."}
        try:
            actions += await asyncio.to_thread(_repair_inbox, box)
        except OSError as exc:
            return {"status": "failed", "actions_taken": actions,
                    "error": f"{exc.strerror or exc}",
                    "summary": f"Could not repair {box}: {exc.strerror or exc}"}
        after = await _probe(fctx, node, "seed")
        actions.append(f"re-probed: {after.detail}")
        return {"status": "healed" if after.ok else "failed", "actions_taken": actions,
                "channels": {"seed": _ch(after)},
                "summary": f"The seed inbox of {node.node_id} is writable again." if after.ok
                else f"The seed inbox of {node.node_id} still fails: {after.detail}"}


# ---------------------------------------------------------------------------------------------


@playbook("master-healer")
async def master_heal(ctx: PlaybookContext) -> dict[str, Any]:
    """The healing loop as one agent run: every listed peer (or every peer) until healthy or
    escalated — the same episodes ``python -m healer.loop`` runs."""
    from healer.core.store import open_store
    from healer.fleet.channels import probe_fleet
    from healer.fleet.heal import HealLoop

    shared = ctx.context.get("fleet")
    fctx = shared if isinstance(shared, FleetContext) else FleetContext.open(ctx.settings)
    try:
        listed = [p.name for p in ctx.context.get("peers", ())]
        names = [n for n in listed if n in fctx.view.nodes] or [p.node_id
                                                                for p in fctx.view.peers]
        probes = await probe_fleet(fctx, [fctx.view.peer(n) for n in names])
        loop = HealLoop(fctx, open_store(ctx.settings))
        actions, episodes = [], []
        for name, probe in probes.items():
            if probe.ok:
                actions.append(f"{name}: every channel works")
                continue
            why = loop.blocked(name, probe)
            if why:
                actions.append(f"{name}: not healed now ({why})")
                episodes.append(None)
                continue
            ep = await loop.heal(name, "master-healer run", probe, respect_cooldowns=True)
            episodes.append(ep)
            actions.append(f"{name}: {ep.state} in {ep.duration_s:.1f} s"
                           + (f" by {', '.join(ep.agents)}" if ep.agents else ""))
        final = await probe_fleet(fctx, [fctx.view.peer(n) for n in names])
    finally:
        if fctx is not shared:
            await fctx.aclose()
    broken = {f"{n}/{c}" for n, p in final.items() for c in p.broken}
    escalated = [e for e in episodes if e is not None and e.state == "escalated"]
    status = "ok" if not episodes and not broken else "healed" if not broken else \
        "escalated" if escalated else "partial"
    return {"status": status, "actions_taken": actions,
            "summary": f"{len(names)} peer(s): " + (f"still broken: {', '.join(sorted(broken))}"
                                                     if broken else "every channel works."),
            "channels": _capped({f"{n}/{c}": o for n, p in final.items()
                                 for c, o in p.channels.items()}),
            "data": {"escalations": [e.escalation for e in escalated]}}


def _capped(chans: dict[str, Outcome], limit: int = 32) -> dict[str, Any]:
    """The result schema holds 32 channels: with more, the broken ones (the news) win."""
    if len(chans) > limit:
        chans = dict(list({k: o for k, o in chans.items() if not o.ok}.items())[:limit])
    return {k: _ch(o) for k, o in chans.items()}
