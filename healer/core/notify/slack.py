"""Slack: one message per incident, updated in place as it moves, with Block Kit buttons.

With a bot token (Web API) the first notice is ``chat.postMessage`` and every later one
``chat.update`` of the same ``channel``/``ts`` (remembered in the memo). With an incoming
webhook, which cannot edit, each notice is a new message. Buttons (handled by healer's Slack
interactivity route; ``value`` = the incident id):

==================  ==========================================
notice state        buttons (``action_id``)
==================  ==========================================
awaiting_approval   Approve (``healer_approve``), Deny (``healer_deny``)
escalated           Acknowledge (``healer_ack``), Silence 1h (``healer_silence_1h``)
==================  ==========================================

Slack answers HTTP 200 ``{"ok": true, "channel", "ts"}`` or ``{"ok": false, "error"}``;
``ratelimited`` (also HTTP 429) and Slack's own outages are retried, everything else
(``channel_not_found``, ``invalid_auth`` …) is final.
"""

from __future__ import annotations

from typing import Any

from healer.core.notify.base import (
    ACKNOWLEDGED,
    AWAITING_APPROVAL,
    ESCALATED,
    HEALED,
    PR_OPEN,
    Delivery,
    Notice,
    by_status,
)
from healer.core.notify.http import post

_EMOJI = {ESCALATED: ":rotating_light:", AWAITING_APPROVAL: ":raised_hand:",
          PR_OPEN: ":wrench:", HEALED: ":white_check_mark:", ACKNOWLEDGED: ":eyes:"}
_RETRY = {"ratelimited", "internal_error", "fatal_error", "service_unavailable",
          "request_timeout"}
BUTTONS = {
    AWAITING_APPROVAL: (("Approve", "healer_approve", "primary"),
                        ("Deny", "healer_deny", "danger")),
    ESCALATED: (("Acknowledge", "healer_ack", "primary"),
                ("Silence 1h", "healer_silence_1h", "")),
}


def escape(text: str) -> str:
    """Slack's mrkdwn control characters, escaped as its docs ask."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def blocks(notice: Notice) -> list[dict[str, Any]]:
    """The Block Kit layout of ``notice``."""
    out: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": notice.title[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": (
            f"{_EMOJI.get(notice.state, ':mag:')} *{escape(notice.headline)}*"
            + (f" by {escape(notice.acknowledged_by)}" if notice.acknowledged_by else ""))[:3000]},
         "fields": [{"type": "mrkdwn", "text": f"*Severity*\n{escape(notice.severity)}"},
                    {"type": "mrkdwn", "text": f"*Kind*\n{escape(notice.kind)}"},
                    {"type": "mrkdwn", "text": f"*Incident*\n`{escape(notice.incident)}`"},
                    {"type": "mrkdwn", "text": f"*Source*\n{escape(notice.source or '-')}"}]},
    ]
    if notice.summary:
        out.append({"type": "section", "text": {"type": "mrkdwn",
                                                "text": escape(notice.summary)[:3000]}})
    if notice.what_healer_did:
        out.append({"type": "section", "text": {"type": "mrkdwn", "text": (
            "*What healer did*\n" + "\n".join(f"• {escape(d)}" for d in
                                              notice.what_healer_did[-8:]))[:3000]}})
    if notice.next_steps and notice.state != HEALED:
        out.append({"type": "section", "text": {"type": "mrkdwn", "text": (
            "*What to do*\n" + "\n".join(f"• {escape(s)}" for s in notice.next_steps[:8]))
            [:3000]}})
    links = [f"<{v}|{escape(k)}>" for k, v in notice.links.items()
             if v.startswith(("http://", "https://"))]
    if links:
        out.append({"type": "context", "elements": [{"type": "mrkdwn",
                                                     "text": " · ".join(links)[:3000]}]})
    buttons = BUTTONS.get(notice.state, ())
    if buttons:
        elements = []
        for text, action, style in buttons:
            button: dict[str, Any] = {"type": "button", "action_id": action,
                                      "value": notice.incident,
                                      "text": {"type": "plain_text", "text": text}}
            if style:
                button["style"] = style
            elements.append(button)
        out.append({"type": "actions", "block_id": f"healer-{notice.state}",
                    "elements": elements})
    return out


def fallback(notice: Notice) -> str:
    """The notification text (and what screen readers say)."""
    return f"[{notice.severity.upper()}] {notice.title} — {notice.headline}"[:3000]


class SlackTarget:
    name = "slack"

    def __init__(self, *, bot_token: str = "", channel: str = "", webhook_url: str = "",
                 api_url: str = "https://slack.com/api", timeout: float = 10.0):
        self.bot_token, self.channel, self.webhook_url = bot_token, channel, webhook_url
        self.api_url, self.timeout = api_url.rstrip("/"), timeout

    def wants(self, state: str) -> bool:
        return True

    async def send(self, notice: Notice, memo: dict[str, Any]) -> Delivery:
        body = {"text": fallback(notice), "blocks": blocks(notice)}
        if not self.bot_token:
            return await self._webhook(body)
        headers = {"Authorization": f"Bearer {self.bot_token}",
                   "Content-Type": "application/json; charset=utf-8"}
        if memo.get("ts") and memo.get("channel"):
            method, body = "chat.update", {**body, "channel": memo["channel"], "ts": memo["ts"]}
        else:
            method, body = "chat.postMessage", {**body, "channel": self.channel}
        resp = await post(f"{self.api_url}/{method}", json=body, headers=headers,
                          timeout=self.timeout)
        if isinstance(resp, Delivery):
            return resp
        if resp.status_code != 200:
            return by_status(resp.status_code)
        try:
            data = resp.json()
        except ValueError:
            return Delivery(False, retryable=True, detail=f"{method}: not JSON")
        if not data.get("ok"):
            error = str(data.get("error") or "unknown")
            return Delivery(False, retryable=error in _RETRY, detail=f"{method}: {error}")
        return Delivery(True, memo={"channel": str(data.get("channel") or body["channel"]),
                                    "ts": str(data.get("ts") or memo.get("ts", ""))})

    async def _webhook(self, body: dict[str, Any]) -> Delivery:
        resp = await post(self.webhook_url, json=body, timeout=self.timeout)
        if isinstance(resp, Delivery):
            return resp
        if resp.status_code != 200:
            return by_status(resp.status_code, resp.text[:100])
        return Delivery(True)
