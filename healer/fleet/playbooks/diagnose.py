"""The playbooks that look at every channel: channel-diagnoser (probe and explain) and
master-healer (the healing loop as one agent run)."""

from __future__ import annotations

from typing import Any

from healer.agents.playbooks import PlaybookContext, playbook
from healer.fleet.channels import FleetContext, Outcome, probe_peer
from healer.fleet.diagnosis import plan
from healer.fleet.playbooks.common import as_result, open_fleet


@playbook("channel-diagnoser")
async def diagnose(ctx: PlaybookContext) -> dict[str, Any]:
    """Probe every channel to the peer once: which work, why the others fail, what would fix
    them."""
    async with open_fleet(ctx) as (fctx, node):
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
        "channels": {name: as_result(o) for name, o in found.channels.items()},
        "data": {"peer": {"name": node.node_id, "host": node.host, "port": node.port,
                          "ssh_port": node.ssh_port, "nats": node.nats_url,
                          "tunnel_port": node.tunnel_port},
                 "skipped": found.skipped,
                 "repairs": [{"agent": r.agent, "channels": list(r.channels), "why": r.why}
                             for r in fix.repairs],
                 "needs_a_person": fix.unrepairable},
    }


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
    return {k: as_result(o) for k, o in chans.items()}
