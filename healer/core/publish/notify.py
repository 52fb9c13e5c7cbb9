"""Discord notifications for P0/P1 escalations (webhook; text scrubbed before it leaves)."""

from __future__ import annotations

import logging
from typing import Any

import httpx

log = logging.getLogger(__name__)

_COLOURS = {"critical": 0xE01E5A, "high": 0xF2A900, "warning": 0xF2A900, "info": 0x439FE0}


def discord_payload(title: str, body: str, severity: str, url: str = "") -> dict[str, Any]:
    embed: dict[str, Any] = {"title": title[:256], "description": body[:4000],
                             "color": _COLOURS.get(severity, 0x888888)}
    if url:
        embed["url"] = url
    return {"username": "healer", "content": f"**[{severity.upper()}]** {title}"[:2000],
            "embeds": [embed], "allowed_mentions": {"parse": []}}


async def post_discord(webhook_url: str, title: str, body: str, *, severity: str,
                       url: str = "", timeout: float = 10.0) -> bool:
    """Post to a Discord webhook; False (logged) on failure — a notification never raises."""
    if not webhook_url:
        return False
    from healer.core.publish.sanitizer import scrub

    payload = discord_payload(scrub(title), scrub(body), severity, url)
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            resp = await client.post(webhook_url, json=payload)
        if resp.status_code >= 300:
            log.warning("discord webhook answered %s", resp.status_code)
            return False
        return True
    except httpx.HTTPError as exc:
        log.warning("discord webhook failed: %s", exc)
        return False
