"""The targets the settings configure, by route name (``slack``, ``pagerduty``, ``webhook``,
``email``, ``discord``). A target is configured when its credential or address is set."""

from __future__ import annotations

from typing import Any

from healer.core.notify.base import Target
from healer.core.notify.discord import DiscordTarget
from healer.core.notify.mail import EmailTarget
from healer.core.notify.pagerduty import PagerDutyTarget
from healer.core.notify.slack import SlackTarget
from healer.core.notify.webhook import WebhookTarget


def configured(notify: Any) -> dict[str, Target]:
    """``notify`` is the ``notify`` settings section (typed Any: core reads no config)."""
    t = notify.timeout_s
    out: dict[str, Target] = {}
    slack = notify.slack
    if (slack.bot_token and slack.channel) or slack.webhook_url:
        out["slack"] = SlackTarget(bot_token=slack.bot_token if slack.channel else "",
                                   channel=slack.channel, webhook_url=slack.webhook_url,
                                   api_url=slack.api_url, timeout=t)
    if notify.pagerduty.routing_key:
        out["pagerduty"] = PagerDutyTarget(notify.pagerduty.routing_key, notify.pagerduty.url,
                                           timeout=t)
    if notify.webhook.url:
        out["webhook"] = WebhookTarget(notify.webhook.url, notify.webhook.secret, timeout=t)
    mail = notify.email
    if mail.host and mail.to:
        out["email"] = EmailTarget(host=mail.host, port=mail.port, sender=mail.sender,
                                   to=mail.to, starttls=mail.starttls, username=mail.username,
                                   password=mail.password, ca_file=mail.ca_file, timeout=t)
    if notify.discord_webhook_url:
        out["discord"] = DiscordTarget(notify.discord_webhook_url, timeout=t)
    return out
