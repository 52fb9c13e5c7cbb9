"""``repair_with_escalation``: the repair ladder for a peer that went quiet.

The watchdog climbs it when a peer's heartbeat goes stale. First the **gate**, in order:

1. stale diagnosis — the finding is older than two watchdog periods (at least 60 s): look
   again before acting on old news;
2. a repair is already running for the peer (a ladder or a healing episode);
3. the action is allow-listed (``fleet.allowed_actions``; levels not listed are skipped);
4. cooldown — at most one ladder per peer per ``fleet.repair_cooldown_s`` (5 min): the core
   gate's cooldown on the key ``fleet-ladder.<peer>``;
5. nobody else holds the peer — a ladder holds it as a healing episode does
   (``healer.fleet.hold``: the lease ``heal-<peer>`` and the core gate's claim), so a ladder
   and an episode never work on one peer at once, on any node.

Then the levels, each followed by a re-probe; the ladder stops at the first that works:

=====  ============  ====================================================================
L1     notify        a repair message ("your heartbeat is stale") down the delivery ladder
L2     guide         a repair message with a command: ``reconnect_nats``
L3     assist        a repair message asking for a ``self_check``
L3.5   recovery      ``fleet.recovery_script`` on this machine (60 s)
L4     restart       the daemon-restarter agent (SSH restart, /health 10 s later) — but if a
                     person's interactive session is active on the node, it leaves a notice
                     instead, and the ladder stops there
L5     peer_assist   ask a healthy peer to assist (at most once per ``assist_interval_s``)
=====  ============  ====================================================================

L1–L3 wait ``fleet.ladder_wait_s`` (30 s) for the peer to recover, returning as soon as it
does. The result is ``{repaired, level, reason | gate_blocked | error, escalation?}``.

When the ladder runs out — L5 asked a peer (or could not), or every allow-listed level was
tried — and the peer is still unhealthy, a person gets one escalation (``healer.core.
escalation``): a seed file in ``.fleet-messages/human/`` and a forge issue naming the peer, how
long it has been silent, each rung and how it ended, and the commands to run. It is one per
peer: while that file is not archived, later ladders of the same peer (the watchdog retries
every ``fleet.repair_cooldown_s``) rewrite it, and its issue gets a comment at most every
``fleet.alert_interval_s``. The ladder stopping at L4 for a person's interactive session
leaves a notice on the node instead; a gate-blocked or crashed ladder does not escalate.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from healer.agents.task import AgentTask, RunOutcome, new_run_id
from healer.config import NodeEntry
from healer.core import gate
from healer.core.escalation import Attempt, Escalation, escalate
from healer.core.proc import run_async
from healer.core.publish.forge_issues import dedup_key
from healer.core.store import Store
from healer.core.verify import HEALED, RETRY, Verdict, next_step
from healer.fleet import incidents as fleet_incidents
from healer.fleet import messages
from healer.fleet.channels import FleetContext, probe_peer
from healer.fleet.delivery import Reliability, send_with_fallback
from healer.fleet.escalation import commands_for
from healer.fleet.hold import PeerHold
from healer.fleet.peers import agent_context

log = logging.getLogger(__name__)

RECORDS = "fleet-repair"


def ladder_key(peer: str) -> str:
    """The core gate's cooldown key of a peer's repair ladder (one per repair_cooldown_s)."""
    return f"fleet-ladder.{peer}"
ASSISTS = "fleet-assist"
LEVELS = (("L1", "notify"), ("L2", "guide"), ("L3", "assist"), ("L3.5", "recovery"),
          ("L4", "restart"), ("L5", "peer_assist"))
_MESSAGES = {
    "notify": ("notify", "healer: your heartbeat is stale",
               "healer has not heard your heartbeat on NATS. Nothing to do if you are fine."),
    "guide": ("reconnect_nats", "healer: reconnect to NATS",
              "Your heartbeat is stale: drop and redo your NATS connection."),
    "assist": ("self_check", "healer: run a self-check",
               "Your heartbeat is still stale: recreate your inbox, reconnect NATS, announce."),
}


@dataclass
class LadderResult:
    """How the ladder ended: ``repaired`` and at which ``level``; why, if not."""

    repaired: bool
    level: str
    reason: str = ""
    gate_blocked: str = ""
    error: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)
    escalation: str = ""  # the seed file written for a person when the ladder ran out

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"repaired": self.repaired, "level": self.level}
        for key in ("reason", "gate_blocked", "error", "escalation"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        out["steps"] = self.steps
        return out


Healthy = Callable[[NodeEntry], Awaitable[bool]]


class Repairer:
    """Climbs the ladder for one peer at a time (see the module doc)."""

    def __init__(self, ctx: FleetContext, store: Store, *, stats: Reliability | None = None,
                 run_agent: Callable[[AgentTask], Awaitable[RunOutcome]] | None = None,
                 healthy: Healthy | None = None, running: Callable[[str], bool] | None = None,
                 busy: set[str] | None = None, clock: Callable[[], float] = time.time,
                 metrics: Any = None):
        self.ctx = ctx
        self.metrics = metrics
        self.store = store
        self.stats = stats or Reliability()
        self.run_agent = run_agent
        self.healthy = healthy or self._nats_ok
        self.running = running or (lambda peer: False)
        self.busy = busy if busy is not None else set()
        self.clock = clock
        # Its own lease owner: a ladder and an episode of this node exclude each other too.
        self.owner = f"{ctx.settings.node}-ladder-{secrets.token_hex(3)}"

    async def _nats_ok(self, node: NodeEntry) -> bool:
        return (await probe_peer(self.ctx, node, ["nats"])).ok

    # -- the gate ------------------------------------------------------------------------

    def gate(self, node: NodeEntry, diagnosed_at: float) -> str:
        f = self.ctx.fleet
        age = self.clock() - diagnosed_at
        if age > max(2 * f.watchdog_interval_s, 60.0):
            return f"stale diagnosis ({age:.0f} s old): probe again first"
        if node.node_id in self.busy or self.running(node.node_id):
            return "a repair is already running for this peer"
        if not any(action in f.allowed_actions for _, action in LEVELS):
            return "no repair level is in fleet.allowed_actions"
        cooling = gate.cooling(gate.admission(self.store), ladder_key(node.node_id),
                               now=self.clock(), cooldown_s=f.repair_cooldown_s)
        left = {"": cooling[""]} if "" in cooling else {}  # this key, not a longer peer name
        if not left:  # a ladder recorded by an older version: its start time in the record
            rec = self.store.get(RECORDS, node.node_id)
            last = float((rec.data if rec else {}).get("last_at", 0.0))
            if last and self.clock() - last < f.repair_cooldown_s:
                left = {"": f.repair_cooldown_s - (self.clock() - last)}
        if left:
            ago = f.repair_cooldown_s - max(left.values())
            return f"cooldown: last repair {ago:.0f} s ago (< {f.repair_cooldown_s:g} s)"
        return ""

    # -- the ladder ----------------------------------------------------------------------

    async def repair_with_escalation(self, node: NodeEntry, *, problem: str = "stale heartbeat",
                                     diagnosed_at: float | None = None) -> LadderResult:
        blocked = self.gate(node, self.clock() if diagnosed_at is None else diagnosed_at)
        hold = PeerHold(self.store, node.node_id, self.owner,
                        self.ctx.settings.store.lease_ttl_s, clock=self.clock)
        if not blocked and not await hold.acquire():
            blocked = f"another healer holds the peer ({await hold.holder()})"
        if blocked:
            log.info("repair of %s gate-blocked: %s", node.node_id, blocked)
            await asyncio.to_thread(fleet_incidents.ladder_refused, self.store, node.node_id,
                                    problem, blocked)
            return LadderResult(False, "gate", gate_blocked=blocked)
        try:
            return await self._climb(node, problem)
        finally:
            await hold.release()

    async def _climb(self, node: NodeEntry, problem: str) -> LadderResult:
        run_id = new_run_id()
        await asyncio.to_thread(fleet_incidents.ladder_started, self.store, node.node_id,
                                problem, run_id)
        self.busy.add(node.node_id)
        await asyncio.to_thread(gate.cool, self.store, [ladder_key(node.node_id)],
                                now=self.clock())
        self.store.update(RECORDS, node.node_id, lambda d: {**(d or {}), "last_at": self.clock(),
                                                            "problem": problem})
        result = LadderResult(False, "L1")
        try:
            for n, (level, action) in enumerate(LEVELS, start=1):
                if action not in self.ctx.fleet.allowed_actions:
                    result.steps.append({"level": level, "action": action,
                                         "outcome": "skipped: not allow-listed"})
                    continue
                result.level = level
                done = await getattr(self, f"_{action}")(node, problem, result)
                if done is not None:
                    if level == "L5":  # the last rung: a person is next
                        await self._escalate(node, problem, result)
                    return done
                verdict = Verdict(HEALED, f"{action} worked") if await self.healthy(node) \
                    else Verdict(RETRY, f"{action} did not bring it back")
                if next_step(verdict, n, len(LEVELS)) == "healed":
                    result.repaired = True
                    result.reason = verdict.reason
                    return result
            result.reason = "every level was tried; the peer is still unhealthy"
            await self._escalate(node, problem, result)
            return result
        except Exception as exc:  # a ladder never takes the loop down
            log.exception("repair ladder for %s failed", node.node_id)
            result.error = f"{type(exc).__name__}: {exc}"[:500]
            return result
        finally:
            self.busy.discard(node.node_id)
            final = result.to_dict()
            self.store.update(RECORDS, node.node_id, lambda d: {**(d or {}), "last": final})
            fleet_incidents.ladder_ended(self.store, node.node_id, problem, run_id, result)
            log.info("repair ladder for %s: %s", node.node_id, final)

    async def _escalate(self, node: NodeEntry, problem: str, result: LadderResult) -> None:
        """Tell a person the ladder ran out; never raises (a ladder never takes the loop
        down, and neither does its escalation)."""
        try:
            esc = ladder_escalation(self.ctx, node, problem, result,
                                    self.ctx.heartbeats.age(node.node_id))
            record = await escalate(self.ctx.settings, self.store, esc, metrics=self.metrics)
            result.escalation = str(record.seed_file or "")
        except Exception:
            log.exception("escalation of the repair ladder for %s failed", node.node_id)

    async def _wait_healthy(self, node: NodeEntry, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while True:
            if await self.healthy(node):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(min(0.5, max(0.05, deadline - time.monotonic())))

    async def _message(self, node: NodeEntry, key: str, result: LadderResult,
                       level: str) -> None:
        action, subject, body = _MESSAGES[key]
        msg = messages.make(messages.REPAIR, node.node_id, self.ctx.self_id, subject=subject,
                            body=body, priority="high", action=action)
        d = await send_with_fallback(self.ctx, node, msg, stats=self.stats, repair=True)
        result.steps.append({"level": level, "action": key, "delivered": d.delivered,
                             "channel": d.channel, "outcome": "sent" if d.delivered else
                             "not delivered"})
        if d.delivered:
            await self._wait_healthy(node, self.ctx.fleet.ladder_wait_s)

    async def _notify(self, node: NodeEntry, problem: str, r: LadderResult) -> None:
        await self._message(node, "notify", r, "L1")

    async def _guide(self, node: NodeEntry, problem: str, r: LadderResult) -> None:
        await self._message(node, "guide", r, "L2")

    async def _assist(self, node: NodeEntry, problem: str, r: LadderResult) -> None:
        await self._message(node, "assist", r, "L3")

    async def _recovery(self, node: NodeEntry, problem: str, r: LadderResult) -> None:
        argv = [a.replace("{node}", node.node_id) for a in self.ctx.fleet.recovery_script]
        if not argv:
            r.steps.append({"level": "L3.5", "action": "recovery",
                            "outcome": "skipped: no fleet.recovery_script"})
            return
        res = await run_async(argv, timeout=self.ctx.fleet.recovery_timeout_s)
        r.steps.append({"level": "L3.5", "action": "recovery", "exit": res.returncode,
                        "outcome": "timed out" if res.timed_out else
                        ("ran" if res.ok else "failed")})
        if res.ok:  # a recovery script usually restarts something: give it that long
            await self._wait_healthy(node, max(self.ctx.fleet.ladder_wait_s,
                                               self.ctx.fleet.restart_verify_s))

    async def _restart(self, node: NodeEntry, problem: str,
                       r: LadderResult) -> LadderResult | None:
        if self.run_agent is None:
            r.steps.append({"level": "L4", "action": "restart", "outcome": "skipped: no agent "
                            "runner"})
            return None
        outcome = await self.run_agent(AgentTask(
            "daemon-restarter", node.node_id, kind="daemon",
            timeout_s=self.ctx.fleet.agent_timeout_s, network=self.ctx.view.endpoints(),
            context=agent_context(node, problem=f"repair ladder L4: {problem}",
                                  fleet=self.ctx)))
        result = outcome.result or {}
        r.steps.append({"level": "L4", "action": "restart", "outcome": outcome.status,
                        "summary": str(result.get("summary", ""))[:300]})
        if (result.get("data") or {}).get("interactive_session"):
            r.reason = (f"a person's interactive session is active on {node.node_id}: "
                        "left a notice instead of restarting its daemon")
            return r
        if outcome.ok:
            await self._wait_healthy(node, self.ctx.fleet.restart_verify_s)
        return None

    async def _peer_assist(self, node: NodeEntry, problem: str,
                           r: LadderResult) -> LadderResult | None:
        rec = self.store.get(ASSISTS, "last")
        last = float((rec.data if rec else {}).get("at", 0.0))
        if last and self.clock() - last < self.ctx.fleet.assist_interval_s:
            r.steps.append({"level": "L5", "action": "peer_assist",
                            "outcome": "skipped: a peer was asked "
                                       f"{self.clock() - last:.0f} s ago"})
            return None
        helpers = [p for p in self.ctx.view.peers
                   if p.node_id != node.node_id and (self.ctx.heartbeats.age(p.node_id) or 1e9)
                   < self.ctx.fleet.stale_s]
        if not helpers:
            r.steps.append({"level": "L5", "action": "peer_assist",
                            "outcome": "skipped: no healthy peer"})
            return None
        helper = helpers[0]
        msg = messages.make("assist", helper.node_id, self.ctx.self_id,
                            subject=f"please help {node.node_id}", priority="high",
                            body=f"{node.node_id} is unhealthy ({problem}); healer could not "
                                 "repair it. Please check it from your side.",
                            action="assist", target=node.node_id)
        d = await send_with_fallback(self.ctx, helper, msg, stats=self.stats, repair=True)
        self.store.put(ASSISTS, "last", {"at": self.clock(), "helper": helper.node_id,
                                         "target": node.node_id})
        r.steps.append({"level": "L5", "action": "peer_assist", "helper": helper.node_id,
                        "outcome": "sent" if d.delivered else "not delivered"})
        r.reason = f"asked {helper.node_id} to assist" if d.delivered else \
            f"could not reach {helper.node_id} to ask for assistance"
        return r


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} min"
    if s >= 60:
        return f"{s // 60} min"
    return f"{s} s"


def ladder_escalation(ctx: FleetContext, node: NodeEntry, problem: str, result: LadderResult,
                      silent_s: float | None) -> Escalation:
    """What a person gets when the ladder ran out for ``node``: which peer, how long it has
    been silent, each rung and how it ended, and what to do."""
    f = ctx.fleet
    peer = node.node_id
    silence = (f"has sent no heartbeat for {_duration(silent_s)} (stale after "
               f"{f.stale_s:g} s)" if silent_s is not None
               else "has sent no heartbeat since this healer started listening")
    ran = [s for s in result.steps if not str(s.get("outcome", "")).startswith("skipped")]
    what = (f"Fleet node `{peer}` ({node.host}:{node.port}) {silence}. The watchdog saw "
            f"*{problem}* and climbed the whole repair ladder: {len(ran)} of "
            f"{len(result.steps)} rung(s) ran (the others are not in `fleet.allowed_actions` "
            "or had nothing to do), and the peer is still unhealthy.")
    if result.reason and not result.reason.startswith("every level"):
        what += f" The last rung ended: {result.reason}."
    attempts = []
    for i, step in enumerate(result.steps, 1):
        extra = "; ".join(f"{k}: {v}" for k, v in step.items()
                          if k not in ("level", "action", "outcome") and v not in ("", None))
        attempts.append(Attempt(number=i, action=f"{step.get('level')} {step.get('action')}",
                                outcome=str(step.get("outcome", "?")), detail=extra[:300]))
    steps = [
        "Run the commands below on the machine that runs healer (they use the fleet's SSH "
        "settings) to see whether the machine, its daemon or its NATS link is down.",
        "Bring it back — or, if the node is meant to be off, take it out of the fleet config "
        f"({ctx.view.path}).",
        f"While {peer} stays silent the watchdog climbs the ladder again every "
        f"`fleet.repair_cooldown_s` ({f.repair_cooldown_s:g} s); each time it ends like this, "
        "this file is rewritten rather than a new one written.",
    ]
    heard = "never heard" if silent_s is None else f"{silent_s:.0f} s ago"
    evidence = [f"peer: {peer} ({node.host}:{node.port})", f"last heartbeat: {heard}",
                f"problem: {problem}", f"ladder ended at: {result.level}",
                *(f"{s.get('level')} {s.get('action')}: {s.get('outcome')}"
                  for s in result.steps)]
    age = "never heard from" if silent_s is None else f"silent for {_duration(silent_s)}"
    return Escalation(
        title=f"Fleet: {peer} {age} — the repair ladder ran out without bringing it back",
        target=peer, severity="high", what_happened=what, attempts=attempts,
        next_steps=steps, evidence=evidence,
        commands=["# what healer sees of the whole fleet", "healer fleet status",
                  *commands_for(ctx, node, ["nats", "http"], ["daemon", "nats"])],
        incident=f"fleet-{peer}-ladder", kind="escalation",
        labels=["heal", "fleet", "escalation"], dedup_key=dedup_key("fleet-ladder", peer),
        one_open=True, comment_every_s=f.alert_interval_s)
