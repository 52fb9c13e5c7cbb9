"""The master healer: diagnose → repair each broken channel → re-probe → healed, or a person.

One **episode** per peer at a time::

    diagnose (the channel-diagnoser agent)
    loop:
        plan the repairs (healer.fleet.diagnosis): one agent per root cause
        dispatch each in the background (executor: playbook or Claude)
        wait until an agent's run ends or its result lands (results bus) — at most
            fleet.heal_wait_s
        verify: re-probe until what it repaired works or fleet.heal_wait_s passes (between
            failed runs: until the pause before the next run ends)
    until every channel works                                  → healed, logged
    or a person's silence covers the incident (automatic episodes, before any
       repair runs; healer.core.silences)                      → silenced, no agent
    or a repair kind failed fleet.max_heal_attempts (3) times  → escalated to a human
    or what is broken has no agent (SSH, git, machine down)    → escalated to a human
    (both only once a re-probe until a deadline still shows it broken)

Bounded everywhere, because the original once made 55 repair attempts on one stale
heartbeat: at most ``max_heal_attempts`` runs per repair kind per episode, a growing pause
between failed runs of one kind, one episode per peer at a time, and after an escalation the
**problem** (the repair kind, or the channel that needs a person; ``healer.fleet.diagnosis``)
is left alone on that peer for ``fleet.repair_cooldown_s`` — the core gate's cooldown on the
key ``fleet.<peer>.<problem>``, the one every kind uses (the escalation is one seed file in
``.fleet-messages/human/`` naming the peer, the broken channels, every attempt with its result,
and the exact commands a person should run). Incidents are ``fleet-<peer>-<problem>``: a new,
different fault on a peer whose other problem is with a person opens its own episode, is
healed, or escalated on its own; what the person already has is left to them.

Races it guards against: a sweep's probe that started before the last episode of a peer
ended is stale and starts nothing; a result that lands on the bus wakes only the run it
belongs to (results are matched by run id, not by kind and peer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from healer.agents.task import AgentTask, RunOutcome, new_run_id
from healer.config import NodeEntry
from healer.core import gate
from healer.core.store import Store
from healer.errors import UsageError
from healer.fleet import incidents as fleet_incidents
from healer.fleet.channels import FleetContext, Outcome, PeerProbe, probe_peer
from healer.fleet.diagnosis import Plan, Repair, incident_id, person, plan
from healer.fleet.episode import Episode, HealAttempt
from healer.fleet.hold import PeerHold
from healer.fleet.peers import agent_context

log = logging.getLogger(__name__)

RECORDS = "fleet-heal"


def cooldown_key(peer: str, problem: str = "") -> str:
    """The core gate's key for a problem of a peer (the prefix of all of them without one)."""
    return f"fleet.{peer}.{problem}"
