"""What a person gets when fleet healing stops trying: the peer, the broken channels, every
attempt with its result, and the exact commands to run (``healer.core.escalation`` writes it).

One escalation per peer and problem: its incident is ``fleet-<peer>-<problem>`` (the repair
kind, or ``person-<channel>``), so two different faults on one peer are two incidents, two
seed files, two forge issues."""

from __future__ import annotations

from typing import TYPE_CHECKING

from healer.config import NodeEntry
from healer.core.escalation import Attempt, Escalation
from healer.core.publish.forge_issues import dedup_key
from healer.fleet.channels import FleetContext, PeerProbe
from healer.fleet.diagnosis import Plan, Repair, incident_id
from healer.fleet.ssh import shell_line, ssh_command, tunnel_argv

if TYPE_CHECKING:
    from healer.fleet.episode import Episode


def _ssh(ctx: FleetContext, node: NodeEntry, remote: list[str]) -> str:
    return shell_line(ssh_command(ctx.fleet, node, remote))


def commands_for(ctx: FleetContext, node: NodeEntry, channels: list[str],
                 kinds: list[str]) -> list[str]:
    """Shell lines a person can paste, for what is broken."""
    base = f"http://{node.host}:{node.port}"
    out = [f"# {node.node_id}: see what healer sees", f"healer fleet probe {node.node_id}"]
    if "daemon" in kinds or "http" in channels:
        out += ["# is the daemon up?", f"curl -sf {base}/health"]
        if node.restart:
            out += ["# restart it (this is what healer ran)",
                    _ssh(ctx, node, list(node.restart))]
        else:
            out += ["# no restart command is configured: add `restart` (an argv) to the node's "
                    f"entry in {ctx.view.path}"]
    if "config" in kinds:
        out += ["# find the node's current address, then fix its host/port in the fleet config",
                _ssh(ctx, node, ["hostname", "-I"]), f"$EDITOR {ctx.view.path}"]
    if "tunnel" in kinds or "tunnel" in channels:
        out += ["# restart the SSH tunnel", shell_line(tunnel_argv(ctx.fleet, node))
                if node.tunnel_port else "# (no tunnel_port configured)",
                f"curl -sf http://127.0.0.1:{node.tunnel_port}/health"]
    if "nats" in kinds or "nats" in channels:
        out += ["# check and restart the node's NATS server"]
        if node.nats_restart:
            out.append(_ssh(ctx, node, list(node.nats_restart)))
        out.append(f"healer fleet send {node.node_id} ping")
    if "inbox" in kinds or "seed" in channels:
        box = ctx.fleet_dir / node.node_id
        out += ["# make the seed inbox a writable folder again", f"ls -ld {box}",
                f"mv {box} {box}.blocked && mkdir -p {box}"]
    if "ssh" in channels:
        verbose = ssh_command(ctx.fleet, node, ["true"])
        verbose.insert(1, "-v")
        out += ["# SSH itself fails: check sshd, keys and the firewall on the node",
                shell_line(verbose)]
    if "git" in channels:
        out += ["# the git channel fails", f"git -C {ctx.fleet_dir} status"]
    out += ["# when it is fixed, check and let healer take over again",
            f"healer fleet heal {node.node_id}"]
    return out


def build(ctx: FleetContext, node: NodeEntry, ep: Episode, probe: PeerProbe, fix: Plan,
          spent: list[Repair], refused: list[Repair], *,
          rounds_exhausted: bool = False, handed_off: str = "") -> Escalation:
    broken = probe.broken
    if handed_off:
        why = f"the agent handed it to a person: {handed_off}"
    elif spent:
        why = (f"{', '.join(sorted({r.agent for r in spent}))} failed "
               f"{ctx.fleet.max_heal_attempts} times; healer stops trying")
    elif refused:
        why = f"{', '.join(r.agent for r in refused)} is not in fleet.allowed_actions"
    elif fix.unrepairable:
        why = "no agent can repair this: " + "; ".join(
            f"{c}: {w}" for c, w in fix.unrepairable.items())
    elif rounds_exhausted:
        why = "the channels did not recover within the healing rounds"
    else:
        why = "healing did not converge"
    what = (f"Fleet node `{node.node_id}` ({node.host}:{node.port}) has broken channels: "
            f"**{', '.join(broken) or 'none'}**. {why}.\n\nThe healing episode started "
            f"because: {ep.reason}.")
    if ep.held:
        what += (f"\n\nAlready with a person from an earlier escalation (still left alone): "
                 f"{', '.join(ep.held)}.")
    attempts = [Attempt(number=i, action=f"{a.agent} (attempt {a.number} of "
                        f"{ctx.fleet.max_heal_attempts}, channels {', '.join(a.channels)})",
                        outcome=a.status, detail=a.summary[:600])
                for i, a in enumerate(ep.attempts, 1)]
    evidence = [f"{name}: {'ok' if o.ok else 'FAILED'} — {o.detail}"
                for name, o in probe.channels.items()]
    evidence += [f"{name}: skipped — {why}" for name, why in probe.skipped.items()]
    evidence += [f"result file: {a.result_path}" for a in ep.attempts if a.result_path]
    kinds = sorted({a.kind for a in ep.attempts} | {r.kind for r in fix.repairs})
    problems = ep.escalated or kinds or broken
    steps = ["Run the commands below on the machine that runs healer (they use the fleet's "
             "SSH settings).", "Fix what they show, then run `healer fleet heal "
             f"{node.node_id}`; healer leaves this peer alone for "
             f"{ctx.fleet.repair_cooldown_s:g} s otherwise."]
    return Escalation(
        title=f"Fleet: {node.node_id} — {', '.join(broken) or 'channels'} still broken "
              f"after {len(ep.attempts)} attempt{'s' if len(ep.attempts) != 1 else ''}",
        target=node.node_id, severity="high", what_happened=what, attempts=attempts,
        next_steps=steps, commands=commands_for(ctx, node, broken, kinds), evidence=evidence,
        incident=ep.incident or incident_id(node.node_id, problems), kind="escalation",
        labels=["heal", "fleet", "escalation"],
        dedup_key=dedup_key("fleet", node.node_id, *sorted(problems)))
