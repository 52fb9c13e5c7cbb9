"""Webhook deliveries as the real senders make them: Sentry (signed), Slack (signed).

::

    body = sentry_event_alert(file="app/payment.py", line=12, issue_id="4242")
    raw, headers = sentry_delivery(body, secret="s3cret", resource="event_alert")
    httpx.post(url + "/api/v1/webhooks/sentry", content=raw, headers=headers)

The payload shapes follow Sentry's integration-platform webhooks (``{action, installation,
data, actor}``, stack frames oldest first) and Slack's slash commands and message actions
(``application/x-www-form-urlencoded``, ``v0`` signatures over ``v0:<ts>:<body>``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode


def sentry_signature(secret: str, raw: bytes) -> str:
    return hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def sentry_delivery(body: Mapping[str, Any], *, secret: str, resource: str = "event_alert",
                    timestamp: int | None = None) -> tuple[bytes, dict[str, str]]:
    """The raw body and headers of one Sentry webhook delivery."""
    raw = json.dumps(body).encode()
    return raw, {
        "Content-Type": "application/json", "Request-ID": str(uuid.uuid4()),
        "Sentry-Hook-Resource": resource,
        "Sentry-Hook-Timestamp": str(timestamp if timestamp is not None else int(time.time())),
        "Sentry-Hook-Signature": sentry_signature(secret, raw),
    }


def _frames(file: str, line: int, function: str, platform: str) -> list[dict[str, Any]]:
    lib = ("/usr/lib/python3.11/site-packages/starlette/routing.py" if platform == "python"
           else "node_modules/react-dom/cjs/react-dom.development.js")
    return [
        {"filename": lib.split("site-packages/")[-1], "abs_path": lib, "function": "handle",
         "lineno": 74, "in_app": False, "module": "starlette.routing"},
        {"filename": file, "abs_path": f"/srv/app/{file}", "function": function,
         "lineno": line, "in_app": True, "context_line": "    return total / count"},
    ]


def sentry_event(*, message: str = "division by zero", error_type: str = "ZeroDivisionError",
                 file: str = "app/payment.py", line: int = 12, function: str = "average",
                 issue_id: str = "4242", level: str = "error",
                 environment: str = "production", release: str = "shop@1.4.2",
                 platform: str = "python", breadcrumbs: int = 3) -> dict[str, Any]:
    """A Sentry event as ``data.event`` of ``event_alert`` (and ``data.error`` of ``error``)."""
    return {
        "event_id": uuid.uuid4().hex, "issue_id": issue_id, "level": level,
        "platform": platform, "environment": environment, "release": release,
        "title": f"{error_type}: {message}", "culprit": f"{file} in {function}",
        "url": f"https://sentry.example/api/0/projects/acme/shop/events/{issue_id}/",
        "web_url": f"https://sentry.example/organizations/acme/issues/{issue_id}/",
        "issue_url": f"https://sentry.example/api/0/issues/{issue_id}/",
        "exception": {"values": [{"type": error_type, "value": message, "stacktrace": {
            "frames": _frames(file, line, function, platform)}}]},
        "breadcrumbs": {"values": [
            {"timestamp": 1700000000 + i, "category": "http", "level": "info",
             "message": f"GET /api/orders/{i}"} for i in range(breadcrumbs)]},
        "tags": [["environment", environment], ["release", release]],
    }


def sentry_event_alert(**kw: Any) -> dict[str, Any]:
    """An ``event_alert`` (alert rule triggered) body."""
    rule = kw.pop("rule", "New issue in production")
    return {"action": "triggered", "installation": {"uuid": str(uuid.uuid4())},
            "data": {"event": sentry_event(**kw), "triggered_rule": rule},
            "actor": {"type": "application", "id": "sentry", "name": "Sentry"}}


def sentry_issue(action: str = "created", *, issue_id: str = "4242",
                 error_type: str = "ZeroDivisionError", message: str = "division by zero",
                 file: str = "app/payment.py", function: str = "average",
                 users: int = 7, count: int = 31) -> dict[str, Any]:
    """An ``issue`` resource body (created, resolved, unresolved, assigned, archived)."""
    return {"action": action, "installation": {"uuid": str(uuid.uuid4())},
            "data": {"issue": {
                "id": issue_id, "shortId": "SHOP-1", "title": f"{error_type}: {message}",
                "culprit": f"{file} in {function}", "level": "error", "status": "unresolved",
                "count": str(count), "userCount": users,
                "firstSeen": "2024-05-01T10:00:00Z", "lastSeen": "2024-05-01T10:05:00Z",
                "permalink": f"https://sentry.example/organizations/acme/issues/{issue_id}/",
                "metadata": {"type": error_type, "value": message, "filename": file,
                             "function": function},
                "project": {"slug": "shop"}}},
            "actor": {"type": "user", "id": "1", "name": "Dev"}}


def slack_signature(secret: str, timestamp: str, raw: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + raw
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def slack_delivery(form: Mapping[str, str], *, secret: str, timestamp: int | None = None
                   ) -> tuple[bytes, dict[str, str]]:
    """The raw form body and headers of a Slack request."""
    raw = urlencode(dict(form)).encode()
    ts = str(timestamp if timestamp is not None else int(time.time()))
    return raw, {"Content-Type": "application/x-www-form-urlencoded",
                 "X-Slack-Request-Timestamp": ts,
                 "X-Slack-Signature": slack_signature(secret, ts, raw)}


def slack_command(text: str, *, command: str = "/heal", user: str = "dev") -> dict[str, str]:
    return {"token": "legacy-unused", "team_id": "T0001", "team_domain": "acme",
            "channel_id": "C0001", "channel_name": "incidents", "user_id": "U0001",
            "user_name": user, "command": command, "text": text,
            "response_url": "https://hooks.slack.example/commands/1/2/3",
            "trigger_id": "1.2.3"}


def slack_message_action(text: str, *, user: str = "dev") -> dict[str, str]:
    payload = {"type": "message_action", "callback_id": "heal_this", "team": {"id": "T0001"},
               "channel": {"id": "C0001", "name": "incidents"},
               "user": {"id": "U0001", "name": user},
               "message": {"type": "message", "text": text, "ts": "1700000000.000100"},
               "response_url": "https://hooks.slack.example/actions/1/2/3",
               "trigger_id": "1.2.3"}
    return {"payload": json.dumps(payload)}
