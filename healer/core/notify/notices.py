"""An incident record → its notice state and the ``Notice`` people are told.

====================  ===========================================================
notice state          when (first match)
====================  ===========================================================
silenced              ``silenced_by`` is set: nothing is sent at all
healed                status ``resolved``
acknowledged          status ``escalated`` and ``acknowledged`` set
escalated             status ``escalated``
awaiting_approval     a stage waits for a person (``healer.core.approval``)
pr_open               a fix's PR is open (``links.pr_url``), status ``fixed``
investigating         anything else (open, healing, fixed without a PR)
====================  ===========================================================

Every text is scrubbed (``healer.core.publish.sanitizer.scrub``) here, before it reaches
the outbox or any receiver.
"""

from __future__ import annotations

from typing import Any

from healer.core import approval
from healer.core.notify.base import (
    ACKNOWLEDGED,
    AWAITING_APPROVAL,
    ESCALATED,
    HEALED,
    INVESTIGATING,
    PR_OPEN,
    SILENCED,
    Notice,
)

_DID = {"attempt_started": "started a healing attempt", "attempt_ended": "a healing attempt "
        "ended", "escalated": "escalated to a person", "resolved": "resolved",
        "publication_held": "held a fix for a person's review", "pr_opened": "opened a PR",
        "approved": "a person approved", "denied": "a person denied"}


def state_of(incident: dict[str, Any]) -> str:
    status = incident.get("status")
    if incident.get("silenced_by"):
        return SILENCED
    if status == "resolved":
        return HEALED
    if status == "escalated":
        return ACKNOWLEDGED if incident.get("acknowledged") else ESCALATED
    if approval.waiting_stage(incident):
        return AWAITING_APPROVAL
    if status == "fixed" and (incident.get("links") or {}).get("pr_url"):
        return PR_OPEN
    return INVESTIGATING


def labels_of(incident: dict[str, Any]) -> dict[str, str]:
    """What routes match ``labels`` against: the incident's ``labels`` and ``about``."""
    out: dict[str, str] = {}
    for block in (incident.get("about"), incident.get("labels")):
        if isinstance(block, dict):
            out.update({str(k): str(v) for k, v in block.items()
                        if isinstance(v, str | int | float | bool)})
    return out


def build(incident: dict[str, Any], *, links_url: str = "") -> Notice:
    """The notice of ``incident`` now, every text scrubbed."""
    from healer.core.publish.sanitizer import scrub

    state = state_of(incident)
    iid = str(incident.get("id", ""))
    summary = str(incident.get("summary") or "")
    did = []
    for h in (incident.get("history") or [])[-12:]:
        what = _DID.get(str(h.get("event")))
        if what:
            extra = h.get("outcome") or h.get("by") or ""
            did.append(f"{what}" + (f" ({extra})" if extra else ""))
    outcome = incident.get("last_outcome") or {}
    if outcome.get("reason"):
        did.append(f"last attempt: {outcome.get('outcome', '?')}: {outcome['reason']}")
    steps = _steps(state, iid, incident)
    links = {}
    pr = (incident.get("links") or {}).get("pr_url")
    if pr:
        links["pull request"] = str(pr)
    issue = (incident.get("escalation") or {}).get("issue_url")
    if issue:
        links["issue"] = str(issue)
    if links_url:
        links["dashboard"] = f"{links_url.rstrip('/')}/#/incidents/{iid}"
    ack = incident.get("acknowledged") or {}
    return Notice(
        incident=iid, kind=str(incident.get("kind", "")), state=state,
        severity=str(incident.get("severity") or "medium"),
        title=scrub(f"[{incident.get('kind', '?')}] {summary or iid}")[:200],
        source=scrub(str(incident.get("source") or "")),
        summary=scrub(summary)[:2000], what_healer_did=[scrub(d)[:300] for d in did],
        next_steps=[scrub(s) for s in steps], links=links,
        labels={k: scrub(v)[:100] for k, v in labels_of(incident).items()},
        acknowledged_by=scrub(str(ack.get("by") or ""))[:100],
        at=float(incident.get("updated_at") or 0.0))


def _steps(state: str, iid: str, incident: dict[str, Any]) -> list[str]:
    if state == AWAITING_APPROVAL:
        return [f"Approve: `healer approve {iid}` (or the button)",
                f"Deny: `healer deny {iid}`"]
    if state in (ESCALATED, ACKNOWLEDGED):
        seed = (incident.get("escalation") or {}).get("seed_file", "")
        out = [f"Read what healer found: `healer status {iid}`"]
        if seed:
            out.append(f"The escalation file says what to do next: {seed}")
        if state == ESCALATED:
            out.append(f"Take it: `healer ack {iid}`")
        return out
    if state == PR_OPEN:
        return ["Review and merge the pull request"]
    if state == HEALED:
        return []
    return [f"Nothing yet; follow it with `healer status {iid}`"]
