"""Discord: an embed per escalation, posted to a webhook (moved here from
``healer.core.publish.notify``). Also the fleet delivery ladder's last resort
(``post_discord``), which needs its answer at once rather than through the outbox."""

from __future__ import annotations

import logging
from typing import Any

from healer.core.notify.base import ESCALATED, Delivery, Notice, by_status
from healer.core.notify.http import post

log = logging.getLogger(__name__)

_COLOURS = {"critical": 0xE01E5A, "high": 0xF2A900, "warning": 0xF2A900, "info": 0x439FE0}


def discord_payload(title: str, body: str, severity: str, url: str = "") -> dict[str, Any]:
    embed: dict[str, Any] = {"title": title[:256], "description": body[:4000],
                             "color": _COLOURS.get(severity, 0x888888)}
    if url:
        embed["url"] = url
    return {"username": "healer", "content": f"**[{severity.upper()}]** {title}"[:2000],
            "embeds": [embed], "allowed_mentions": {"parse": []}}


class DiscordTarget:
    """Escalations only (today's behaviour): Discord webhooks cannot edit in place."""

    name = "discord"

    def __init__(self, url: str, *, timeout: float = 10.0):
        self.url, self.timeout = url, timeout

    def wants(self, state: str) -> bool:
        return state == ESCALATED

    async def send(self, notice: Notice, memo: dict[str, Any]) -> Delivery:
        payload = discord_payload(notice.title, notice.text(), notice.severity,
                                  notice.links.get("issue", ""))
        resp = await post(self.url, json=payload, timeout=self.timeout)
        if isinstance(resp, Delivery):
            return resp
        return Delivery(True) if resp.status_code < 300 else by_status(resp.status_code)


async def post_discord(webhook_url: str, title: str, body: str, *, severity: str,
                       url: str = "", timeout: float = 10.0) -> bool:
    """Post to a Discord webhook now; False (logged) on failure — it never raises."""
    if not webhook_url:
        return False
    from healer.core.publish.sanitizer import scrub

    payload = discord_payload(scrub(title), scrub(body), severity, url)
    resp = await post(webhook_url, json=payload, timeout=timeout)
    if isinstance(resp, Delivery):
        log.warning("discord webhook failed: %s", resp.detail)
        return False
    if resp.status_code >= 300:
        log.warning("discord webhook answered %s", resp.status_code)
        return False
    return True
