"""Evaluation → remediation → re-evaluation, bounded, then escalation to a human.

For each new issue on a session: one remediation per (issue type, target) at a time (a store
record taken with compare-and-set), the ``evaluation-agent`` writes the root-cause analysis to
the forge (one issue per alert code and workflow family within the dedup window), then up to
``play.max_iterations`` rounds of ``remediation-agent`` at climbing levels, each followed by a
re-evaluation ``play.reevaluate_after_s`` later. Still broken after the last round — or a
security finding from the start — and a human gets the escalation.

A run holds the remediation's lease (``healer.play.ownership``) and writes only while it
does. The record keeps what another replica needs to go on — the issue, the attempts made,
whether the evaluation is done, the round in flight — so that when the run's replica dies or
stops, ``take_over`` (the ``play-takeover`` duty) resumes the cycle elsewhere where it was:
same gate claim, no second evaluation, the attempts made counted, one escalation.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from healer.agents.results import DEFERRED
from healer.agents.task import AgentTask, RunOutcome, new_run_id
from healer.config import Settings
from healer.core import gate
from healer.core import incidents as inc
from healer.core.audit import Audit
from healer.core.escalation import Attempt, Escalation, EscalationRecord, escalate
from healer.core.publish.forge_issues import Issues, dedup_key
from healer.core.silences import Silences
from healer.core.store import Store
from healer.core.verify import HEALED, RETRY, TIMEOUT, Verdict, next_step
from healer.errors import ConflictError, HealerError, RemediationLostError, StoreError
from healer.play import evaluate, ownership, workspace
from healer.play.about import play_about
from healer.play.ownership import RemediationLease
from healer.play.sessions import SessionRegistry, healer_url, iso

log = logging.getLogger(__name__)

KIND = "remediations"
RUNNING = "remediations-running"  # store set: the keys of remediations marked running
RUNNING_INDEXED = ("remediation-index", "running")  # marks that RUNNING covers every record
_SEVERITY = {"critical": "critical", "high": "high", "error": "high", "warning": "medium",
             "medium": "medium", "low": "low", "info": "info"}
RunAgent = Callable[[AgentTask], Any]  # async (task) -> RunOutcome
MAX_DEFERRALS = 12  # then the deferred outcome counts like any failed one
# Takeovers of one remediation after which the next escalates at once instead of going on: a
# remediation whose runs keep stopping (replicas dying, a store failing at the same step)
# must still end with a person told, not loop.
MAX_TAKEOVERS = 3
DEFER_CAP_S = 900.0
BUDGET_WAIT_CAP_S = 86_400.0


def running_keys(store: Store) -> list[str]:
    """The keys of remediations marked running, from their index (O(running), not every
    remediation ever recorded). A state dir from before the index is indexed once."""
    store.index_once(RUNNING_INDEXED, KIND, lambda rec: store.add_member(RUNNING, rec.key)
                     if rec.data.get("status") == "running" else None)
    return store.members(RUNNING)


def claim_key(key: str) -> str:
    """The core gate's novelty key of the remediation ``key``."""
    return f"play.{key}"


@dataclass
class Run:
    """One run of a remediation's cycle on this replica, under its lease."""

    key: str
    play_id: str
    issue: dict[str, Any]
    iid: str  # its incident
    claim: str  # the gate claim's run id: the same across takeovers
    lease: RemediationLease
    record: dict[str, Any] = field(default_factory=dict)  # as a takeover found it

    @property
    def takeovers(self) -> int:
        return int(self.record.get("takeovers") or 0)


