"""Play agents that fail for reasons outside their code: wait, stop, or start fresh.

A classified runtime failure (``healer.agents.failures``; the catalog entries with a
``class``) found in an agent's logs takes this path instead of the evaluate → remediate cycle:

- **transient** — one incident per provider and account, whatever the number of agents: the
  agents join its waiting list; one waiter (the gate's claim ``play.limit.<provider>.<account>``)
  sleeps until the reset the agent gave, else ``play.limit_first_wait_s`` then
  ``play.limit_wait_s`` per round, and resumes the waiting agents one by one
  (``play.resume_stagger_s`` apart) with ``play.actions.resume`` (else ``restart``). Never a
  failed attempt, never the breaker; a person hears of it only after ``play.limit_max_waits``
  rounds.
- **terminal** — one incident per provider, account and code, escalated once; its agents are
  paused (nothing restarts them) until their logs show them working again.
- **capacity / session** — ``play.actions.fresh_session`` (with ``{session_id}``: the session
  not to resume), one at a time per agent; not configured: a person is told.
- **crash loop** — a launch healer made that failed (the action failed, or the agent failed
  again within ``play.crash_loop_window_s``) counts; launches back off to
  ``play.crash_backoff_cap_s``; after ``play.crash_loop_launches`` in a row the agent is paused
  and a person told (K1).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from healer.agents import failures
from healer.agents.task import AgentTask, RunOutcome, new_run_id
from healer.config import Settings
from healer.core import gate
from healer.core import incidents as inc
from healer.core.escalation import Escalation, escalate
from healer.core.publish.forge_issues import Issues
from healer.core.store import Store
from healer.play import workspace
from healer.play.about import play_about
from healer.play.sessions import SessionRegistry, healer_url, iso

log = logging.getLogger(__name__)

LIMITS = "runtime-limits"  # one per shared limit (transient) or shared key problem (terminal)
AGENTS = "runtime-agents"  # one per play agent met with a runtime failure
HELD = "runtime-held"  # store set: agents waiting or paused (what status shows)
WAITING, RESUMED, PAUSED, RUNNING = "waiting", "resumed", "paused", "running"
_SESSION_ID = re.compile(r"session ID:? ([0-9A-Za-z][0-9A-Za-z-]{7,63})", re.I)
_PROVIDERS = (("anthropic", re.compile(r"anthropic|claude|API Error:|docs\.claude\.com", re.I)),
              ("openai", re.compile(r"openai|codex|chatgpt", re.I)))
RunAgent = Callable[[AgentTask], Awaitable[RunOutcome]]


def provider_of(evidence: list[str]) -> str:
    text = "\n".join(evidence)
    return next((name for name, rx in _PROVIDERS if rx.search(text)), "model")


def agent_key(play_id: str, agent: str) -> str:
    return f"{play_id}.{agent}"


class AgentRuntime:
    def __init__(self, settings: Settings, store: Store, registry: SessionRegistry, *,
                 run_agent: RunAgent, ledger: inc.Ledger, issues: Issues,
                 track: Callable[[Any], None], clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep, metrics: Any = None):
        self.settings = settings
        self.store = store
        self.registry = registry
        self.run_agent = run_agent
        self.ledger = ledger
        self.issues = issues
        self.track = track
        self.clock = clock
        self.sleep = sleep
        self.metrics = metrics
        # Claims mark "someone has this"; runs take their slots from the dispatcher.
        self.policy = gate.Policy(kind="play", cooldown_s=0.0, max_concurrent=1_000_000,
                                  breaker_window=0, holds_slot=False)
        self._last_resume = 0.0  # when a waiter last resumed an agent (the stagger's anchor)

    # -- intake ----------------------------------------------------------------------------------

    def report(self, play_id: str, agent: str, code: str, evidence: list[str], *,
               context: Sequence[str] = ()) -> dict[str, Any]:
        """An agent's logs showed runtime failure ``code`` (``evidence``: its lines;
        ``context``: the lines around them, where a reset time may be): act by its class."""
        cls = failures.class_of(code)
        now = self.clock()
        provider = provider_of(evidence)
        account = self._account(play_id)
        retry_at = next((t for line in [*evidence, *context]
                         if (t := failures.retry_at_from_text(line, now)) is not None), None)
        state = self._agent(play_id, agent)
        if state.get("status") == PAUSED:
            self._count(state.get("incident", ""), now)
            return {"action": "paused", "code": code, "reason": state.get("reason", "")}
        if cls != failures.TRANSIENT and self._relaunch_failed(state, now):
            state = self._failed_launch(play_id, agent, f"failed again ({code}) after a launch")
            if state.get("status") == PAUSED:
                return {"action": "paused", "code": "K1", "reason": state.get("reason", "")}
        if cls == failures.TRANSIENT:
            return self._limited(play_id, agent, code, provider, account, evidence, retry_at)
        if cls == failures.TERMINAL:
            return self._terminal(play_id, agent, code, provider, account, evidence)
        return self._fresh(play_id, agent, code, evidence)

    def cleared(self, play_id: str, agent: str) -> None:
        """The agent logged again without a runtime failure: it works. A pause for a key
        problem ends (the signal cleared); its limit or key incident resolves when no agent
        is left on it."""
        key = agent_key(play_id, agent)
        rec = self.store.get(AGENTS, key)
        if rec is None or rec.data.get("status") == RUNNING:
            return
        if rec.data.get("code") == "K1":
            return  # a crash loop stays paused until a person looks (see _crash_loop)
        if rec.data.get("launched_at") and self.clock() - rec.data["launched_at"] < \
                self.settings.play.crash_loop_window_s and rec.data.get("status") == WAITING:
            return  # waiting for its resume: a line or two of output is not "working"
        self._set_agent(play_id, agent, status=RUNNING, resume_at=None, failed_launches=0,
                        reason="")
        limit = rec.data.get("limit", "")
        if limit:
            self._leave(limit, key, resolved_by=f"{agent} in {play_id} works again")

    # -- transient: one wait per shared limit --------------------------------------------------

    def _limited(self, play_id: str, agent: str, code: str, provider: str, account: str,
                 evidence: list[str], retry_at: float | None) -> dict[str, Any]:
        limit = f"limit.{provider}.{account}"
        now = self.clock()
        key = agent_key(play_id, agent)

        def fn(d: dict[str, Any] | None) -> dict[str, Any]:
            d = d or {"class": failures.TRANSIENT, "provider": provider, "account": account,
                      "since": now, "round_at": now, "waits": 0, "agents": {}}
            d["code"] = code
            d["agents"][key] = {"play_id": play_id, "agent": agent, "status": WAITING,
                                "since": now}
            if retry_at is not None:
                d["retry_at"] = max(float(d.get("retry_at") or 0), retry_at)
            return d

        data = self._update_limit(limit, fn)
        resume_at = self._resume_at(data)
        self._set_agent(play_id, agent, status=WAITING, code=code, limit=limit,
                        resume_at=resume_at, reason=failures.CODES[code].title)
        signal, decision = self._shared(limit, code, provider, account, "high", now)
        if decision.accepted:
            self.track(self._wait_and_resume(limit, decision.attempt_id, signal.id))
        return {"action": "waiting", "code": code, "incident_id": signal.id,
                "resume_at": iso(resume_at)}

    def _resume_at(self, data: dict[str, Any]) -> float:
        s = self.settings.play
        if data.get("retry_at"):
            return float(data["retry_at"])
        wait = s.limit_first_wait_s if not data.get("waits") else s.limit_wait_s
        return float(data.get("round_at", self.clock())) + wait

    async def _wait_and_resume(self, limit: str, run_id: str, iid: str) -> None:
        outcome = "resolved"
        try:
            while True:
                rec = self.store.get(LIMITS, limit)
                if rec is None:
                    return
                resume_at = self._resume_at(rec.data)
                self._show(iid, limit)
                await self._sleep_until(resume_at, iid)
                if self.ledger.should_stop(iid):
                    return
                data = self._patch(limit, lambda d: {"retry_at": None, "round_at": self.clock(),
                                                     "waits": int(d.get("waits", 0)) + 1})
                if data is None:
                    return  # every agent on it works again: resolved meanwhile
                waiting = [a for a in data["agents"].values() if a["status"] == WAITING
                           and self._agent(a["play_id"], a["agent"]).get("status") == WAITING]
                if not waiting:
                    self._leave(limit, "", resolved_by="no agent waits on the limit any more")
                    return
                if data["waits"] > self.settings.play.limit_max_waits:
                    outcome = "escalated"
                    await self._limit_persists(limit, data, iid)
                    return
                await self._resume_round(limit, data, waiting, iid, run_id)
        except asyncio.CancelledError:
            outcome = "interrupted"
            raise
        finally:
            gate.settle(self.store, f"play.{limit}", run_id, now=self.clock(), kind="play",
                        ended=True, outcome=outcome, cooldown=False)

    async def _resume_round(self, limit: str, data: dict[str, Any],
                            waiting: list[dict[str, Any]], iid: str, run_id: str) -> None:
        n = data["waits"]
        code = str(data.get("code", "T1"))
        attempt = f"{run_id}-w{n}"
        self.ledger.started(iid, attempt, f"resume {len(waiting)} agent(s) after the "
                                          f"{failures.CODES[code].title} (round {n})")
        resumed = 0
        stagger = self.settings.play.resume_stagger_s
        for a in sorted(waiting, key=lambda a: a["since"]):
            # A stagger after the last resume of any round: a round that starts right after a
            # long one must not resume its first agent on the heels of the previous one.
            if stagger and (gap := self._last_resume + stagger - self.clock()) > 0:
                await self.sleep(gap)
            play_id, agent = a["play_id"], a["agent"]
            if self._agent(play_id, agent).get("status") != WAITING:
                continue  # it recovered by itself, or a crash loop paused it
            if (self.registry.get(play_id) or {}).get("status") != "active":
                self.forget(play_id)
                continue  # the play ended while it waited
            strategy = "resume" if self.settings.play.actions.get("resume") else "restart"
            ok = await self._launch(play_id, agent, strategy, code)
            self._last_resume = self.clock()  # the next one waits a stagger after this one
            resumed += ok
            if self._agent(play_id, agent).get("status") != PAUSED:  # a crash loop stopped it
                self._set_member(limit, agent_key(play_id, agent), RESUMED if ok else WAITING)
        self.ledger.attempt_ended(iid, attempt, "resumed", status=inc.OPEN,
                                  reason=f"resumed {resumed} of {len(waiting)} agent(s); "
                                         "watching for the limit to come back")

    async def _limit_persists(self, limit: str, data: dict[str, Any], iid: str) -> None:
        code = str(data.get("code", "T1"))
        agents = [f"{a['agent']} ({a['play_id']})" for a in data["agents"].values()]
        await self._tell(iid, code, target=limit, what=(
            f"The {data.get('provider')} {failures.CODES[code].title} on account "
            f"{data.get('account')} lasted {data['waits'] - 1} resume rounds; healer stopped "
            f"resuming {len(agents)} agent(s): {', '.join(agents[:20])}."),
            steps=[failures.CODES[code].remedy,
                   "Resume the agents yourself once the provider answers again."],
            evidence=[], dedup=f"heal-{limit}")
        for a in data["agents"].values():
            self._set_agent(a["play_id"], a["agent"], status=PAUSED,
                            reason=f"{failures.CODES[code].title}: a person was told")

    # -- terminal: escalate once, restart nothing ---------------------------------------------

    def _terminal(self, play_id: str, agent: str, code: str, provider: str, account: str,
                  evidence: list[str]) -> dict[str, Any]:
        limit = f"key.{provider}.{account}.{code}"
        now = self.clock()
        key = agent_key(play_id, agent)
        self._update_limit(limit, lambda d: {
            **(d or {"class": failures.TERMINAL, "provider": provider, "account": account,
                     "since": now, "agents": {}}), "code": code,
            "agents": {**(d or {}).get("agents", {}), key: {
                "play_id": play_id, "agent": agent, "status": PAUSED, "since": now}}})
        reason = f"{failures.CODES[code].title}: waiting for a person"
        self._set_agent(play_id, agent, status=PAUSED, code=code, limit=limit, reason=reason,
                        resume_at=None)
        signal, decision = self._shared(limit, code, provider, account, "critical", now)
        if decision.accepted:
            self.track(self._tell(signal.id, code, target=limit, what=(
                f"The {provider} API refused agent {agent} in play `{play_id}`: "
                f"{failures.CODES[code].title} (account {account}). healer paused every agent "
                "that meets it and restarts none of them until their logs show them working."),
                steps=[failures.CODES[code].remedy,
                       f"Then restart the paused agents; `curl -s "
                       f"{healer_url(self.settings)}/api/v1/incidents/{signal.id}` "
                       "lists them."],
                evidence=evidence[:10], dedup=f"heal-{limit}"))
        return {"action": "paused", "code": code, "incident_id": signal.id}

    # -- capacity and session: a fresh session -------------------------------------------------

    def _fresh(self, play_id: str, agent: str, code: str, evidence: list[str]
               ) -> dict[str, Any]:
        now = self.clock()
        key = agent_key(play_id, agent)
        session_id = next((m.group(1) for line in evidence
                           if (m := _SESSION_ID.search(line))), "")
        fields: dict[str, Any] = {"code": code, "reason": failures.CODES[code].title}
        if session_id:
            stale = list(self._agent(play_id, agent).get("stale_sessions") or [])
            fields["stale_sessions"] = stale if session_id in stale else \
                [*stale, session_id][-10:]
        self._set_agent(play_id, agent, **fields)
        signal = self._signal(f"agent.{key}", code, f"{agent} in {play_id}: "
                              f"{failures.CODES[code].title}", severity="high",
                              detail={"play_id": play_id, "agent": agent})
        decision = gate.admit(self.store, f"play.fresh.{key}", new_run_id, now, self.policy,
                              lambda: True, record=lambda rid: None)
        self._file(signal, decision)
        if decision.accepted:
            self.track(self._fresh_session(play_id, agent, code, session_id, evidence,
                                           decision.attempt_id, signal.id))
        return {"action": "fresh_session", "code": code, "incident_id": signal.id}

    async def _fresh_session(self, play_id: str, agent: str, code: str, session_id: str,
                             evidence: list[str], run_id: str, iid: str) -> None:
        outcome = "error"
        try:
            if not self.settings.play.actions.get("fresh_session"):
                outcome = "escalated"
                await self._tell(iid, code, target=f"{play_id}/{agent}", what=(
                    f"{agent} in play `{play_id}` stopped: {failures.CODES[code].title}. "
                    "Restarting it as it was would fail the same way (the same --resume or "
                    "the same full context), and play.actions.fresh_session is not set."),
                    steps=[failures.CODES[code].remedy,
                           "Configure `play.actions.fresh_session` (an argv; `{session_id}` is "
                           "the session not to resume) so healer can do this itself."],
                    evidence=evidence[:10], dedup=f"heal-{code}-{play_id}-{agent}")
                return
            self.ledger.started(iid, run_id, f"fresh session for {agent} ({code})")
            ok = await self._launch(play_id, agent, "fresh_session", code,
                                    session_id=session_id)
            outcome = "fixed" if ok else "failed"
            self.ledger.attempt_ended(iid, run_id, outcome, status=inc.OPEN,
                                      reason="started in a fresh session; watching" if ok
                                      else "the fresh_session action failed")
        finally:
            gate.settle(self.store, f"play.fresh.{agent_key(play_id, agent)}", run_id,
                        now=self.clock(), kind="play", ended=True, outcome=outcome,
                        cooldown=False)

    # -- launches and crash loops ----------------------------------------------------------------

    async def _launch(self, play_id: str, agent: str, strategy: str, code: str, *,
                      session_id: str = "") -> bool:
        """Run ``play.actions.<strategy>`` for the agent (through the dispatcher and its slots),
        after the crash-loop back-off its failed launches earned. False when it failed."""
        s = self.settings.play
        state = self._agent(play_id, agent)
        if state.get("status") == PAUSED and state.get("code") == "K1":
            return False
        fails = int(state.get("failed_launches", 0))
        if fails:
            await self.sleep(failures.backoff_s(fails, base_s=s.crash_backoff_base_s,
                                                cap_s=s.crash_backoff_cap_s))
        session = self.registry.get(play_id) or {}
        async with workspace.scratch(self.settings) as ws:  # a launch changes no code
            outcome = await self.run_agent(AgentTask(
                agent="remediation-agent", target=play_id, kind="remediation", vars={
                    "repository": str(session.get("repository", "")),
                    "namespace": str(session.get("namespace", "cto")), "agent": agent,
                    "issue_type": "agent_runtime", "strategy": strategy, "level": "L2",
                    "attempt": str(fails + 1), "code": code, "session_id": session_id,
                    "alerts": "[]", "logs": ""}, cwd=str(ws.cwd)))
        launches = int(state.get("launches", 0)) + 1
        self._set_agent(play_id, agent, launched_at=self.clock(), launches=launches,
                        last_launch={"strategy": strategy, "ok": outcome.ok,
                                     "at": iso(self.clock())})
        if self.metrics is not None:
            self.metrics.remediations.labels(outcome=outcome.status).inc()
        if not outcome.ok:
            self._failed_launch(play_id, agent, f"{strategy} failed: "
                                f"{(outcome.result or {}).get('error') or outcome.error}"[:300])
        return outcome.ok

    def _relaunch_failed(self, state: dict[str, Any], now: float) -> bool:
        at = state.get("launched_at")
        return bool(at) and now - float(at) < self.settings.play.crash_loop_window_s

    def _failed_launch(self, play_id: str, agent: str, why: str) -> dict[str, Any]:
        state = self._agent(play_id, agent)
        fails = int(state.get("failed_launches", 0)) + 1
        state = self._set_agent(play_id, agent, failed_launches=fails, launched_at=None,
                                last_failure=why)
        if fails >= self.settings.play.crash_loop_launches:
            state = self._crash_loop(play_id, agent, fails, why)
        return state

    def _crash_loop(self, play_id: str, agent: str, fails: int, why: str) -> dict[str, Any]:
        key = agent_key(play_id, agent)
        reason = f"crash loop: {fails} launches failed in a row; healer stopped restarting it"
        state = self._set_agent(play_id, agent, status=PAUSED, code="K1", reason=reason,
                                resume_at=None)
        if state.get("limit"):
            self._set_member(str(state["limit"]), key, PAUSED)
        signal = self._signal(f"crashloop.{key}", "K1", f"{agent} in {play_id}: crash loop",
                              severity="critical", detail={"play_id": play_id, "agent": agent})
        decision = gate.admit(self.store, f"play.crashloop.{key}", new_run_id, self.clock(),
                              self.policy, lambda: True, record=lambda rid: None)
        self._file(signal, decision)
        if decision.accepted:
            self.track(self._tell(signal.id, "K1", target=f"{play_id}/{agent}", what=(
                f"{agent} in play `{play_id}` failed {fails} launches in a row (last: {why}). "
                "healer paused it and restarts it no more."),
                steps=[failures.CODES["K1"].remedy,
                       "When it is fixed, start the agent yourself (healer will not). Starting "
                       "or finishing the play ends the pause."],
                evidence=[why], dedup=f"heal-K1-{play_id}-{agent}"))
        log.warning("play %s: %s paused (%s)", play_id, agent, reason)
        return state

    # -- people ----------------------------------------------------------------------------------

    async def _tell(self, iid: str, code: str, *, target: str, what: str, steps: list[str],
                    evidence: list[str], dedup: str) -> None:
        esc = Escalation(
            title=f"[HEAL-{code}] {failures.CODES[code].title}: {target}"[:200], target=target,
            severity="critical" if failures.class_of(code) in (
                failures.TERMINAL, failures.CRASH_LOOP) else "high",
            incident=iid, what_happened=what, next_steps=steps,
            commands=[f"curl -s {healer_url(self.settings)}/api/v1/incidents/{iid}"],
            evidence=evidence, labels=["heal", code, "escalation"], dedup_key=dedup,
            one_open=True)
        record = await escalate(self.settings, self.store, esc, issues=self.issues,
                                metrics=self.metrics)
        self.ledger.escalated(iid, seed_file=str(record.seed_file or ""), reason=what[:300],
                              issue_url=record.issue.url if record.issue else "")

    # -- state -----------------------------------------------------------------------------------

    def _account(self, play_id: str) -> str:
        session = self.registry.get(play_id) or {}
        account = str(session.get("account") or "default")
        return account if re.fullmatch(r"[A-Za-z0-9_-]{1,64}", account) else "default"

    def _agent(self, play_id: str, agent: str) -> dict[str, Any]:
        rec = self.store.get(AGENTS, agent_key(play_id, agent))
        return dict(rec.data) if rec else {}

    def _set_agent(self, play_id: str, agent: str, **fields: Any) -> dict[str, Any]:
        key = agent_key(play_id, agent)
        rec = self.store.update(AGENTS, key, lambda d: {
            **(d or {"play_id": play_id, "agent": agent, "status": RUNNING}), **fields,
            "updated_at": self.clock()})
        assert rec is not None
        if rec.data.get("status") in (WAITING, PAUSED):
            self.store.add_member(HELD, key)
        else:
            self.store.remove_member(HELD, key)
        return dict(rec.data)

    def _shared(self, limit: str, code: str, provider: str, account: str, severity: str,
                now: float) -> tuple[inc.Signal, gate.Decision]:
        """The incident of a limit or key problem the agents of an account share, and the
        gate's word on it (accepted: this report starts its waiter or its escalation)."""
        signal = self._signal(limit, code, f"{provider} {failures.CODES[code].title} "
                              f"(account {account})", severity=severity,
                              detail={"provider": provider, "account": account})
        decision = self._claim(limit, now)
        self._file(signal, decision)
        self._show(signal.id, limit)
        return signal, decision

    def _claim(self, limit: str, now: float) -> gate.Decision:
        """The gate's claim on a shared limit (its waiter) or key problem (its escalation);
        the attempt id is kept on the limit's record."""
        def record(run_id: str) -> None:
            self._patch(limit, lambda d: {"run_id": run_id})

        return gate.admit(self.store, f"play.{limit}", new_run_id, now, self.policy,
                          lambda: True, record=record)

    def _patch(self, limit: str, fields: Callable[[dict[str, Any]], dict[str, Any]]
               ) -> dict[str, Any] | None:
        """Change a limit's record if it still exists (it goes once nobody is held on it)."""
        rec = self.store.update(LIMITS, limit, lambda d: None if d is None else {
            **d, **fields(d)})
        return dict(rec.data) if rec else None

    def _update_limit(self, limit: str, fn: Callable[[dict[str, Any] | None], dict[str, Any]]
                      ) -> dict[str, Any]:
        rec = self.store.update(LIMITS, limit, fn)
        assert rec is not None
        return dict(rec.data)

    def _set_member(self, limit: str, key: str, status: str) -> None:
        def fn(d: dict[str, Any] | None) -> dict[str, Any] | None:
            if d is None or key not in d.get("agents", {}):
                return None  # the limit ended (or the agent left it) meanwhile
            return {**d, "agents": {**d["agents"], key: {**d["agents"][key], "status": status}}}

        self.store.update(LIMITS, limit, fn)
        if status != WAITING:
            play_id, agent = key.split(".", 1)
            self._set_agent(play_id, agent, status=status, resume_at=None)

    def _leave(self, limit: str, key: str, *, resolved_by: str) -> None:
        """``key`` (an agent; "" for none) works again: off the limit's list. The limit's
        incident resolves, and its claim goes, when no agent is left waiting or paused."""
        def fn(d: dict[str, Any] | None) -> dict[str, Any] | None:
            if d is None:
                return None  # resolved already
            return {**d, "agents": {k: v for k, v in d.get("agents", {}).items() if k != key}}

        rec = self.store.update(LIMITS, limit, fn)
        if rec is None:
            return
        data = rec.data
        iid = inc.incident_id("play", inc.digest(limit))
        left = [a for a in data["agents"].values() if a["status"] in (WAITING, PAUSED)]
        self._show(iid, limit)
        if left:
            return
        if data.get("run_id") and data.get("class") == failures.TERMINAL:
            gate.settle(self.store, f"play.{limit}", str(data["run_id"]), now=self.clock(),
                        kind="play", ended=True, outcome="resolved", cooldown=False)
        self.ledger.resolve(iid, resolved_by)
        self.store.delete(LIMITS, limit)

    def _signal(self, key: str, code: str, summary: str, *, severity: str,
                detail: dict[str, Any]) -> inc.Signal:
        return inc.Signal(kind="play", key=inc.digest(key), source="play", severity=severity,
                          summary=summary[:300], detail={
                              **detail, "code": code, "class": failures.class_of(code),
                              "action": failures.ACTIONS[failures.class_of(code)]},
                          about=play_about(code, **{k: str(v) for k, v in detail.items()}))

    def _file(self, signal: inc.Signal, decision: gate.Decision) -> None:
        self.ledger.receive(signal, decision=decision)
        code = str(signal.detail.get("code", ""))
        self.ledger.update(signal.id, code=code, failure_class=failures.class_of(code))

    def _show(self, iid: str, limit: str) -> None:
        """The incident carries who waits and until when (GET /api/v1/incidents)."""
        rec = self.store.get(LIMITS, limit)
        if rec is None:
            return
        agents = [{"play_id": a["play_id"], "agent": a["agent"], "status": a["status"],
                   "since": iso(a["since"])} for a in rec.data.get("agents", {}).values()]
        code = str(rec.data.get("code", ""))
        fields: dict[str, Any] = {"held": agents[:200], "held_total": len(agents), "code": code,
                                  "failure_class": failures.class_of(code)}
        if rec.data.get("class") == failures.TRANSIENT:
            resume_at = self._resume_at(rec.data)
            if rec.data.get("resume_at") != resume_at:
                self._patch(limit, lambda d: {"resume_at": resume_at})
            fields["resume_at"] = iso(resume_at)
            fields["waits"] = int(rec.data.get("waits", 0))
            waiting = sum(1 for a in agents if a["status"] == WAITING)
            if waiting:
                fields["doing"] = (f"waiting for the reset: {waiting} agent(s) resume from "
                                   f"{iso(resume_at)}")
        self.ledger.update(iid, **fields)

    def _count(self, iid: str, now: float) -> None:
        if iid:
            self.ledger.update(iid, last_seen_paused=iso(now))

    async def _sleep_until(self, when: float, iid: str) -> None:
        while (left := when - self.clock()) > 0:
            if self.ledger.should_stop(iid):
                return
            await self.sleep(min(left, 5.0))

    # -- status and recovery ---------------------------------------------------------------------

    def forget(self, play_id: str) -> None:
        """The play started again or finished: its agents are held no more (a crash loop's
        pause included — a person restarted it), and leave the limits they waited on."""
        prefix = f"{play_id}."
        for key in [k for k in self.store.members(HELD) if k.startswith(prefix)]:
            self.store.remove_member(HELD, key)
        for key in [k for k in self.store.keys(AGENTS) if k.startswith(prefix)]:
            rec = self.store.get(AGENTS, key)  # only this play's: a start reads no other
            if rec is not None and rec.data.get("play_id") == play_id:
                self.store.delete(AGENTS, rec.key)
                if rec.data.get("limit"):
                    self._leave(str(rec.data["limit"]), rec.key,
                                resolved_by=f"play {play_id} started again or finished")

    def recover(self) -> int:
        """Waits a stopped healer left: their claims are released and their waiters start
        again (the limit's record holds what they need)."""
        n = 0
        for rec in list(self.store.list(LIMITS)):
            if rec.data.get("class") != failures.TRANSIENT:
                continue
            limit = rec.key
            gate.release(self.store, f"play.{limit}", str(rec.data.get("run_id", "")))
            iid = inc.incident_id("play", inc.digest(limit))
            decision = self._claim(limit, self.clock())
            if decision.accepted:
                self.track(self._wait_and_resume(limit, decision.attempt_id, iid))
                n += 1
        return n


def held(store: Store) -> list[dict[str, Any]]:
    """Agents waiting (with when they resume) or paused (with why): ``healer status``."""
    out = []
    for key in store.members(HELD):
        rec = store.get(AGENTS, key)
        if rec is None or rec.data.get("status") not in (WAITING, PAUSED):
            store.remove_member(HELD, key)
            continue
        d = rec.data
        entry = {"play_id": d["play_id"], "agent": d["agent"], "status": d["status"],
                 "code": d.get("code", ""), "reason": d.get("reason", "")}
        lim = store.get(LIMITS, d["limit"]) if d["status"] == WAITING and d.get("limit") \
            else None
        if lim is not None and lim.data.get("resume_at"):
            entry["resume_at"] = iso(float(lim.data["resume_at"]))
        out.append(entry)
    return sorted(out, key=lambda e: (e["status"], e["play_id"], e["agent"]))
