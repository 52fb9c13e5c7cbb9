"""The living-context intake's adapter to the one code attempt flow (``healer.code.attempt``).

An admitted incident (Sentry, Alertmanager, Slack, Loki; status ``healing``, its attempt
``dispatch_pending``) becomes a ``CodeSignal`` (``source`` = the intake) and runs through
``run_attempt`` with the ``living-context-healer`` (the code-fix prompt family, run through
the executor runtime: ``context.agent_timeout_s`` per run). What the flow ends with, the
adapter settles in the incident book:

=========================  ==================================================================
attempt                    incident
=========================  ==================================================================
``pr_open``                ``fixed`` (the fix PR recorded), incident memory gains a success
``awaiting_approval``      held for a person (``healer.selfheal.publication``)
``held``                   still ``healing``; no escalation (the runtime told the cause once);
                           ``ContextService.watch`` resumes it when the hold is over
deferred / stopped         ``open`` again (deferred) or left as its source resolved it
anything else              escalated (``healer.code.escalation``: seed file, forge issue,
                           Discord) → ``escalated``; incident memory gains the failure
=========================  ==================================================================

Every step is in the audit trail under the incident's key.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from healer.agents.limits import held_by, holds
from healer.code import escalation as code_escalation
from healer.code.attempt import AgentRequest, AgentRun, AttemptEnd, CodeSignal, run_attempt
from healer.context import outcomes
from healer.context.incidents import ESCALATED, FIXED, IncidentBook
from healer.context.layers import LayerError, append_memory
from healer.core import gate
from healer.core.escalation import escalate
from healer.core.publish.forge import Forge
from healer.core.store import Store
from healer.errors import HealerError
from healer.selfheal import attempts as st

log = logging.getLogger(__name__)

AGENT = "living-context-healer"


@dataclass
class HealOutcome:
    incident: str
    attempt_id: str
    # fixed | escalated | failed | stopped (resolved at its source) | awaiting_approval
    # | deferred | held (healer's model access is held; resumed later)
    status: str
    iterations: list[dict[str, Any]] = field(default_factory=list)
    pr_url: str = ""
    reason: str = ""
    seed_file: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"incident": self.incident, "attempt_id": self.attempt_id, "status": self.status,
                "iterations": list(self.iterations), "pr_url": self.pr_url,
                "reason": self.reason, "seed_file": self.seed_file}


def signal_of(inc: dict[str, Any], attempt_id: str) -> CodeSignal:
    """The code signal of a living-context incident (its error already sanitised)."""
    err = inc["error"]
    file = str(err.get("file") or "")
    line = f":{err['line']}" if err.get("line") else ""
    report = {"error_type": str(inc.get("error_type") or ""),
              "error_message": str(err.get("message") or ""),
              "traceback": str(err.get("stackTrace") or ""),
              "call_site": str(inc.get("call_site") or (file + line)),
              "context": "", "tool_name": "", "severity": str(err.get("severity") or "")}
    return CodeSignal(attempt_id=attempt_id, fingerprint=inc["fingerprint"],
                      source=str(inc.get("source") or "sentry"), report=report, file=file,
                      incident=inc["key"], error=dict(err), sentry=dict(err.get("sentry") or {}))


class ContextHealer:
    """Runs admitted incidents to a verified fix or an escalation."""

    def __init__(self, settings: Any, store: Store, book: IncidentBook, *,
                 executor: Any = None, forge: Forge | None = None, metrics: Any = None,
                 dispatcher: Any = None, clock: Any = time.time):
        self.settings = settings
        self.store = store
        self.book = book
        self.executor = executor  # an Executor (tests) or None: the settings' choice
        self.dispatcher = dispatcher  # the loop's (bus attached); else made on first use
        self.forge = forge
        self.metrics = metrics
        self.clock = clock
        self.sanitizer = book.sanitizer

    # --- which agent runs --------------------------------------------------------------------

    def available(self) -> bool | str:
        """Whether a living-context-healer can run here (the gate's last question): True,
        or the gate's reason why not (``no_model``, ``no_sandbox``)."""
        if self.executor is not None:
            # An executor of its own (a test's, a rotated key's): only a stop marker that
            # holds for its credential says no (``healer.agents.limits``).
            env = getattr(self.executor, "run_environment", None)
            if callable(env) and holds(self.settings, env()) is not None:
                return gate.NO_MODEL
            return True
        from healer.agents.executors import availability

        return availability(self.settings, AGENT) or True

    async def _dispatch(self, task: Any, env: dict[str, str]) -> Any:
        """One agent run through the dispatcher; its outcome is the result on the bus."""
        if self.dispatcher is None:
            from healer.agents import dispatcher

            self.dispatcher = dispatcher(self.settings)
        return await self.dispatcher.run(task, executor=self.executor, env=env)

    # --- the run -------------------------------------------------------------------------------

    async def heal(self, key: str) -> HealOutcome:
        """Heal the incident ``key`` (admitted: status healing, with an attempt)."""
        inc = self.book.get(key)
        if inc is None or not inc.get("attempt_id"):
            raise HealerError(f"incident {key} has no admitted attempt")
        aid = inc["attempt_id"]

        async def run_agent(req: AgentRequest) -> AgentRun:
            from healer.agents.task import AgentTask

            task = AgentTask(agent=AGENT, target=key, kind="context", incident=key,
                             run_id=req.run_id, cwd=str(req.cwd), timeout_s=req.timeout_s,
                             context=dict(req.context))
            out = await self._dispatch(task, dict(req.env))
            return AgentRun(status=out.status, error=self.sanitizer.scrub(out.error or ""),
                            summary=str((out.result or {}).get("summary", "")),
                            timed_out=out.status == "timeout", hold=held_by(out.result))

        def audit(event: str, **fields: Any) -> None:
            self.book.audit.write(event, key, **fields)

        try:
            end = await run_attempt(
                self.settings, self.store, signal_of(inc, aid), run_agent,
                agent_timeout_s=self.settings.context.agent_timeout_s, sanitizer=self.sanitizer,
                forge=self.forge, audit=audit, clock=self.clock,
                should_stop=lambda: self.book.ledger.should_stop(self.book._id(key)))
        except asyncio.CancelledError:
            self.book.update(key, status="open", event="heal_cancelled")
            raise
        out = await self._settle(inc, end)
        if self.metrics is not None:
            self.metrics.remediations.labels(outcome=f"context-{out.status}").inc()
        return out

    async def _settle(self, inc: dict[str, Any], end: AttemptEnd) -> HealOutcome:
        key, att = inc["key"], end.record
        aid = att["attempt_id"]
        n = len(end.iterations)
        if end.status == st.PR_OPEN:
            fix = {"pr_url": att.get("pr_url", ""), "pr_number": att.get("pr_number"),
                   "branch": att.get("branch", ""), "head_sha": att.get("head_sha", ""),
                   "iterations": n, "at": self.clock(), "attempt_id": aid}
            self.book.settle(key, FIXED, "fixed", fix=fix)
            self.book.audit.write("pr_opened", key, attempt_id=aid, pr_url=fix["pr_url"],
                                  iterations=n)
            self._remember(inc, end, success=True)
            return HealOutcome(key, aid, "fixed", end.iterations, pr_url=fix["pr_url"])
        if end.status == st.AWAITING_APPROVAL:
            reasons = list((att.get("held") or {}).get("reasons") or [])
            fix = {"held": True, "branch": att.get("branch", ""),
                   "head_sha": att.get("head_sha", ""), "iterations": n, "at": self.clock(),
                   "attempt_id": aid}
            self.book.ledger.held(self.book._id(key), aid, reasons, fix=fix)
            self._remember(inc, end, success=True)
            return HealOutcome(key, aid, "awaiting_approval", end.iterations,
                               reason="; ".join(reasons)[:2000])
        if end.status == st.HELD:
            hold = att.get("hold") or {}
            self.book.audit.write("heal_held", key, attempt_id=aid,
                                  code=str(hold.get("code", "")), reason=end.reason)
            return HealOutcome(key, aid, "held", end.iterations, reason=end.reason)
        if att.get("deferred"):
            self.book.update(key, status="open", event="heal_deferred")
            return HealOutcome(key, aid, "deferred", end.iterations, reason=end.reason)
        if att.get("stopped"):
            self.book.audit.write("stopped", key, attempt_id=aid, reason="resolved at its source")
            return HealOutcome(key, aid, "stopped", end.iterations,
                               reason="resolved at its source")
        return await self._give_up(inc, end)

    async def _give_up(self, inc: dict[str, Any], end: AttemptEnd) -> HealOutcome:
        """The attempt ended without a fix: one escalation text for every code attempt."""
        key, att = inc["key"], end.record
        aid = att["attempt_id"]
        history = self.book.attempts.for_fingerprint(att["fingerprint"])
        record = await escalate(self.settings, self.store,
                                code_escalation.build(self.settings, att, history),
                                metrics=self.metrics)
        if record.seed_file is None:
            record = await escalate(self.settings, self.store, code_escalation.minimal(att),
                                    metrics=self.metrics)
        seed = str(record.seed_file or "")
        why = self.sanitizer.scrub(end.reason)[:2000]
        self.book.settle(key, ESCALATED, "escalated", escalation={
            "reason": why, "seed_file": seed, "issue_url": record.issue.url if record.issue
            else "", "at": self.clock(), "attempt_id": aid})
        self.book.audit.write("escalated", key, attempt_id=aid, reason=why, seed_file=seed,
                              iterations=len(end.iterations))
        self._remember(inc, end, success=False)
        return HealOutcome(key, aid, "escalated", end.iterations, reason=why, seed_file=seed)

    def _remember(self, inc: dict[str, Any], end: AttemptEnd, *, success: bool) -> None:
        """Incident memory gains the run — only where a living context exists (a memory
        entry would otherwise make one)."""
        if not end.living:
            return
        entry = outcomes.memory_entry(inc, end.record["attempt_id"], end, success=success,
                                      now=self.clock())
        try:
            append_memory(self.settings.context.dir, entry)
            self.book.audit.write("memory", inc["key"], entry=entry["id"])
        except (LayerError, OSError) as exc:
            log.error("incident memory not updated for %s: %s", inc["key"], exc)
            self.book.audit.write("memory_failed", inc["key"], reason=str(exc)[:500])