class Remediator:
    def __init__(self, settings: Settings, store: Store, registry: SessionRegistry, *,
                 run_agent: RunAgent, still_broken: Callable[[str, dict[str, Any], float], bool],
                 metrics: Any = None, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                 owner: str = ""):
        self.settings = settings
        # Who holds the remediations run here (``<node>/<instance>``, as the duties' owner).
        self.owner = owner or f"{settings.node}/{settings.ha.instance or secrets.token_hex(4)}"
        self.ttl_s = settings.ha.lease_ttl_s
        self.store = store
        self.registry = registry
        self.run_agent = run_agent
        self.still_broken = still_broken
        self.metrics = metrics
        self.clock = clock
        self.sleep = sleep
        self.issues = Issues(settings, store)
        self.ledger = inc.Ledger(store, clock=clock, audit=Audit(settings.state_path, clock))
        # Bounded where the runs start (executor.max_concurrent, the agent slots).
        self.policy = gate.Policy(kind="play", cooldown_s=0.0, max_concurrent=1_000_000,
                                  breaker_window=0)

    def key_of(self, play_id: str, issue: dict[str, Any]) -> str:
        """The key of ``issue``'s remediation record (and of its incident)."""
        # A watcher's alert (healer.play.alerts) is its own incident per code: a pod failure
        # and a step timeout of one agent are two things to fix, not one.
        code = [str(issue.get("code", ""))] if issue.get("alert") else []
        return dedup_key(play_id, issue.get("agent") or "play", issue["issue_type"], *code)

    def incident_id(self, play_id: str, issue: dict[str, Any]) -> str:
        """The id of the incident ``issue`` of ``play_id`` is filed under."""
        return inc.incident_id("play", inc.digest(self.key_of(play_id, issue)))

    def handed_back(self, play_id: str, issue: dict[str, Any]) -> bool:
        """Whether a person handed ``issue`` back ("heal again"): its incident is open again
        while its last remediation ended escalated."""
        incident = self.ledger.get(self.incident_id(play_id, issue))
        if incident is None or incident.get("status") != inc.OPEN:
            return False
        last = self.store.get(KIND, self.key_of(play_id, issue))
        return last is not None and last.data.get("status") == "escalated"

    def _session(self, play_id: str, issue: dict[str, Any]) -> dict[str, Any]:
        """The play's session; for an alert on a play with no session (healer.play.alerts),
        a stand-in made of what the alert knows."""
        session = self.registry.get(play_id)
        if session is not None and not issue.get("sessionless"):
            return session
        if not issue.get("sessionless"):
            return self.registry.require(play_id)
        return {"play_id": play_id, "repository": str(issue.get("repository") or "unknown"),
                "namespace": str(issue.get("namespace") or "cto"), "status": "active",
                "agents": {}, "issues": [], "standin": True}

    def _mark(self, play_id: str, issue: dict[str, Any], *, run: Run | None = None,
              **fields: Any) -> None:
        """Set fields of the issue on its session (a sessionless alert's issue has none);
        with ``run``, only while it holds its lease."""
        if not issue.get("sessionless"):
            if run is not None:
                run.lease.check()
            self.registry.set_issue_fields(play_id, issue["id"], **fields)

    def _signal(self, key: str, play_id: str, issue: dict[str, Any]) -> inc.Signal:
        """The play kind's incident: one per (play, agent, issue type), as the claim."""
        severity = _SEVERITY.get(str(issue.get("severity", "")), "medium")
        return inc.Signal(kind="play", key=inc.digest(key), source="play", severity=severity,
                          count=max(1, int(issue.get("count", 1))),
                          summary=f"{play_id}: {issue['description']}"[:300],
                          detail={"play_id": play_id, "agent": issue.get("agent", ""),
                                  "issue_type": issue["issue_type"], "issue_id": issue["id"],
                                  "code": issue.get("code", ""), "remediation": key},
                          about=play_about(str(issue.get("code") or ""), play_id,
                                           str(issue.get("agent") or ""),
                                           str(issue.get("target") or "")))

    def sighted(self, play_id: str, issue: dict[str, Any], occurrences: int = 1) -> None:
        """An issue recorded on a session (new, or seen again): its incident opens, or its
        count and last seen move with it — before any remediation is decided on."""
        signal = self._signal(self.key_of(play_id, issue), play_id, issue)
        self.ledger.receive(dataclasses.replace(signal, count=max(1, occurrences)))

    def claim(self, play_id: str, issue: dict[str, Any],
              lease: RemediationLease | None = None) -> gate.Decision:
        """Ask the one gate for the (issue type, target): accepted starts a remediation (its
        run id in ``attempt_id``, its record naming ``lease`` as its owner);
        ``already_investigating`` when one runs for it already. A claim a crash left behind
        (no remediation running under it) is released first."""
        key = self.key_of(play_id, issue)
        novelty = claim_key(key)
        now = self.clock()

        def record(run_id: str) -> None:
            self.store.add_member(RUNNING, key)  # before the record: recovery sees it
            owned = {"owner": lease.owner_record()} if lease is not None else {}
            self.store.put(KIND, key, {
                "play_id": play_id, "issue_id": issue["id"], "issue_type": issue["issue_type"],
                "agent": issue.get("agent", ""), "status": "running", "attempts": [],
                "started_at": iso(now), "run_id": run_id, "issue": issue, **owned})

        for _ in range(2):
            d = gate.admit(self.store, novelty, new_run_id, now, self.policy, lambda: True,
                           record=record)
            if d.reason != gate.ALREADY_INVESTIGATING:
                return d
            rec = self.store.get(KIND, key)
            running = rec is not None and rec.data.get("status") == "running"
            if running and rec.data.get("run_id", d.attempt_id) == d.attempt_id:
                return d
            gate.release(self.store, novelty, d.attempt_id)  # stale: its run is gone
        return d

    def _claim_leased(self, play_id: str, issue: dict[str, Any],
                      lease: RemediationLease) -> gate.Decision:
        """The lease first, then the gate. A remediation running with an owner is being run
        — by the holder of its lease, or soon by the replica taking it over — and so is one
        whose lease a run holds (on this replica or another): a report joins it."""
        rec = self.store.get(KIND, lease.key)
        data = rec.data if rec is not None else {}
        owned = data.get("status") == "running" and data.get("owner")
        if owned or not lease.take():
            holder = (data.get("owner") or {}).get("holder", "another run")
            return gate.Decision(gate.ALREADY_INVESTIGATING,
                                 f"a remediation of it runs on {holder}",
                                 str(data.get("run_id", "")))
        try:
            return self.claim(play_id, issue, lease)
        except BaseException:
            lease.give_back()
            raise

    def _settle(self, key: str, run_id: str, status: str) -> None:
        """The remediation ended: the gate frees its key (play has no cooldown or breaker:
        every issue that stays broken goes to a person anyway)."""
        gate.settle(self.store, claim_key(key), run_id, now=self.clock(), kind="play",
                    ended=True, outcome=status, cooldown=False)

    async def handle(self, play_id: str, issue: dict[str, Any]) -> dict[str, Any]:
        """Run the whole cycle for one issue; returns the final remediation record."""
        key = self.key_of(play_id, issue)
        signal = self._signal(key, play_id, issue)
        hush = Silences(self.store, clock=self.clock).decision(dataclasses.asdict(signal))
        if hush is not None:  # a person's silence: recorded and counted, no remediation
            silenced, sid = hush
            self.ledger.receive(signal, decision=silenced, fields={"silenced_by": sid},
                                merge=lambda cur: cur.update(silenced_by=sid))
            return {"status": "silenced", "silence": sid}
        lease = RemediationLease(self.store, key, self.owner, self.ttl_s, self.clock)
        decision = self._claim_leased(play_id, issue, lease)
        if self.ledger.decided(signal.id, decision) is None:  # not recorded by the intake
            self.ledger.receive(signal, decision=decision)
        if not decision.accepted:
            lease.give_back()
            log.info("remediation for %s/%s: %s", play_id, issue["issue_type"], decision.reason)
            return {"status": "deduplicated"}
        run = Run(key, play_id, issue, signal.id, decision.attempt_id, lease)
        self._mark(play_id, issue, remediation_spawned=True, remediation=key,
                   incident_id=signal.id)
        return await self._run(run)

    async def resume(self, run: Run) -> dict[str, Any]:
        """Run the cycle of a remediation taken over (``take_over``) on from where its last
        run left it; returns the final remediation record."""
        return await self._run(run)

    async def _run(self, run: Run) -> dict[str, Any]:
        """Run ``run``'s cycle under its lease (renewed meanwhile; its loss cancels the run).
        Ended, the gate frees the claim and the lease goes; lost, nothing more is written;
        stopped (cancelled), the remediation is handed over (``_end``)."""
        task = asyncio.current_task()
        assert task is not None
        run.lease.keep(task.cancel)
        final: dict[str, Any] | None = None
        try:
            final = await self._cycle(run)
            return final
        except asyncio.CancelledError:
            if run.lease.lost and task.uncancel() == 0:
                return {"status": "lost"}
            raise
        except RemediationLostError as exc:
            log.warning("%s; this run stops and writes nothing more", exc)
            return {"status": "lost"}
        except StoreError as exc:
            # The store failed under the run (a NATS server gone: calls in flight time out):
            # like a clean stop, it hands the remediation over (``_end``) rather than end it
            # in an error nobody would go on from.
            log.warning("remediation %s: the store failed (%s)", run.key, exc)
            return {"status": "handed_over"}
        except Exception as exc:
            log.exception("remediation of %s failed unexpectedly", run.key)
            with contextlib.suppress(RemediationLostError):
                final = self._update(run.key, run=run, status="error", error=str(exc)[:2000])
                run.lease.check()
                self.ledger.attempt_ended(run.iid, "", "error", status=inc.OPEN,
                                          reason=str(exc)[:500])
            raise
        finally:
            self._end(run, final)
            await run.lease.halted()

    def _end(self, run: Run, final: dict[str, Any] | None) -> None:
        try:
            if final is not None:  # the record says how it ended: the claim goes
                self._settle(run.key, run.claim, str(final.get("status", "error")))
            elif not run.lease.lost:
                # A clean stop (or a store that failed under the run): the record stays
                # running and the claim held; the lease goes back, so that a replica —
                # another, or this one restarted — resumes it within a third of the lease
                # time (play-takeover).
                log.warning("remediation %s: stopped here; a replica resumes it", run.key)
        finally:
            run.lease.give_back()  # nothing when lost: another run owns it now

    async def _cycle(self, run: Run) -> dict[str, Any]:
        s = self.settings.play
        key, play_id, issue, iid = run.key, run.play_id, run.issue, run.iid
        session = self._session(play_id, issue)
        done = run.record  # what a run before this one did ({} for a new remediation)
        if done.get("escalating"):
            return self._escalated(run, EscalationRecord(None, None), "")
        attempts = [Attempt(**a) for a in done.get("attempts") or []]
        stopping = run.takeovers > MAX_TAKEOVERS  # its runs keep stopping: tell a person
        if done.get("evaluated") or stopping:
            forge_url = str(done.get("forge_url") or "")
        else:
            forge_url = await self._evaluate(run, session)
            self._update(key, run=run, evaluated=True, forge_url=forge_url)
        first = s.max_iterations + 1 if stopping else len(attempts) + 1
        for n in range(first, s.max_iterations + 1):
            plan = evaluate.plan(issue, n, s.max_iterations)
            if plan.to_human:
                break
            if self.ledger.should_stop(iid):
                return self._update(key, run=run, status="resolved", level=plan.level,
                                    resolved_by="resolved at its source")
            started = self.clock()
            # A round run again after a takeover is another attempt on the incident.
            again = f"-t{run.takeovers}" if run.takeovers else ""
            round_id = f"{issue['id']}-r{n}-{int(started)}{again}"
            self._update(key, run=run, round={"n": n, "run_id": round_id})
            run.lease.check()
            self.ledger.started(iid, round_id, f"remediation {n}: {plan.level} {plan.strategy}")
            outcome = await self._remediate(run, session, plan, n)
            result = outcome.result or {}
            detail = result.get("error") or result.get("notes") or outcome.error or ""
            attempts.append(Attempt(n, f"{plan.level} {plan.strategy}: "
                                       f"{', '.join(result.get('actions_taken') or []) or '-'}",
                                    outcome.status, str(detail)[:300], iso(started)))
            self._update(key, run=run, attempts=[a.__dict__ for a in attempts])
            if self.metrics is not None:
                self.metrics.remediations.labels(outcome=outcome.status).inc()
            if s.reevaluate_after_s:
                await asyncio.sleep(s.reevaluate_after_s)
            verdict = self._verdict(play_id, issue, started, outcome, str(detail)[:300])
            step = next_step(verdict, n, s.max_iterations)
            run.lease.check()
            self.ledger.attempt_ended(iid, round_id, outcome.status,
                                      status=inc.RESOLVED if verdict.healed else inc.OPEN,
                                      reason=verdict.reason)
            self._update(key, run=run, round=None)
            if step == "escalate":
                break
            if step == "healed":
                run.lease.check()
                self.ledger.resolve(iid, "remediation verified")
                self._mark(play_id, issue, run=run, resolved=True,
                           resolved_at=iso(self.clock()))
                return self._update(key, run=run, status="resolved", level=plan.level)
        plan = evaluate.plan(issue, s.max_iterations + 1, s.max_iterations)
        if stopping:
            plan = dataclasses.replace(plan, reason=f"its runs stopped {run.takeovers} times "
                                       f"(replicas died or the store failed) after "
                                       f"{len(attempts)} remediation attempt(s)")
        # Marked before a person is told (the seed file is written before the escalation's
        # first wait): a run that takes over from here finishes it without telling again.
        self._update(key, run=run, escalating={"at": iso(self.clock()), "by": self.owner,
                                               "reason": plan.reason})
        record = await self._escalate(play_id, session, issue, attempts, plan, forge_url)
        return self._escalated(run, record, plan.reason)

    def _escalated(self, run: Run, record: EscalationRecord, reason: str) -> dict[str, Any]:
        """A person was told (by this run, or by the one before it: ``record`` is empty then):
        the incident, the session's issue and the record say so."""
        url = record.issue.url if record.issue else ""
        reason = reason or str((run.record.get("escalating") or {}).get("reason") or "")
        run.lease.check()
        self.ledger.escalated(run.iid, seed_file=str(record.seed_file or ""), reason=reason,
                              issue_url=url)
        self._mark(run.play_id, run.issue, run=run, escalated=True,
                   **({"github_issue": url} if record.issue else {}))
        return self._update(run.key, run=run, status="escalated", level="L4",
                            seed_file=str(record.seed_file or ""),
                            notified=list(record.notified))

    # -- takeover ----------------------------------------------------------------------------

    def take_over(self) -> list[Run]:
        """The remediations whose run stopped renewing its lease (its replica died, was cut
        off, or stopped cleanly), taken over by this replica: for each, the lease is seized
        first (compare-and-set: one replica wins), then the record is written only if it
        still names the owner found dead. Returns the runs to ``resume`` here. A record
        without an owner (from before leases) is recovery's (``PlayService.recover``)."""
        out = []
        for key in running_keys(self.store):
            rec = self.store.get(KIND, key)
            data = rec.data if rec is not None else {}
            owner = data.get("owner")
            if data.get("status") != "running" or not isinstance(owner, dict) or \
                    not owner.get("lease") or not isinstance(data.get("issue"), dict):
                continue
            seen = ownership.expired(self.store, owner, self.clock())
            if seen is None:
                continue  # its run renews it: alive
            lease = ownership.seize(self.store, key, self.owner, self.ttl_s, seen, self.clock)
            if lease is None:
                continue  # renewed meanwhile, or another replica is taking it over
            try:
                out.append(self._adopt(key, owner, seen, lease))
            except ConflictError:
                lease.give_back()  # it ended (or moved) meanwhile: that stands
        return out

    def _adopt(self, key: str, owner: dict[str, Any], seen: dict[str, Any],
               lease: RemediationLease) -> Run:
        now = self.clock()
        holder = str(owner.get("holder") or seen.get("owner") or "?")
        until = seen.get("expires_at")
        why = (f"its replica {holder} stopped renewing its lease at "
               f"{iso(float(until) - self.ttl_s)}" if until else
               f"its replica {holder} stopped and handed it over")

        def fn(d: dict[str, Any] | None) -> dict[str, Any]:
            if d is None or d.get("status") != "running" or d.get("owner") != owner:
                raise ConflictError(KIND, key, owner.get("revision"), None)
            return {**d, "owner": lease.owner_record(),
                    "takeovers": int(d.get("takeovers") or 0) + 1,
                    "taken_over": {"from": holder, "by": self.owner, "at": iso(now),
                                   "reason": why}, "updated_at": iso(now)}

        rec = self.store.update(KIND, key, fn)
        assert rec is not None
        data = rec.data
        issue = dict(data["issue"])
        play_id = str(data.get("play_id") or "")
        iid = self.incident_id(play_id, issue)
        log.warning("remediation %s of %s taken over from %s: %s", key, play_id, holder, why)
        flight = data.get("round") or {}
        if flight.get("run_id"):
            self.ledger.attempt_ended(iid, str(flight["run_id"]), "interrupted",
                                      status=inc.OPEN, reason=f"{why}; remediation "
                                      f"{flight.get('n')} runs again on {self.owner}")
        self.ledger.update(iid, "remediation_taken_over", taken_over={
            "from": holder, "by": self.owner, "at": now, "reason": why})
        return Run(key, play_id, issue, iid, str(data.get("run_id") or ""), lease,
                   record=data)

    def _verdict(self, play_id: str, issue: dict[str, Any], started: float,
                 outcome: RunOutcome, detail: str) -> Verdict:
        """The play's verifier: the agent says it is done, and the problem stopped showing
        since the remediation started."""
        if outcome.ok and not self.still_broken(play_id, issue, started):
            return Verdict(HEALED, "remediation verified")
        if outcome.ok:
            return Verdict(RETRY, "the agent reported success but the problem is still seen")
        return Verdict(TIMEOUT if outcome.status == "timeout" else RETRY, detail)

    def _update(self, key: str, *, run: Run | None = None, **fields: Any) -> dict[str, Any]:
        """Set ``fields`` on the remediation record; with ``run``, only while the record
        still names that run's lease as its owner (else ``RemediationLostError``)."""
        def fn(d: dict[str, Any] | None) -> dict[str, Any]:
            if run is not None and not run.lease.owns(d):
                run.lease.lost = True
                raise RemediationLostError(key, run.lease.token,
                                           ((d or {}).get("owner") or {}).get("revision"))
            return {**(d or {}), **fields, "updated_at": iso(self.clock())}

        rec = self.store.update(KIND, key, fn)
        assert rec is not None
        if rec.data.get("status") != "running":
            self.store.remove_member(RUNNING, key)
        return rec.data

    def _vars(self, play_id: str, session: dict[str, Any], issue: dict[str, Any],
              plan: evaluate.Plan, attempt: int) -> dict[str, str]:
        alerts = [{"code": evaluate.alert_code(issue), "severity": issue.get("severity", ""),
                   "title": issue["description"], "target": issue.get("agent", play_id),
                   "lines": issue.get("evidence", [])[:5]}]
        target = str(issue.get("target", ""))
        return {
            "repository": session["repository"],
            "namespace": str(issue.get("namespace") or session.get("namespace", "cto")),
            "agent": issue.get("agent", ""), "issue_type": issue["issue_type"],
            "strategy": plan.strategy, "level": plan.level, "attempt": str(attempt),
            "max_attempts": str(self.settings.play.max_iterations),
            "missing_tools": ",".join(issue.get("missing_tools", [])),
            "task_id": str(issue.get("task_id", "")), "alerts": json.dumps(alerts),
            "logs": "\n".join(issue.get("evidence", [])[:20]),
            # A watcher's alert names the object behind it (``pod/cto/play-task-4-abc``).
            "code": str(issue.get("code", "")), "target": target,
            "pod": target.rsplit("/", 1)[-1] if target.startswith("pod/") else "",
        }

    async def _evaluate(self, run: Run, session: dict[str, Any]) -> str:
        play_id, issue = run.play_id, run.issue
        plan = evaluate.plan(issue, 1, self.settings.play.max_iterations)
        async with workspace.scratch(self.settings) as ws:  # read-only: nothing to change
            outcome: RunOutcome = await self.run_agent(AgentTask(
                agent="evaluation-agent", target=play_id, kind="evaluation",
                vars=self._vars(play_id, session, issue, plan, 1), incident=issue["id"],
                cwd=str(ws.cwd), read_only=True))
        analysis = (outcome.result or {}).get("notes") or (outcome.result or {}).get(
            "summary") or outcome.error
        code = evaluate.alert_code(issue)
        title = f"[HEAL-{code}] {issue['description'][:120]}: {play_id}"
        body = (f"## Evaluation\n\n{analysis}\n\n**Plan:** {plan.strategy} "
                f"({plan.reason})\n\n**Play:** `{play_id}` · **Repository:** "
                f"`{session['repository']}` · **Agent:** `{issue.get('agent', '-')}`\n")
        try:
            ref = await self.issues.open(
                key=dedup_key("heal", code, evaluate.workflow_family(play_id)), title=title,
                body=body, labels=["heal", code], window_s=self.settings.play.dedup_window_s)
        except HealerError as exc:
            log.warning("evaluation issue for %s not published: %s", play_id, exc)
            return ""
        self._mark(play_id, issue, run=run, github_issue=ref.url,
                   evaluation=str(analysis)[:2000])
        return ref.url

    async def _remediate(self, run: Run, session: dict[str, Any], plan: evaluate.Plan,
                         attempt: int) -> RunOutcome:
        """One remediation run, in its own workspace (``healer.play.workspace``): a checkout
        made for it when it changes code of a repository in ``play.checkouts``, else an empty
        scratch folder — never healer's own checkout."""
        key, play_id, issue = run.key, run.play_id, run.issue
        try:
            async with workspace.for_remediation(self.settings, str(session["repository"]),
                                                 plan.strategy, key) as ws:
                task = AgentTask(agent="remediation-agent", target=play_id, kind="remediation",
                                 vars={**self._vars(play_id, session, issue, plan, attempt),
                                       "branch": ws.branch},
                                 incident=issue["id"], cwd=str(ws.cwd))
                outcome = await self._run_waiting(task)
        except HealerError as exc:  # no checkout could be made: a failed attempt, said why
            log.warning("remediation %s of %s: %s", attempt, play_id, exc)
            return RunOutcome(run_id="", agent="remediation-agent", executor="",
                              status="failed", result_path="", result=None, error=str(exc),
                              duration_s=0.0, kind="remediation", target=play_id)
        if ws.kept:
            self._update(key, run=run, checkouts=[*self._checkouts(key), {
                "attempt": attempt, "path": str(ws.cwd), "branch": ws.branch,
                "repo": ws.repo}])
        log.info("remediation %s of %s/%s (%s %s): %s", attempt, play_id, issue["issue_type"],
                 plan.level, plan.strategy, outcome.status)
        return outcome

    def _checkouts(self, key: str) -> list[dict[str, Any]]:
        rec = self.store.get(KIND, key)
        return list((rec.data if rec else {}).get("checkouts") or [])

    async def _run_waiting(self, task: AgentTask) -> RunOutcome:
        """Run ``task``; a deferred run (the model API kept refusing, or the day's agent
        budget is spent) did not happen, so it is run again once its ``retry_at`` passed
        instead of being counted — at most ``MAX_DEFERRALS`` times."""
        outcome: RunOutcome = await self.run_agent(task)
        for _ in range(MAX_DEFERRALS):
            if outcome.status != DEFERRED:
                break
            result = outcome.result or {}
            retry_at = float(result.get("retry_at") or 0)
            # A model API failure names itself (``failure``): its reset is capped; a spent
            # budget has none, and resets at the next UTC midnight (at most a day away).
            cap = DEFER_CAP_S if result.get("failure") else BUDGET_WAIT_CAP_S
            await self.sleep(min(cap, max(1.0, retry_at - self.clock())))
            outcome = await self.run_agent(task)
        return outcome

    async def _escalate(self, play_id: str, session: dict[str, Any], issue: dict[str, Any],
                        attempts: list[Attempt], plan: evaluate.Plan, forge_url: str) -> Any:
        agent = issue.get("agent") or "the play"
        missing = issue.get("missing_tools") or []
        steps = [f"Look at {agent} in play `{play_id}` ({session['repository']})."]
        if missing:
            steps.append(f"Add the missing tools ({', '.join(missing)}) to {agent}'s tool "
                         "config, or make their MCP server start, then restart the agent.")
        if not self.settings.play.actions.get(plan.strategy):
            steps.append(f"Configure `play.actions.{plan.strategy}` so healer can do this "
                         "itself next time.")
        for c in self._checkouts(self.key_of(play_id, issue)):
            steps.append(f"Remediation {c['attempt']} committed a change on branch "
                         f"`{c['branch']}` in `{c['path']}` (a checkout of {c['repo']}): review "
                         "it, merge what helps, then `git worktree remove` it.")
        if forge_url:
            steps.append(f"The analysis is in {forge_url}.")
        steps.append(f"When done, finish or restart the play: "
                     f"`curl -X POST {healer_url(self.settings)}/api/v1/session/"
                     f"{play_id}/finish`.")
        esc = Escalation(
            title=f"[HEAL-{evaluate.alert_code(issue)}] {issue['description'][:120]}: {play_id}",
            target=play_id, severity="critical" if issue.get("severity") == "critical"
            else "high", incident=issue["id"],
            what_happened=(f"{agent} in play `{play_id}` has a **{issue['issue_type']}** "
                           f"issue: {issue['description']}. {plan.reason}."),
            attempts=attempts, next_steps=steps,
            commands=[f"curl -s {healer_url(self.settings)}/api/v1/session/{play_id}"],
            evidence=list(issue.get("evidence", []))[:10],
            labels=["heal", evaluate.alert_code(issue), "escalation"],
            # The escalation lands on the evaluation's issue (one per code and workflow family).
            dedup_key=dedup_key("heal", evaluate.alert_code(issue),
                                evaluate.workflow_family(play_id)))
        return await escalate(self.settings, self.store, esc, issues=self.issues,
                              metrics=self.metrics)
