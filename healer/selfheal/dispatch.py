"""report_error's intake adapter to the one code attempt flow (``healer.code.attempt``).

``Dispatcher.run(attempt_id)`` reads the accepted report from its attempt, hands it to
``run_attempt`` as a ``CodeSignal`` (source ``report_error``) with the ``healing-agent`` run
through ``healer.selfheal.runner`` (``HEALER_HEALING_RUN=1``, ``selfheal.timeout_s`` per agent
run), and then owes what report_error promises: an attempt that ended anything but
``pr_open``, ``awaiting_approval`` or ``held`` is escalated to a person
(``healer.selfheal.escalate``: a seed file in ``.fleet-messages/human/`` and a forge issue, one
per fingerprint); the attempt records the seed file as ``escalation``. An escalation that fails
is logged and left for ``recover()``; it never fails the run. The outcomes and statuses are
those of ``healer.code.attempt``.

Run it in-process (``await Dispatcher(...).run(id)``) or as a detached worker process:
``python -m healer.code.worker ATTEMPT_ID`` with the settings as JSON on stdin — that is how
``report_error`` starts it, so the run outlives the server that accepted the report.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from healer.code.attempt import AgentRequest, AgentRun, CodeSignal, pr_title, run_attempt
from healer.core.publish.forge import Forge
from healer.core.publish.sanitizer import Sanitizer
from healer.core.store import Store
from healer.selfheal import attempts as st
from healer.selfheal import worktree as wt
from healer.selfheal.attempts import Attempts
from healer.selfheal.runner import AgentRunner, HealingTask, result_path_for, runner_for

log = logging.getLogger(__name__)

__all__ = ["Dispatcher", "pr_title", "reap_worktrees", "signal_of"]

REPORT_FIELDS = ("error_type", "error_message", "traceback", "call_site", "context",
                 "tool_name", "severity")


def signal_of(att: dict[str, Any]) -> CodeSignal:
    """The code signal of an accepted report (already sanitised at intake)."""
    report = {k: str(att.get(k) or "") for k in REPORT_FIELDS}
    site = report["call_site"]
    file = site.split(":", 1)[0] if ":" in site else ""
    return CodeSignal(attempt_id=att["attempt_id"], fingerprint=att["fingerprint"],
                      source="report_error", report=report, file=file)


@dataclass
class Dispatcher:
    """Runs accepted attempts. ``runner``/``forge`` default to what the settings say."""

    settings: Any
    store: Store
    runner: AgentRunner | None = None
    forge: Forge | None = None
    sanitizer: Sanitizer | None = None
    clock: Any = time.time
    attempts: Attempts = field(init=False)

    def __post_init__(self) -> None:
        self.attempts = Attempts(self.store, self.clock)

    async def run(self, attempt_id: str) -> dict[str, Any]:
        """Take the attempt from ``dispatch_pending`` to where it ends; return the record."""
        att = self.attempts.require(attempt_id)
        runner = self.runner or runner_for(self.settings)
        sanitizer = self.sanitizer or Sanitizer(
            allowed_hosts=self.settings.selfheal.allowed_hosts)
        signal = signal_of(att)

        async def run_agent(req: AgentRequest) -> AgentRun:
            task = HealingTask(
                attempt_id=attempt_id, fingerprint=signal.fingerprint, report=signal.report,
                cwd=req.cwd, branch=req.branch, timeout_s=req.timeout_s, env=dict(req.env),
                result_path=result_path_for(self.settings.results_path.resolve(),
                                            signal.fingerprint, self.clock()),
                run_id=req.run_id, extra=dict(req.context))
            out = await runner.run(task)
            return AgentRun(status=str(out.detail.get("status") or ("fixed" if out.ok
                                                                    else "failed")),
                            error=out.error, summary=str(out.detail.get("summary") or ""),
                            timed_out=out.timed_out, hold=out.detail.get("hold"))

        incident = str(att.get("incident_id") or "")

        def audit(event: str, **fields: Any) -> None:
            if incident and event in ("publication_held", "git_dir_tampered"):
                from healer.core.audit import Audit

                Audit(self.settings.state_path, self.clock).write(event, incident, **fields)

        end = await run_attempt(self.settings, self.store, signal, run_agent,
                                agent_timeout_s=self.settings.selfheal.timeout_s,
                                sanitizer=sanitizer, forge=self.forge, audit=audit,
                                clock=self.clock)
        final = end.record
        if end.status == st.AWAITING_APPROVAL:
            audit("publication_held", attempt_id=attempt_id,
                  reasons=(final.get("held") or {}).get("reasons", [])[:20])
        if final.get("escalation_due"):
            from healer.selfheal.escalate import escalate_attempt

            if await escalate_attempt(self.settings, self.store, attempt_id,
                                      clock=self.clock) is not None:
                final = self.attempts.get(attempt_id) or final
        return final


def reap_worktrees(settings: Any, store: Store, *, now: float | None = None) -> list[str]:
    """Remove healing clones ``selfheal.worktree_ttl_s`` after their attempt ended.

    The branch goes too, unless a PR uses it, and so does the worker's log. Returns the attempt
    ids reaped. The loop calls this periodically.
    """
    attempts = Attempts(store)
    now = time.time() if now is None else now
    ttl = settings.selfheal.worktree_ttl_s
    reaped = []
    for att in attempts.with_worktree():
        ended = att.get("ended_at")
        if not att.get("worktree") or att.get("worktree_removed_at") or ended is None:
            continue
        if now - ended < ttl:
            continue
        if att["status"] == st.AWAITING_APPROVAL:
            continue  # its clone holds the fix a person has yet to judge
        node = (att.get("owner") or {}).get("node")
        if node and node != settings.node:
            continue  # its clone is on that replica's disk: that replica reaps it
        keep_branch = att["status"] in (st.PR_OPEN, st.PR_MERGED)
        wt.remove(att.get("repo") or "", att["worktree"],
                  branch=att.get("branch", ""), delete_branch=not keep_branch)
        (settings.state_path / "selfheal" / "logs" / f"{att['attempt_id']}.log").unlink(
            missing_ok=True)
        attempts.update(att["attempt_id"], worktree_removed_at=now)
        reaped.append(att["attempt_id"])
    return reaped

