"""The master healer: diagnose → repair each broken channel → re-probe → healed, or a person.

One **episode** per peer at a time::

    diagnose (the channel-diagnoser agent)
    loop:
        plan the repairs (healer.fleet.diagnosis): one agent per root cause
        dispatch each in the background (executor: playbook or Claude)
        wait until an agent's result lands (results bus) — at most fleet.heal_wait_s
        re-probe
    until every channel works                                  → healed, logged
    or a repair kind failed fleet.max_heal_attempts (3) times  → escalated to a human
    or what is broken has no agent (SSH, git, machine down)    → escalated to a human

Bounded everywhere, because the original once made 55 repair attempts on one stale
heartbeat: at most ``max_heal_attempts`` runs per repair kind per episode, a growing pause
between failed runs of one kind, one episode per peer at a time, and after an escalation the
peer is left alone for ``fleet.repair_cooldown_s`` (the escalation is one seed file in
``.fleet-messages/human/`` naming the peer, the broken channels, every attempt with its result,
and the exact commands a person should run).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from healer.agents.context import ChannelStatus
from healer.agents.task import AgentTask, RunOutcome
from healer.config import NodeEntry
from healer.core.lease import Lease
from healer.core.store import Store
from healer.errors import UsageError
from healer.fleet.channels import FleetContext, Outcome, PeerProbe, probe_peer
from healer.fleet.diagnosis import Plan, Repair, plan
from healer.fleet.peers import as_agent_peer

log = logging.getLogger(__name__)

RECORDS = "fleet-heal"
RESULT_KINDS = ("diagnose", "daemon", "tunnel", "config", "nats", "inbox")
RunAgent = Callable[[AgentTask], Awaitable[RunOutcome]]
Event = dict[str, Any]


@dataclass
class HealAttempt:
    number: int
    agent: str
    kind: str
    channels: list[str]
    started_at: float
    status: str = "running"
    summary: str = ""
    run_id: str = ""
    result_path: str = ""
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Episode:
    """One healing of one peer, from the first diagnosis to healed or escalated."""

    peer: str
    reason: str
    started_at: float = field(default_factory=time.time)
    # healing | healed | escalated | deferred | transient | stopped | elsewhere (another node
    # holds the lease on this peer and heals it)
    state: str = "healing"
    broken: list[str] = field(default_factory=list)
    attempts: list[HealAttempt] = field(default_factory=list)
    ended_at: float = 0.0
    escalation: str = ""
    last_probe: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return (self.ended_at or time.time()) - self.started_at

    @property
    def agents(self) -> list[str]:
        return list(dict.fromkeys(a.agent for a in self.attempts))

    def to_dict(self) -> dict[str, Any]:
        return {"peer": self.peer, "reason": self.reason, "state": self.state,
                "started_at": self.started_at, "ended_at": self.ended_at,
                "duration_s": round(self.duration_s, 3), "broken": self.broken,
                "agents": self.agents, "escalation": self.escalation,
                "attempts": [a.to_dict() for a in self.attempts],
                "last_probe": self.last_probe}


def probe_from_result(peer: str, result: dict[str, Any] | None) -> PeerProbe | None:
    """A diagnoser's result document as a probe (None if it has no channels)."""
    chans = (result or {}).get("channels")
    if not isinstance(chans, dict) or not chans:
        return None
    probe = PeerProbe(peer, time.time())
    for name, c in chans.items():
        if isinstance(c, dict) and isinstance(c.get("ok"), bool):
            probe.channels[name] = Outcome(c["ok"], str(c.get("detail", "")),
                                           c.get("latency_ms"), "ok" if c["ok"] else "failed")
    skipped = ((result or {}).get("data") or {}).get("skipped")
    if isinstance(skipped, dict):
        probe.skipped.update({str(k): str(v) for k, v in skipped.items()})
    return probe


