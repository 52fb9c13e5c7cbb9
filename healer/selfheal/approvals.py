"""A person's verdict on a code incident, whichever surface it came through and whichever road
the incident took: ``healer approve|deny``, ``POST /api/v1/incidents/{id}/approve|deny``, the
dashboard's buttons.

The verdict itself is core's (``Ledger.judge``: one compare-and-set, in the audit trail with
who, how and when); what follows is each road's thin part::

    stage run, approved ─► report_error incident  ─► SelfHealService.start_approved
                      └─► living-context incident ─► IncidentBook.admit, then the heal
                           (the one gate again: cooldown, cap, breaker and model still apply;
                           a refusal is recorded and the retry pass starts it later)
    stage publish, approved ─► healer.selfheal.publication.publish_held: the PR
    denied ─► the incident resolved; a held fix's attempt failed

A surface inside a running server passes its services (the heal runs in its event loop);
without them — the CLI — the run starts as a detached worker process, like ``healer report``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from healer.core import approval, gate
from healer.core.audit import Audit
from healer.core.incidents import Ledger, incident_id
from healer.core.names import is_safe_name
from healer.core.store import Store
from healer.errors import ApprovalError, NotFoundError
from healer.selfheal import attempts as st
from healer.selfheal import gates, publication

log = logging.getLogger(__name__)

CONTEXT_INTAKE = "context"


@dataclass(frozen=True)
class Outcome:
    """What a verdict did: the stage, and what followed it."""

    incident: str
    stage: str
    verdict: str  # approved | denied
    by: str
    via: str
    decision: str = ""  # the gate's answer after a run approval (accepted, concurrency_cap …)
    message: str = ""
    attempt_id: str = ""
    pr_url: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in ("", None)}


def find(store: Store, ref: str) -> dict[str, Any]:
    """The code incident ``ref`` names: its id (``code-…``) or its key."""
    ledger = Ledger(store)
    if not is_safe_name(ref):
        raise NotFoundError("incidents", str(ref)[:100])
    for iid in (ref, incident_id("code", ref)):
        found = ledger.get(iid)
        if found is not None:
            if found.get("kind") != "code":
                raise ApprovalError(iid, "only code incidents wait for a person's approval")
            return found
    raise NotFoundError("incidents", ref)


def waiting(settings: Any, store: Store) -> dict[str, Any]:
    """What waits for a person (eligible run approvals, held publications) and how many
    anonymous incidents wait below the eligibility threshold."""
    policy = gates.approval_policy(settings)
    active = Ledger(store).active("code")
    items = approval.waiting(active, policy)
    below = sum(1 for i in active if approval.waiting_stage(i) == approval.RUN
                and not approval.eligible(i, policy))
    return {"waiting": items, "not_yet_eligible": below}


def approve(settings: Any, store: Store, ref: str, *, by: str, via: str, comment: str = "",
            stage: str = "", selfheal: Any = None, context: Any = None, forge: Any = None,
            clock: Callable[[], float] = time.time) -> Outcome:
    """Approve what waits on incident ``ref`` (``stage``: run or publish; default the one that
    waits) and carry it out. ``ApprovalError`` when nothing of it waits."""
    inc = find(store, ref)
    iid = inc["id"]
    stage = stage or approval.waiting_stage(inc) or approval.RUN
    verdict = approval.Verdict(stage, True, by, via, clock(), comment)
    ledger = Ledger(store, clock=clock, audit=Audit(settings.state_path, clock))
    data = ledger.judge(iid, verdict, gates.approval_policy(settings))
    if stage == approval.PUBLISH:
        aid = str(approval.records(data)[approval.PUBLISH].get("attempt_id") or "")
        try:
            att = publication.publish_held(settings, store, aid, verdict, forge=forge,
                                           clock=clock)
        except Exception as exc:
            ledger.publish_failed(iid, f"{type(exc).__name__}: {exc}")
            raise
        return Outcome(iid, stage, approval.APPROVED, by, via, attempt_id=aid,
                       pr_url=str(att.get("pr_url", "")), message="the PR was opened")
    if data.get("intake") == CONTEXT_INTAKE:
        decision = _start_context(settings, store, str(data["key"]), context)
    else:
        decision = _start_report(settings, store, iid, selfheal)
    return Outcome(iid, stage, approval.APPROVED, by, via, decision=decision.reason,
                   message=decision.message, attempt_id=decision.attempt_id)


def deny(settings: Any, store: Store, ref: str, *, by: str, via: str, comment: str = "",
         stage: str = "", clock: Callable[[], float] = time.time) -> Outcome:
    """Deny what waits on incident ``ref``: it is resolved (``<stage> denied by …``); a held
    fix's attempt fails and nothing is published."""
    inc = find(store, ref)
    iid = inc["id"]
    stage = stage or approval.waiting_stage(inc) or approval.RUN
    verdict = approval.Verdict(stage, False, by, via, clock(), comment)
    ledger = Ledger(store, clock=clock, audit=Audit(settings.state_path, clock))
    data = ledger.judge(iid, verdict, gates.approval_policy(settings))
    aid = ""
    if stage == approval.PUBLISH:
        aid = str(approval.records(data)[approval.PUBLISH].get("attempt_id") or "")
        publication.deny_held(store, aid, verdict)
    return Outcome(iid, stage, approval.DENIED, by, via, attempt_id=aid,
                   message=f"resolved: {stage} denied")


def _start_report(settings: Any, store: Store, iid: str, service: Any) -> gate.Decision:
    from healer.selfheal.service import SelfHealService, spawn_worker

    if service is None:  # the CLI: the run is a detached worker, whatever selfheal.worker says
        service = SelfHealService(settings, store, launcher=lambda aid: spawn_worker(
            settings, "healer.code.worker", aid, log_name=aid))
    decision: gate.Decision = service.start_approved(iid)
    return decision


def _start_context(settings: Any, store: Store, key: str, service: Any) -> gate.Decision:
    from healer.context.service import ContextService
    from healer.selfheal.service import spawn_worker

    detached = service is None
    svc = ContextService(settings, store) if detached else service
    receipt = svc.book.admit(key)
    if receipt.heal:
        if not detached:
            svc.dispatch([receipt])  # the server's event loop runs the heal
        else:
            try:
                spawn_worker(settings, "healer.context.worker", key,
                             log_name=receipt.attempt_id)
            except OSError as exc:
                log.exception("could not start the heal of %s", key)
                st.Attempts(store).transition(receipt.attempt_id, st.FAILED,
                                              expect=st.DISPATCH_PENDING,
                                              reason=f"the healing worker did not start: {exc}")
                raise
    return gate.Decision(receipt.decision or gate.ACCEPTED, receipt.message,
                         receipt.attempt_id)