RESULT_KINDS = ("diagnose", "daemon", "tunnel", "config", "nats", "inbox")
SUCCESS = ("healed", "ok", "fixed")
ANY = "*"  # a cooldown recorded before cooldowns were kept per problem: covers every problem
_EVERY_S = 0.25  # between re-probes of what is being verified
RunAgent = Callable[[AgentTask], Awaitable[RunOutcome]]
Event = dict[str, Any]


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
                 dispatcher: Any = None, clock: Callable[[], float] = time.time):
        self.ctx = ctx
        self.store = store
        self.metrics = metrics
        self.clock = clock
        self.dispatcher = dispatcher  # the loop's (bus attached); else made on first use
        self.run_agent = run_agent or self._start_run
        self._listeners: list[Callable[[Event], None]] = [on_event] if on_event else []
        self.active: dict[str, asyncio.Task[Episode]] = {}
        self.episodes: dict[str, Episode] = {}
        # Run id → set when that run's result lands on the bus; run id → (kind, peer, start).
        self._landed: dict[str, asyncio.Event] = {}
        self._runs: dict[str, tuple[str, str, float]] = {}
        self._landed_status: dict[str, str] = {}
        self._verified: dict[str, float] = {}  # peer → when its last episode's last probe began
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

    def result_landed(self, kind: str, target: str, run_id: str = "", status: str = "",
                      epoch: int = 0) -> None:
        """Called by the results bus (any thread) when an agent result arrives.

        It wakes the run it belongs to (by ``run_id``); a result without a run id wakes the
        runs of that kind and peer that started before it was written.
        """
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._set_landed, kind, target, run_id, status, epoch)

    def _set_landed(self, kind: str, target: str, run_id: str = "", status: str = "",
                    epoch: int = 0) -> None:
        if run_id:
            hits = [run_id] if run_id in self._landed else []
        else:
            hits = [rid for rid, (k, t, start) in self._runs.items()
                    if (k, t) == (kind, target) and (not epoch or epoch >= int(start))]
        for rid in hits:
            if status:
                self._landed_status[rid] = status
            self._landed[rid].set()

    async def _start_run(self, task: AgentTask) -> RunOutcome:
        if self.dispatcher is None:
            from healer.agents import dispatcher

            self.dispatcher = dispatcher(self.ctx.settings)
        outcome: RunOutcome = await self.dispatcher.run(task)
        return outcome

    # -- gates ---------------------------------------------------------------------------

    def cooldowns(self, peer: str) -> dict[str, float]:
        """Problems of ``peer`` left alone after an escalation → seconds still to go (the
        core gate's cooldowns; one kept in an older fleet-heal record counts until its
        episode record is next written, which moves it to the gate)."""
        now = self.clock()
        out = gate.cooling(gate.admission(self.store), cooldown_key(peer), now=now,
                           cooldown_s=self.ctx.fleet.repair_cooldown_s)
        rec = self.store.get(RECORDS, peer)
        for problem, until in _legacy_cooldowns(rec.data if rec else {}, now).items():
            out[problem] = max(out.get(problem, 0.0), until - now)
        return out

    def cooling(self, peer: str, problem: str | None = None) -> float:
        """Seconds ``problem`` (any problem, if None) of ``peer`` is still left alone after
        an escalation (0 if not)."""
        left = self.cooldowns(peer)
        if problem is None:
            return max(left.values(), default=0.0)
        return max(left.get(problem, 0.0), left.get(ANY, 0.0))

    def _plan(self, peer: str, probe: PeerProbe) -> Plan:
        try:
            node = self.ctx.view.peer(peer)
        except UsageError:
            return plan(probe)
        return plan(probe, announced_elsewhere=self._moved(node))

    def blocked(self, peer: str, probe: PeerProbe | None = None) -> str:
        """Why an episode for ``peer`` may not start now ("" if it may).

        With the ``probe`` that found it broken, a cooldown blocks only when every problem
        the probe shows was escalated already: a new, different one is its own incident.
        """
        if peer in self.active and not self.active[peer].done():
            return "an episode is already healing it"
        if peer in self.busy_peers:
            return "the repair ladder is working on it"
        left = self.cooldowns(peer)
        if not left:
            return ""
        if probe is not None:
            problems = self._plan(peer, probe).problems
            if ANY not in left and problems - set(left):
                return ""
        return (f"cooling down for {max(left.values()):.0f} s after an escalation "
                f"({', '.join(sorted(left))})")

    def _silenced(self, peer: str, iid: str, problems: list[str], broken: list[str]) -> str:
        """The silence that covers incident ``iid`` now (recorded on it, counted), or ""."""
        sid = fleet_incidents.silenced(self.store, peer, iid, problems, broken,
                                       clock=self.clock)
        if sid:
            self._count("silenced")
            self.emit("silenced", peer, silence=sid, incident=iid, broken=broken)
            log.info("fleet: not healing %s: %s is silenced by %s", peer, iid, sid)
        return sid

    def request(self, peer: str, reason: str, probe: PeerProbe | None = None) -> bool:
        """Start an episode in the background if the gate allows; True if one started.

        A ``probe`` that began before the last episode of ``peer`` looked for the last time is
        stale (the sweep was probing while that episode healed it) and starts nothing. With
        a ``probe``, a person's silence that covers the incident it shows starts nothing
        either (not even the diagnoser): the signal is recorded and counted as ``silenced``.
        """
        if probe is not None and probe.at <= self._verified.get(peer, 0.0):
            log.debug("fleet: not healing %s now: the probe that found it broken predates the "
                      "end of its last episode", peer)
            return False
        why = self.blocked(peer, probe)
        if why:
            log.debug("fleet: not healing %s now: %s", peer, why)
            return False
        if probe is not None:
            problems = sorted(self._plan(peer, probe).problems)
            if problems and self._silenced(peer, incident_id(peer, problems), problems,
                                           list(probe.broken)):
                return False
        self._loop = asyncio.get_running_loop()
        task = asyncio.create_task(self.heal(peer, reason, probe, respect_cooldowns=True),
                                   name=f"heal-{peer}")
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

    async def heal(self, peer: str, reason: str, probe: PeerProbe | None = None, *,
                   respect_cooldowns: bool = False) -> Episode:
        """Heal ``peer`` until healthy or escalated; returns the episode.

        ``respect_cooldowns`` (automatic episodes): problems escalated before and still
        cooling down are left to the person who has them; a person's own ``healer fleet
        heal`` tries everything again.

        Several nodes may see the same broken peer: the one that holds it (``healer.fleet.
        hold``: the lease ``heal-<peer>`` and the core gate's claim) heals it, the others —
        and repair ladders — leave it alone. The lease is renewed while the episode runs, so
        a node that dies mid-episode loses it within ``store.lease_ttl_s`` and another node's
        next sweep takes over (and releases the claim it left).
        """
        self._loop = asyncio.get_running_loop()
        node = self.ctx.view.peer(peer)
        ep = Episode(peer, reason, respect_cooldowns=respect_cooldowns)
        settings = self.ctx.settings
        hold = PeerHold(self.store, peer, self.owner, settings.store.lease_ttl_s,
                        clock=self.clock)
        if not await hold.acquire():
            ep.state, ep.ended_at = "elsewhere", time.time()
            self.emit("elsewhere", peer, holder=await hold.holder())
            return ep
        self.episodes[peer] = ep
        self.emit("episode", peer, reason=reason)
        try:
            await self._run(ep, node, probe)
        except asyncio.CancelledError:
            ep.state = "stopped"
            raise
        finally:
            ep.ended_at = ep.ended_at or time.time()
            if ep.verified_at:
                self._verified[peer] = max(self._verified.get(peer, 0.0), ep.verified_at)
            self._save(ep)
            fleet_incidents.episode_ended(self.store, ep)
            await hold.release()
        return ep

    async def _diagnose(self, ep: Episode, node: NodeEntry) -> PeerProbe:
        task = AgentTask("channel-diagnoser", node.node_id, kind="diagnose",
                         context=self._context(node, None, ep.reason),
                         timeout_s=self.ctx.fleet.agent_timeout_s,
                         network=self.ctx.view.endpoints(),
                         incident=incident_id(node.node_id, ["diagnose"]))
        try:
            outcome = await self.run_agent(task)
            found = probe_from_result(node.node_id, outcome.result)
            if found is not None:
                return found
        except UsageError:
            log.exception("channel-diagnoser could not run for %s", node.node_id)
        return await probe_peer(self.ctx, node)

    def _held(self, ep: Episode, fix: Plan) -> set[str]:
        """The problems of ``fix`` a person already has (escalated, cooling down)."""
        if not ep.respect_cooldowns:
            return set()
        left = self.cooldowns(ep.peer)
        if ANY in left:
            return set(fix.problems)
        return {p for p in fix.problems if p in left}

    async def _run(self, ep: Episode, node: NodeEntry, probe: PeerProbe | None) -> None:
        f = self.ctx.fleet
        probe = await self._diagnose(ep, node)
        ep.broken = list(probe.broken)
        counts: Counter[str] = Counter()
        not_before: dict[str, float] = {}
        inflight: dict[str, asyncio.Task[RunOutcome]] = {}
        attempt_of: dict[str, HealAttempt] = {}
        seen: set[str] = set()  # runs whose landed result this episode has reacted to
        rounds = f.max_heal_attempts * 6 + 4
        for _ in range(rounds):
            ep.last_probe = probe.to_dict()
            ep.verified_at = max(ep.verified_at, probe.at)
            if probe.ok and not ep.attempts:
                # Broken when the sweep looked, fine when the diagnoser did: a blip.
                ep.state, ep.ended_at = "transient", time.time()
                self.emit("transient", ep.peer)
                return
            if probe.ok:
                ep.state, ep.ended_at = "healed", time.time()
                self._count("healed")
                self.emit("healed", ep.peer, duration_s=ep.duration_s, agents=ep.agents,
                          broken=ep.broken, incident=ep.incident)
                log.info("fleet: %s healed in %.1f s (%s)", ep.peer, ep.duration_s,
                         ", ".join(ep.agents) or "no agent needed")
                return
            node = self.ctx.view.peer(ep.peer)  # a config updater may have moved it
            full = plan(probe, announced_elsewhere=self._moved(node))
            held = self._held(ep, full)
            fix = full.without(held)
            ep.problems = sorted(set(ep.problems) | fix.problems)
            ep.held = sorted(held)
            ep.incident = incident_id(ep.peer, ep.problems or held)
            self.emit("diagnosis", ep.peer, broken=probe.broken,
                      repairs=[r.agent for r in fix.repairs], needs_a_person=fix.unrepairable,
                      held=ep.held)
            if ep.respect_cooldowns and not inflight and ep.problems and self._silenced(
                    ep.peer, ep.incident, ep.problems, list(probe.broken)):
                ep.state, ep.ended_at = "silenced", time.time()
                return
            if fix.empty and not fix.unrepairable and not inflight:
                if held:
                    # What is still broken was escalated before: the person has it.
                    ep.state, ep.ended_at = "held", time.time()
                    self.emit("held", ep.peer, broken=probe.broken, problems=ep.held,
                              agents=ep.agents, duration_s=ep.duration_s)
                    log.info("fleet: %s: %s still broken, left to a person (%s)", ep.peer,
                             ", ".join(probe.broken), ", ".join(ep.held))
                    return
                # Only waiting on another peer (the chief, for the relay): its own episode
                # heals it; holding this one open would only block this peer's next one.
                ep.state, ep.ended_at = "deferred", time.time()
                self.emit("deferred", ep.peer, waiting=fix.waiting)
                return
            # A run in flight repairs its channels: a daemon's restart brings its NATS link
            # back a moment after /health, which is no fault of its own to send another for.
            busy = {c for kind in inflight for c in attempt_of[kind].channels}
            due = [r for r in fix.repairs
                   if r.kind not in inflight and not set(r.channels) <= busy]
            spent = [r for r in due if counts[r.kind] >= f.max_heal_attempts]
            refused = [r for r in due if r.kind not in f.allowed_actions]
            if spent or refused or (not fix.repairs and fix.unrepairable and not inflight):
                # One probe is no proof (a busy machine times probes out): before a person is
                # asked, look again until a deadline — the end of the pause a next run would
                # have waited, or fleet.heal_wait_s.
                why = {c for r in [*spent, *refused] for c in r.channels} or \
                    set(fix.unrepairable)
                until = max([not_before.get(r.kind, 0.0) for r in spent] or [0.0])
                if not spent:
                    until = time.monotonic() + f.heal_wait_s
                again = await self._reprobe(ep.peer, why, until)
                if set(again.broken) & why != set(probe.broken) & why:
                    probe = again  # it changed: plan again from what is true now
                    continue
                probe = again
                await self._escalate(ep, self.ctx.view.peer(ep.peer), probe,
                                     fix, spent, refused)
                return
            now = time.monotonic()
            for r in due:
                if not_before.get(r.kind, 0) > now:
                    continue
                counts[r.kind] += 1
                attempt = HealAttempt(counts[r.kind], r.agent, r.kind, list(r.channels),
                                      time.time(), run_id=new_run_id())
                ep.attempts.append(attempt)
                attempt_of[r.kind] = attempt
                await asyncio.to_thread(fleet_incidents.dispatched, self.store, ep, attempt)
                inflight[r.kind] = self._dispatch(ep, node, r, probe, attempt)
            if not inflight:
                # Pausing before the next run: watch the broken channels meanwhile, so a
                # repair that takes effect slowly is seen without another run.
                waits = [t for t in not_before.values() if t > now]
                until = min([*waits, now + f.heal_wait_s])
                probe = await self._reprobe(ep.peer, set(probe.broken), until)
                continue
            await self._wait(inflight, attempt_of, seen, f.heal_wait_s)
            handed_off = None
            claimed: set[str] = set()  # channels an agent says it repaired
            for kind, t in list(inflight.items()):
                a = attempt_of[kind]
                if self._landed_status.get(a.run_id, "") in SUCCESS and a.status == "running":
                    claimed |= set(a.channels)  # its result is on the bus; the run lingers
                if not t.done():
                    continue
                del inflight[kind]
                if a.status == "escalated":
                    handed_off = a  # the agent handed it to a person: do not retry
                elif a.status in SUCCESS:
                    claimed |= set(a.channels)
                else:
                    not_before[kind] = time.monotonic() + min(f.heal_wait_s,
                                                              2.0 ** (a.number - 1))
            if handed_off is not None:
                if inflight:
                    await self._wait(inflight, attempt_of, seen, f.heal_wait_s)
                node = self.ctx.view.peer(ep.peer)
                probe = await probe_peer(self.ctx, node)
                await self._escalate(ep, node, probe, plan(probe), [], [],
                                     handed_off=handed_off)
                return
            # Verify: what an agent says it repaired must work, re-probed until a deadline
            # (a route, a link or a daemon can take a moment to come back).
            probe = await self._reprobe(ep.peer, claimed, time.monotonic() + f.heal_wait_s)
        node = self.ctx.view.peer(ep.peer)
        await self._escalate(ep, node, probe, plan(probe), [], [], rounds_exhausted=True)

    async def _reprobe(self, peer: str, channels: set[str], until: float) -> PeerProbe:
        """Probe every channel of ``peer``; while one of ``channels`` still fails, probe
        those again until they work or ``until`` (monotonic) passes."""
        probe = await probe_peer(self.ctx, self.ctx.view.peer(peer))
        watch = set(channels) & set(probe.channels)
        while set(probe.broken) & watch and time.monotonic() < until:
            await asyncio.sleep(max(0.0, min(_EVERY_S, until - time.monotonic())))
            again = await probe_peer(self.ctx, self.ctx.view.peer(peer),
                                     sorted(set(probe.broken) & watch))
            probe.channels.update(again.channels)
            probe.at = again.at  # when what it says now was last looked at
        return probe

    def _moved(self, node: NodeEntry) -> bool:
        beat = self.ctx.heartbeats.get(node.node_id)
        age = self.ctx.heartbeats.age(node.node_id)
        return beat is not None and age is not None and age < 3 * self.ctx.fleet.stale_s and \
            (beat.host, beat.port) != (node.host, node.port)

    def _context(self, node: NodeEntry, probe: PeerProbe | None, problem: str) -> dict[str, Any]:
        return agent_context(node, probe=probe, problem=problem, fleet=self.ctx)

    def _dispatch(self, ep: Episode, node: NodeEntry, r: Repair, probe: PeerProbe,
                  attempt: HealAttempt) -> asyncio.Task[RunOutcome]:
        rid = attempt.run_id
        self._landed[rid] = asyncio.Event()
        self._runs[rid] = (r.kind, node.node_id, time.time())
        task = AgentTask(r.agent, node.node_id, kind=r.kind,
                         timeout_s=self.ctx.fleet.agent_timeout_s,
                         network=self.ctx.view.endpoints(),
                         context=self._context(node, probe, f"{', '.join(r.channels)}: {r.why}"),
                         incident=incident_id(node.node_id, [r.kind]), run_id=rid)
        self.emit("dispatch", ep.peer, agent=r.agent, kind=r.kind, channels=list(r.channels),
                  attempt=attempt.number, why=r.why, run_id=rid)
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
                self._landed[rid].set()
                self._landed.pop(rid, None)
                self._runs.pop(rid, None)
                self._landed_status.pop(rid, None)
            attempt.status = outcome.status
            attempt.summary = str((outcome.result or {}).get("summary") or outcome.error)[:1000]
            attempt.run_id = outcome.run_id or rid
            attempt.result_path = outcome.result_path
            self._count(outcome.status, r.kind)
            self.emit("result", ep.peer, agent=r.agent, kind=r.kind, status=outcome.status,
                      summary=attempt.summary, attempt=attempt.number,
                      duration_s=attempt.duration_s)
            return outcome

        return asyncio.create_task(run(), name=f"{r.agent}-{node.node_id}")

    async def _wait(self, inflight: dict[str, asyncio.Task[RunOutcome]],
                    attempt_of: dict[str, HealAttempt], seen: set[str],
                    timeout: float) -> None:
        """Until one in-flight agent's run ends or its result lands on the bus, or
        ``timeout``. A landed result wakes this once (``seen`` keeps the run ids already
        woken for); after that only the run's end does."""
        if timeout <= 0 or not inflight:
            return
        events = {attempt_of[k].run_id: self._landed[attempt_of[k].run_id] for k in inflight
                  if attempt_of[k].run_id in self._landed}
        waiters = [asyncio.ensure_future(ev.wait()) for rid, ev in events.items()
                   if rid not in seen]
        try:
            await asyncio.wait([*waiters, *inflight.values()], timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        landed = {rid for rid, ev in events.items() if ev.is_set()}
        # A result on the bus can land a moment before its run returns: let it finish.
        pending = [t for t in inflight.values() if not t.done()]
        if pending and landed - seen:
            await asyncio.wait(pending, timeout=0.5)
        seen |= landed

    def _count(self, outcome: str, kind: str = "episode") -> None:
        if self.metrics is not None:
            self.metrics.heals.labels(kind=kind, outcome=outcome).inc()

    def _save(self, ep: Episode) -> None:
        now = self.clock()
        legacy: dict[str, float] = {}

        def fn(d: dict[str, Any] | None) -> dict[str, Any]:
            d = d or {}
            legacy.update(_legacy_cooldowns(d, now))
            history = [*d.get("history", [])[-9:], ep.to_dict()]
            out = {**d, "peer": ep.peer, "last": ep.to_dict(), "history": history}
            out.pop("cooldowns", None)
            out.pop("cooldown_until", None)
            return out

        try:
            self.store.update(RECORDS, ep.peer, fn)
            if ep.state == "healed":  # fixed (by a person, maybe): back to normal
                gate.clear_cooldowns(self.store, cooldown_key(ep.peer))
                return
            cool_s = self.ctx.fleet.repair_cooldown_s
            for problem, until in legacy.items():  # an older record's, moved to the gate
                gate.cool(self.store, [cooldown_key(ep.peer, problem)], now=until - cool_s)
            if ep.state == "escalated":
                gate.cool(self.store, [cooldown_key(ep.peer, p) for p in ep.escalated or [ANY]],
                          now=now)
        except Exception:
            log.exception("could not record the healing episode of %s", ep.peer)

    # -- escalation ----------------------------------------------------------------------

    async def _escalate(self, ep: Episode, node: NodeEntry, probe: PeerProbe, fix: Plan,
                        spent: list[Repair], refused: list[Repair], *,
                        rounds_exhausted: bool = False,
                        handed_off: HealAttempt | None = None) -> None:
        from healer.core.escalation import escalate
        from healer.fleet.escalation import build

        if handed_off is not None:
            problems = {handed_off.kind}
        elif spent or refused:
            problems = {r.kind for r in [*spent, *refused]}
        elif fix.unrepairable and not fix.repairs:
            problems = {person(c) for c in fix.unrepairable}
        else:
            problems = set(ep.problems) | {a.kind for a in ep.attempts}
        ep.escalated = sorted(problems - set(ep.held)) or sorted(problems)
        ep.verified_at = max(ep.verified_at, probe.at)
        ep.incident = incident_id(ep.peer, ep.escalated)
        esc = build(self.ctx, node, ep, probe, fix, spent, refused,
                    rounds_exhausted=rounds_exhausted,
                    handed_off=f"{handed_off.agent}: {handed_off.summary}" if handed_off
                    else "")
        ep.state, ep.ended_at = "escalated", time.time()
        record = await escalate(self.ctx.settings, self.store, esc, metrics=self.metrics)
        ep.escalation = str(record.seed_file or "")
        self._count("escalated")
        self.emit("escalated", ep.peer, broken=probe.broken, seed_file=ep.escalation,
                  attempts=len(ep.attempts), title=esc.title, incident=ep.incident,
                  problems=ep.escalated)
        log.warning("fleet: %s escalated to a human: %s", ep.peer, esc.title)


def _legacy_cooldowns(data: dict[str, Any], now: float) -> dict[str, float]:
    """Cooldowns an older version kept in the fleet-heal record: problem → until."""
    out = {str(k): float(v) for k, v in (data.get("cooldowns") or {}).items() if float(v) > now}
    until = float(data.get("cooldown_until", 0.0))
    if until > now and "cooldowns" not in data:
        out[ANY] = until
    return out
