"""PagerDuty Events API v2: ``trigger`` on escalation, ``acknowledge`` when a person took it,
``resolve`` when it healed — one alert per incident (``dedup_key`` = the incident id).

=================  ===========  ==================================================
notice state       event        sent when
=================  ===========  ==================================================
escalated          trigger      always (a repeat trigger only updates the alert)
acknowledged       acknowledge  after a trigger
healed             resolve      after a trigger (nothing to resolve otherwise)
=================  ===========  ==================================================

Severity: critical → critical, high → error, medium/low → warning, info → info. PagerDuty
answers ``202 {"status": "success", "dedup_key": …}``; 400 is final, 429 and 5xx are
retried.
"""

from __future__ import annotations

import time
from typing import Any

from healer.core.notify.base import ACKNOWLEDGED, ESCALATED, HEALED, Delivery, Notice, by_status
from healer.core.notify.http import post

SEVERITY = {"critical": "critical", "high": "error", "medium": "warning", "low": "warning",
            "info": "info"}
ACTIONS = {ESCALATED: "trigger", ACKNOWLEDGED: "acknowledge", HEALED: "resolve"}


def event(notice: Notice, routing_key: str) -> dict[str, Any]:
    """The Events API v2 body for ``notice`` (trigger, acknowledge or resolve)."""
    action = ACTIONS[notice.state]
    body: dict[str, Any] = {"routing_key": routing_key, "event_action": action,
                            "dedup_key": notice.incident}
    if action == "trigger":
        body["payload"] = {
            "summary": notice.title[:1024], "source": notice.source or "healer",
            "severity": SEVERITY.get(notice.severity, "warning"),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(notice.at or None)),
            "component": notice.kind, "group": notice.kind, "class": notice.state,
            "custom_details": {"summary": notice.summary, "what_healer_did":
                               notice.what_healer_did, "next_steps": notice.next_steps,
                               **notice.labels}}
        body["client"] = "healer"
        links = [{"href": v, "text": k} for k, v in notice.links.items()
                 if v.startswith(("http://", "https://"))]
        if links:
            body["links"] = links
    return body


class PagerDutyTarget:
    name = "pagerduty"

    def __init__(self, routing_key: str, url: str, *, timeout: float = 10.0):
        self.routing_key, self.url, self.timeout = routing_key, url, timeout

    def wants(self, state: str) -> bool:
        return state in ACTIONS

    async def send(self, notice: Notice, memo: dict[str, Any]) -> Delivery:
        if notice.state != ESCALATED and not memo.get("action"):
            return Delivery(True, detail="never triggered: nothing to "
                            f"{ACTIONS[notice.state]}", memo=memo)
        resp = await post(self.url, json=event(notice, self.routing_key), timeout=self.timeout)
        if isinstance(resp, Delivery):
            return resp
        if resp.status_code != 202:
            return by_status(resp.status_code, _message(resp))
        return Delivery(True, memo={"action": ACTIONS[notice.state],
                                    "dedup_key": _dedup(resp) or notice.incident})


def _message(resp: Any) -> str:
    try:
        data = resp.json()
        return str(data.get("message") or data.get("status") or "")
    except ValueError:
        return ""


def _dedup(resp: Any) -> str:
    try:
        return str(resp.json().get("dedup_key") or "")
    except ValueError:
        return ""
