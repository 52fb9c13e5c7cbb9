"""Notifications: one outbound layer that tells people where they already are.

Targets, one module each, behind one small protocol (``base.Target``: ``wants(state)``,
``send(notice, memo) -> Delivery``)::

    slack.py       Web API chat.postMessage/chat.update (Block Kit, buttons) or a webhook
    pagerduty.py   Events API v2: trigger / acknowledge / resolve, dedup_key = incident id
    webhook.py     generic JSON, signed the Standard Webhooks way
    mail.py        SMTP with STARTTLS and AUTH, a plain-text body a person can act on
    discord.py     an embed per escalation (the old ``discord_webhook_url``)

Around them, shared stages::

    incident record ──► notices.state_of / build (scrubbed) ──► routes.select
        ──► outbox (a store record per delivery) ──► target.send ──► memo + counters
                              ▲        retry with back-off, then notify-failed
                              └───────────────────────────────────────────────┘

The reconciler (``reconcile.Notifier``) runs in the loop (``service.NotifyService``); it is
the only caller of a receiver. Everything it keeps (marks, memos, the outbox) is in the
store, so on a shared store the replica that leads the ``notify`` duty next carries on where
another stopped. Other parts change the incident record — the status, an approval,
``acknowledged``, ``silenced_by`` — and its next pass updates the messages.
``healer status`` and ``/metrics`` read ``reconcile.status_view``.
"""

from __future__ import annotations

from healer.core.notify.base import STATES, Delivery, Notice, Target
from healer.core.notify.reconcile import Notifier, status_view

__all__ = ["STATES", "Delivery", "Notice", "Notifier", "Target", "status_view"]