class HealLoop:
    """Runs healing episodes; ``request()`` starts one in the background when allowed."""

    def __init__(self, ctx: FleetContext, store: Store, *, run_agent: RunAgent | None = None,
                 on_event: Callable[[Event], None] | None = None, metrics: Any = None,
                 clock: Callable[[], float] = time.time):
        self.ctx = ctx
        self.store = store
        self.metrics = metrics
        self.clock = clock
        self.run_agent = run_agent or self._executor_run
        self._listeners: list[Callable[[Event], None]] = [on_event] if on_event else []
        self.active: dict[str, asyncio.Task[Episode]] = {}
        self.episodes: dict[str, Episode] = {}
        self._landed: dict[tuple[str, str], asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.busy_peers: set[str] = set()  # peers a repair ladder is working on
        # Lease owner: this node, and this loop instance (a restarted loop is someone else
        # until the old lease expires, so two incarnations never heal at once).
        self.owner = f"{ctx.settings.node}-{secrets.token_hex(3)}"

    # -- wiring --------------------------------------------------------------------------

    def listen(self, fn: Callable[[Event], None]) -> None:
        self._listeners.append(fn)

    def emit(self, type: str, peer: str, **data: Any) -> None:
        event = {"type": type, "peer": peer, "at": time.time(), **data}
        for fn in list(self._listeners):
            try:
                fn(event)
            except Exception:
                log.exception("fleet event listener failed")

    def result_landed(self, kind: str, target: str) -> None:
        """Called by the results bus (any thread) when an agent result arrives."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._set_landed, kind, target)

    def _set_landed(self, kind: str, target: str) -> None:
        ev = self._landed.get((kind, target))
        if ev is not None:
            ev.set()

    async def _executor_run(self, task: AgentTask) -> RunOutcome:
        from healer.agents.executors import select_executor

        # The executor takes one of the machine's agent slots (executor.max_concurrent).
        outcome: RunOutcome = await select_executor(self.ctx.settings).run(task)
        return outcome

    # -- gates ---------------------------------------------------------------------------

    def cooling(self, peer: str) -> float:
        """Seconds this peer is still left alone after an escalation (0 if not)."""
        rec = self.store.get(RECORDS, peer)
        until = float((rec.data if rec else {}).get("cooldown_until", 0.0))
        return max(0.0, until - self.clock())

    def blocked(self, peer: str) -> str:
        """Why an episode for ``peer`` may not start now ("" if it may)."""
        if peer in self.active and not self.active[peer].done():
            return "an episode is already healing it"
        if peer in self.busy_peers:
            return "the repair ladder is working on it"
        left = self.cooling(peer)
        if left > 0:
            return f"cooling down for {left:.0f} s after an escalation"
        return ""

    def request(self, peer: str, reason: str, probe: PeerProbe | None = None) -> bool:
        """Start an episode in the background if the gate allows; True if one started."""
        why = self.blocked(peer)
        if why:
            log.debug("fleet: not healing %s now: %s", peer, why)
            return False
        self._loop = asyncio.get_running_loop()
        task = asyncio.create_task(self.heal(peer, reason, probe), name=f"heal-{peer}")
        self.active[peer] = task
        task.add_done_callback(lambda t, p=peer: self._done(p, t))
        return True

    def _done(self, peer: str, task: asyncio.Task[Episode]) -> None:
        if self.active.get(peer) is task:
            del self.active[peer]
        if not task.cancelled() and task.exception() is not None:
            log.error("healing episode for %s crashed", peer, exc_info=task.exception())

    async def stop(self) -> None:
        tasks = list(self.active.values())
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    # -- one episode ---------------------------------------------------------------------

    async def heal(self, peer: str, reason: str, probe: PeerProbe | None = None) -> Episode:
        """Heal ``peer`` until healthy or escalated; returns the episode.

        Several nodes may see the same broken peer: the one holding the lease ``heal-<peer>``
        heals it, the others leave it alone. The lease is renewed while the episode runs, so
        a node that dies mid-episode loses it within ``store.lease_ttl_s`` and another node's
        next sweep takes over.
        """
        self._loop = asyncio.get_running_loop()
        node = self.ctx.view.peer(peer)
        ep = Episode(peer, reason)
        settings = self.ctx.settings
        lease = Lease(self.store, f"heal-{peer}", self.owner, settings.store.lease_ttl_s,
                      clock=self.clock)
        if not await asyncio.to_thread(lease.acquire):
            ep.state, ep.ended_at = "elsewhere", time.time()
            self.emit("elsewhere", peer, holder=await asyncio.to_thread(lease.holder))
            return ep
        self.episodes[peer] = ep
        self.emit("episode", peer, reason=reason)
        renewer = asyncio.create_task(self._keep(lease))
        try:
            await self._run(ep, node, probe)
        except asyncio.CancelledError:
            ep.state = "stopped"
            raise
        finally:
            renewer.cancel()
            ep.ended_at = ep.ended_at or time.time()
            self._save(ep)
            await asyncio.to_thread(lease.release)
        return ep

    async def _keep(self, lease: Lease) -> None:
        while True:
            await asyncio.sleep(max(0.5, lease.ttl_s / 3))
            if not await asyncio.to_thread(lease.renew):
                log.warning("fleet: lost the lease %s", lease.name)
                return

    async def _diagnose(self, ep: Episode, node: NodeEntry) -> PeerProbe:
        task = AgentTask("channel-diagnoser", node.node_id, kind="diagnose",
                         context=self._context(node, None, ep.reason),
                         timeout_s=self.ctx.fleet.agent_timeout_s, incident=self._incident(ep))
        try:
            outcome = await self.run_agent(task)
            found = probe_from_result(node.node_id, outcome.result)
            if found is not None:
                return found
        except UsageError:
            log.exception("channel-diagnoser could not run for %s", node.node_id)
        return await probe_peer(self.ctx, node)

    async def _run(self, ep: Episode, node: NodeEntry, probe: PeerProbe | None) -> None:
        f = self.ctx.fleet
        probe = await self._diagnose(ep, node)
        ep.broken = list(probe.broken)
        counts: Counter[str] = Counter()
        not_before: dict[str, float] = {}
        inflight: dict[str, asyncio.Task[RunOutcome]] = {}
        attempt_of: dict[str, HealAttempt] = {}
        rounds = f.max_heal_attempts * 6 + 4
        for _ in range(rounds):
            ep.last_probe = probe.to_dict()
            if probe.ok and not ep.attempts:
                # Broken when the sweep looked, fine when the diagnoser did: a blip.
                ep.state, ep.ended_at = "transient", time.time()
                self.emit("transient", ep.peer)
                return
            if probe.ok:
                ep.state, ep.ended_at = "healed", time.time()
                self._count("healed")
                self.emit("healed", ep.peer, duration_s=ep.duration_s, agents=ep.agents,
                          broken=ep.broken)
                log.info("fleet: %s healed in %.1f s (%s)", ep.peer, ep.duration_s,
                         ", ".join(ep.agents) or "no agent needed")
                return
            node = self.ctx.view.peer(ep.peer)  # a config updater may have moved it
            fix = plan(probe, announced_elsewhere=self._moved(node))
            self.emit("diagnosis", ep.peer, broken=probe.broken,
                      repairs=[r.agent for r in fix.repairs], needs_a_person=fix.unrepairable)
            if fix.empty and not fix.unrepairable and not inflight:
                # Only waiting on another peer (the chief, for the relay): its own episode
                # heals it; holding this one open would only block this peer's next one.
                ep.state, ep.ended_at = "deferred", time.time()
                self.emit("deferred", ep.peer, waiting=fix.waiting)
                return
            due = [r for r in fix.repairs if r.kind not in inflight]
            spent = [r for r in due if counts[r.kind] >= f.max_heal_attempts]
            refused = [r for r in due if r.kind not in f.allowed_actions]
            if spent or refused or (not fix.repairs and fix.unrepairable and not inflight):
                await self._escalate(ep, node, probe, fix, spent, refused)
                return
            now = time.monotonic()
            for r in due:
                if not_before.get(r.kind, 0) > now:
                    continue
                counts[r.kind] += 1
                attempt = HealAttempt(counts[r.kind], r.agent, r.kind, list(r.channels),
                                      time.time())
                ep.attempts.append(attempt)
                attempt_of[r.kind] = attempt
                inflight[r.kind] = self._dispatch(ep, node, r, probe, attempt)
            waits = [t - now for t in not_before.values() if t > now]
            await self._wait(ep.peer, inflight, f.heal_wait_s if inflight else
                             min([*waits, f.heal_wait_s]))
            handed_off = None
            for kind, t in list(inflight.items()):
                if t.done():
                    del inflight[kind]
                    a = attempt_of[kind]
                    if a.status == "escalated":
                        handed_off = a  # the agent handed it to a person: do not retry
                    elif a.status not in ("healed", "ok", "fixed"):
                        not_before[kind] = time.monotonic() + min(f.heal_wait_s,
                                                                  2.0 ** (a.number - 1))
            if handed_off is not None:
                if inflight:
                    await self._wait(ep.peer, inflight, f.heal_wait_s)
                node = self.ctx.view.peer(ep.peer)
                probe = await probe_peer(self.ctx, node)
                await self._escalate(ep, node, probe, plan(probe), [], [],
                                     handed_off=handed_off)
                return
            node = self.ctx.view.peer(ep.peer)
            probe = await probe_peer(self.ctx, node)
        await self._escalate(ep, node, probe, plan(probe), [], [], rounds_exhausted=True)

    def _moved(self, node: NodeEntry) -> bool:
        beat = self.ctx.heartbeats.get(node.node_id)
        age = self.ctx.heartbeats.age(node.node_id)
        return beat is not None and age is not None and age < 3 * self.ctx.fleet.stale_s and \
            (beat.host, beat.port) != (node.host, node.port)

    def _incident(self, ep: Episode) -> str:
        return f"fleet-{ep.peer}-{int(ep.started_at)}"

    def _context(self, node: NodeEntry, probe: PeerProbe | None, problem: str) -> dict[str, Any]:
        chans = [ChannelStatus(n, o.ok, o.detail, o.latency_ms)
                 for n, o in (probe.channels.items() if probe else ())]
        return {"fleet": self.ctx, "peer": as_agent_peer(node), "channels": chans,
                "problem": problem}

    def _dispatch(self, ep: Episode, node: NodeEntry, r: Repair, probe: PeerProbe,
                  attempt: HealAttempt) -> asyncio.Task[RunOutcome]:
        key = (r.kind, node.node_id)
        self._landed[key] = asyncio.Event()
        task = AgentTask(r.agent, node.node_id, kind=r.kind,
                         timeout_s=self.ctx.fleet.agent_timeout_s,
                         context=self._context(node, probe, f"{', '.join(r.channels)}: {r.why}"),
                         incident=self._incident(ep))
        self.emit("dispatch", ep.peer, agent=r.agent, kind=r.kind, channels=list(r.channels),
                  attempt=attempt.number, why=r.why)
        log.info("fleet: %s: %s broken (%s) → %s, attempt %d", ep.peer, ", ".join(r.channels),
                 r.why, r.agent, attempt.number)

        async def run() -> RunOutcome:
            start = time.monotonic()
            try:
                outcome = await self.run_agent(task)
            except Exception as exc:  # a task that cannot even start is a failed attempt
                attempt.status, attempt.summary = "failed", str(exc)[:500]
                raise
            finally:
                attempt.duration_s = time.monotonic() - start
                self._set_landed(*key)
            attempt.status = outcome.status
            attempt.summary = str((outcome.result or {}).get("summary") or outcome.error)[:1000]
            attempt.run_id, attempt.result_path = outcome.run_id, outcome.result_path
            self._count(outcome.status, r.kind)
            self.emit("result", ep.peer, agent=r.agent, kind=r.kind, status=outcome.status,
                      summary=attempt.summary, attempt=attempt.number,
                      duration_s=attempt.duration_s)
            return outcome

        return asyncio.create_task(run(), name=f"{r.agent}-{node.node_id}")

    async def _wait(self, peer: str, inflight: dict[str, asyncio.Task[RunOutcome]],
                    timeout: float) -> None:
        """Until one in-flight agent's result lands (task done or bus), or ``timeout``."""
        if timeout <= 0:
            return
        if not inflight:
            await asyncio.sleep(timeout)
            return
        waiters = [asyncio.ensure_future(self._landed[(k, peer)].wait()) for k in inflight
                   if (k, peer) in self._landed]
        try:
            await asyncio.wait([*waiters, *inflight.values()], timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        # A result on the bus can land a moment before its run returns: let it finish.
        pending = [t for t in inflight.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=0.5)

    def _count(self, outcome: str, kind: str = "episode") -> None:
        if self.metrics is not None:
            self.metrics.heals.labels(kind=kind, outcome=outcome).inc()

    def _save(self, ep: Episode) -> None:
        cooldown = ep.state == "escalated"

        def fn(d: dict[str, Any] | None) -> dict[str, Any]:
            d = d or {}
            history = [*d.get("history", [])[-9:], ep.to_dict()]
            out = {**d, "peer": ep.peer, "last": ep.to_dict(), "history": history}
            if cooldown:
                out["cooldown_until"] = self.clock() + self.ctx.fleet.repair_cooldown_s
            elif ep.state == "healed":
                out["cooldown_until"] = 0.0  # fixed (by a person, maybe): back to normal
            return out

        try:
            self.store.update(RECORDS, ep.peer, fn)
        except Exception:
            log.exception("could not record the healing episode of %s", ep.peer)

    # -- escalation ----------------------------------------------------------------------

    async def _escalate(self, ep: Episode, node: NodeEntry, probe: PeerProbe, fix: Plan,
                        spent: list[Repair], refused: list[Repair], *,
                        rounds_exhausted: bool = False,
                        handed_off: HealAttempt | None = None) -> None:
        from healer.core.escalation import escalate
        from healer.fleet.escalation import build

        esc = build(self.ctx, node, ep, probe, fix, spent, refused,
                    rounds_exhausted=rounds_exhausted,
                    handed_off=f"{handed_off.agent}: {handed_off.summary}" if handed_off
                    else "")
        ep.state, ep.ended_at = "escalated", time.time()
        record = await escalate(self.ctx.settings, self.store, esc, metrics=self.metrics)
        ep.escalation = str(record.seed_file or "")
        self._count("escalated")
        self.emit("escalated", ep.peer, broken=probe.broken, seed_file=ep.escalation,
                  attempts=len(ep.attempts), title=esc.title)
        log.warning("fleet: %s escalated to a human: %s", ep.peer, esc.title)
