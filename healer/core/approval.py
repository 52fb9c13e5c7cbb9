"""A person's approval: before a code agent runs for an incident, and before a fix is published.

Two stages, one record per stage on the incident (``incident["approvals"][stage]``):

=======  ==============================  ============================  ========================
stage    asked when                      waits as                      approve → / deny →
=======  ==============================  ============================  ========================
run      ``code.approval`` says the      incident ``open``, gate       the one gate admits the
         incident's trust needs one      reason ``awaiting_approval``  attempt (the other gates
         (``needed``)                    (retryable)                   still apply) and it
                                                                       starts / the incident is
                                                                       resolved
publish  the fix's diff is sensitive     attempt                       the PR is opened, saying
         (``healer.core.publish.         ``awaiting_approval``,        why it was held and who
         policy``)                       incident ``fixed``, the       approved / the attempt
                                         branch kept                   fails, the incident is
                                                                       resolved
=======  ==============================  ============================  ========================

``code.approval``: ``anonymous`` (default) asks for incidents no trusted source reported
(``healer.core.trust``); ``always`` for every incident; ``never`` for none (anonymous input
starts agents by itself). A publication hold does not depend on it.

A record: ``{"verdict": "waiting" | "approved" | "denied", "by", "via" (cli, api,
dashboard, slack), "comment", "at"}``, with ``attempt_id`` (the attempt a run approval admitted, or
the one whose fix waits) and ``reasons`` (why a fix was held). **A run approval admits one
attempt**: once an attempt starts under it (``use``), a later attempt asks again. Every
verdict is in the audit trail (``approved``/``denied`` with stage, by, via, comment).

**Eligibility.** An incident waiting for a run approval is put before a person — listed as
waiting, approvable — once it was seen ``min_events`` times from ``min_distinct`` distinct
users or releases (a source that names neither counts as one reporter). Meeting it never runs
anything by itself; below it the incident waits unlisted (``eligible`` is false).

Everything here is pure (dicts in, dicts out); ``Ledger.judge`` applies a verdict in one
compare-and-set of the incident, so two people approving at once start one attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healer.core.gate import AWAITING_APPROVAL, Decision
from healer.core.trust import ANONYMOUS, TRUSTED
from healer.errors import ApprovalError

MODES = ("always", "anonymous", "never")
RUN, PUBLISH = "run", "publish"
STAGES = (RUN, PUBLISH)
WAITING, APPROVED, DENIED = "waiting", "approved", "denied"
VIAS = ("cli", "api", "dashboard", "mcp", "slack")
MAX_REPORTERS = 100  # distinct users/releases kept per incident; eligibility counts to here
MAX_BY = 100
MAX_COMMENT = 1000
OPEN, HEALING, FIXED, RESOLVED = "open", "healing", "fixed", "resolved"


@dataclass(frozen=True)
class Policy:
    """What the approval step reads (``code.approval``, ``code.approval_min_*``)."""

    mode: str = "anonymous"
    min_events: int = 1
    min_distinct: int = 1


@dataclass(frozen=True)
class Verdict:
    """A person's yes or no to one stage of one incident."""

    stage: str
    approved: bool
    by: str
    via: str
    at: float
    comment: str = ""

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verdict": APPROVED if self.approved else DENIED,
                               "by": self.by[:MAX_BY], "via": self.via, "at": self.at}
        if self.comment:
            out["comment"] = self.comment[:MAX_COMMENT]
        return out


def needed(policy: Policy, trust: str) -> bool:
    """Whether an incident of ``trust`` needs a person's approval before a code agent runs."""
    if policy.mode == "always":
        return True
    if policy.mode == "never":
        return False
    return trust != TRUSTED


