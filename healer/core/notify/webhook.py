"""A generic JSON webhook signed the Standard Webhooks way, so any receiver can verify it.

Headers (https://www.standardwebhooks.com): ``webhook-id`` (unique per message, the same on a
retry, so a receiver can drop duplicates), ``webhook-timestamp`` (integer seconds since the
epoch) and ``webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`` keyed
with the base64-decoded part of the ``whsec_…`` secret. The body is
``{"type": "incident.<state>", "timestamp", "data": <the notice>}``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

from healer.core.notify.base import Delivery, Notice, by_status
from healer.core.notify.http import post
from healer.errors import UsageError

PREFIX = "whsec_"
TOLERANCE_S = 300


def _key(secret: str) -> bytes:
    try:
        return base64.b64decode(secret.removeprefix(PREFIX), validate=True)
    except ValueError as exc:
        raise UsageError("notify.webhook.secret must be `whsec_` followed by base64") from exc


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of one message."""
    mac = hmac.new(_key(secret), f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def verify(secret: str, headers: dict[str, str], body: bytes, *, now: float | None = None,
           tolerance_s: float = TOLERANCE_S) -> bool:
    """A receiver's check: a ``v1`` signature matches and the timestamp is recent."""
    low = {k.lower(): v for k, v in headers.items()}
    try:
        ts = int(low["webhook-timestamp"])
        msg_id = low["webhook-id"]
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - ts) > tolerance_s:
        return False
    want = sign(secret, msg_id, ts, body).split(",", 1)[1]
    return any(hmac.compare_digest(sig.split(",", 1)[1], want)
               for sig in low.get("webhook-signature", "").split() if sig.startswith("v1,"))


def payload(notice: Notice) -> bytes:
    return json.dumps({"type": f"incident.{notice.state}", "timestamp": time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(notice.at or None)), "data": notice.as_dict()},
        separators=(",", ":")).encode()


class WebhookTarget:
    name = "webhook"

    def __init__(self, url: str, secret: str = "", *, timeout: float = 10.0):
        if secret:
            _key(secret)  # a bad secret is a configuration error, said at start
        self.url, self.secret, self.timeout = url, secret, timeout

    def wants(self, state: str) -> bool:
        return True

    async def send(self, notice: Notice, memo: dict[str, Any]) -> Delivery:
        body = payload(notice)
        msg_id = f"msg_{notice.incident}_{notice.state}_{int(notice.at * 1000)}"
        ts = int(time.time())
        headers = {"content-type": "application/json", "webhook-id": msg_id,
                   "webhook-timestamp": str(ts)}
        if self.secret:
            headers["webhook-signature"] = sign(self.secret, msg_id, ts, body)
        resp = await post(self.url, content=body, headers=headers, timeout=self.timeout)
        if isinstance(resp, Delivery):
            return resp
        return Delivery(True) if 200 <= resp.status_code < 300 else by_status(resp.status_code)