def records(incident: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    found = (incident or {}).get("approvals")
    return {k: dict(v) for k, v in found.items() if isinstance(v, Mapping)} \
        if isinstance(found, Mapping) else {}


def ready(incident: Mapping[str, Any] | None) -> bool:
    """A run approval was given and no attempt has used it yet."""
    rec = records(incident).get(RUN) or {}
    return rec.get("verdict") == APPROVED and not rec.get("attempt_id")


def run_step(incident: Mapping[str, Any] | None, trust: str, policy: Policy) -> Decision | None:
    """The gate's approval step for one incident (after recursion, enabled and severity,
    before novelty): None lets it through, else the ``awaiting_approval`` decision.

    ``trust``: the incident's trust with the signal at hand folded in. An incident being
    healed or holding a fix is left to the gate's novelty check (nothing new could start)."""
    if not needed(policy, trust):
        return None
    if (incident or {}).get("status") in (HEALING, FIXED) or ready(incident):
        return None
    iid = str((incident or {}).get("id") or "")
    why = ("only anonymous sources reported it" if trust == ANONYMOUS else
           "code.approval is 'always'")
    return Decision(AWAITING_APPROVAL, f"Recorded; a healing agent starts only after a person "
                    f"approves ({why}). Continue normally."
                    + (f" Operators: `healer approve {iid}` or `healer deny {iid}`."
                       if iid else ""))


def distinct(incident: Mapping[str, Any]) -> int:
    """Distinct users or releases that reported it (at least one reporter)."""
    return max(1, len(incident.get("reporters") or ()))


def eligible(incident: Mapping[str, Any], policy: Policy) -> bool:
    """Seen often enough, by enough distinct users or releases, to be put before a person."""
    return int(incident.get("count") or 1) >= policy.min_events and \
        distinct(incident) >= policy.min_distinct


def waiting_stage(incident: Mapping[str, Any]) -> str:
    """The stage waiting for a person (``publish`` before ``run``), or ``""``."""
    if (records(incident).get(PUBLISH) or {}).get("verdict") == WAITING:
        return PUBLISH
    if incident.get("status") == OPEN and \
            (incident.get("gate") or {}).get("reason") == AWAITING_APPROVAL:
        return RUN
    return ""


def waiting(incidents: list[dict[str, Any]], policy: Policy) -> list[dict[str, Any]]:
    """What waits for a person, eligible run approvals and every held publication:
    ``{"id", "stage", "summary", "trust", "count", "distinct", "since", "reasons"?}``."""
    out = []
    for inc in incidents:
        stage = waiting_stage(inc)
        if not stage or (stage == RUN and not eligible(inc, policy)):
            continue
        item = {"id": inc["id"], "stage": stage, "summary": inc.get("summary", ""),
                "trust": inc.get("trust") or ANONYMOUS, "count": int(inc.get("count") or 1),
                "distinct": distinct(inc), "sources": inc.get("sources") or []}
        if stage == PUBLISH:
            rec = records(inc)[PUBLISH]
            item.update(since=rec.get("since"), attempt_id=rec.get("attempt_id", ""),
                        reasons=list(rec.get("reasons") or []))
        else:
            item["since"] = (inc.get("gate") or {}).get("at")
        out.append(item)
    return out


def judge(cur: dict[str, Any], verdict: Verdict, policy: Policy) -> None:
    """Apply ``verdict`` to the incident ``cur`` (in place), or raise ``ApprovalError``
    saying why it cannot be: nothing of that stage waits, or it is not yet eligible."""
    iid = str(cur.get("id", ""))
    stage = verdict.stage
    if stage not in STAGES:
        raise ApprovalError(iid, f"unknown stage {stage!r} (run or publish)")
    now_waiting = waiting_stage(cur)
    if now_waiting != stage:
        rec = records(cur).get(stage) or {}
        if rec.get("verdict") in (APPROVED, DENIED) and not now_waiting:
            raise ApprovalError(iid, f"its {stage} stage was {rec['verdict']} already, by "
                                f"{rec.get('by', '?')} (via {rec.get('via', '?')})")
        what = f"its {now_waiting} stage waits instead" if now_waiting else \
            f"nothing waits for a person's approval (status {cur.get('status', '?')}, gate " \
            f"{(cur.get('gate') or {}).get('reason', '-')})"
        raise ApprovalError(iid, what)
    if stage == RUN and verdict.approved and not eligible(cur, policy):
        raise ApprovalError(iid, f"not eligible yet: seen {int(cur.get('count') or 1)} "
                            f"time(s) from {distinct(cur)} distinct user(s)/release(s); "
                            f"code.approval_min_events is {policy.min_events} and "
                            f"code.approval_min_distinct {policy.min_distinct}")
    approvals = records(cur)
    rec = verdict.record()
    if stage == PUBLISH:
        old = approvals.get(PUBLISH) or {}
        rec.update({k: old[k] for k in ("attempt_id", "reasons", "since") if k in old})
    approvals[stage] = rec
    cur["approvals"] = approvals
    if not verdict.approved:
        cur.update(status=RESOLVED, resolved_at=verdict.at, doing="", stop_requested=False,
                   resolved_by=f"{stage} denied by {verdict.by[:MAX_BY]}")


def use(cur: dict[str, Any], attempt_id: str) -> None:
    """An attempt started under the run approval: a later attempt asks again."""
    approvals = records(cur)
    rec = approvals.get(RUN)
    if rec and rec.get("verdict") == APPROVED and not rec.get("attempt_id"):
        rec["attempt_id"] = attempt_id
        cur["approvals"] = approvals


def hold(cur: dict[str, Any], attempt_id: str, reasons: list[str], now: float) -> None:
    """A fix of ``attempt_id`` waits for a person before it is published."""
    approvals = records(cur)
    approvals[PUBLISH] = {"verdict": WAITING, "attempt_id": attempt_id,
                          "reasons": list(reasons)[:50], "since": now}
    cur["approvals"] = approvals


def reopen_publish(cur: dict[str, Any], error: str) -> None:
    """Publishing an approved fix failed: it waits again (a person may retry)."""
    approvals = records(cur)
    rec = approvals.get(PUBLISH)
    if rec:
        rec.update(verdict=WAITING, error=error[:500])
        for k in ("by", "via", "at", "comment"):
            rec.pop(k, None)
        cur["approvals"] = approvals


def merge_reporters(known: list[str] | None, new: tuple[str, ...] | list[str]) -> list[str]:
    """Distinct reporters (``u:<hash>`` users, ``r:<release>`` releases), at most
    ``MAX_REPORTERS``."""
    out = list(known or [])
    seen = set(out)
    for r in new:
        if len(out) >= MAX_REPORTERS:
            break
        if r and r not in seen:
            seen.add(r)
            out.append(str(r)[:200])
    return out
