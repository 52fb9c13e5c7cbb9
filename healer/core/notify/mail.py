"""E-mail over SMTP: a plain-text message a person can act on (what, where, what healer did,
what to do, links) for escalations and approvals that wait.

STARTTLS is required unless ``notify.email.starttls`` is off (then only a relay on loopback is
reasonable); AUTH follows it when a user is configured, so the password never crosses the
wire in clear. ``smtplib`` blocks: each send runs in a worker thread with the timeout.
Refusals the server marks permanent (5xx) are final, the rest (4xx, network) are retried.
"""

from __future__ import annotations

import asyncio
import smtplib
import ssl
from email import policy
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from healer.core.notify.base import AWAITING_APPROVAL, ESCALATED, HEALED, Delivery, Notice


def message(notice: Notice, sender: str, to: list[str]) -> EmailMessage:
    # Long header values (an incident id) stay on one line rather than being encoded.
    msg = EmailMessage(policy=policy.SMTP.clone(max_line_length=998))
    msg["From"], msg["To"] = sender, ", ".join(to)
    msg["Subject"] = f"[healer {notice.severity.upper()}] {notice.title} — {notice.headline}"[
        :250].replace("\n", " ")
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = make_msgid(domain="healer.local")
    msg["X-Healer-Incident"] = notice.incident
    msg.set_content(notice.text())
    return msg


class EmailTarget:
    name = "email"

    def __init__(self, *, host: str, port: int, sender: str, to: list[str],
                 starttls: bool = True, username: str = "", password: str = "",
                 ca_file: str = "", timeout: float = 10.0):
        self.host, self.port, self.sender, self.to = host, port, sender, list(to)
        self.starttls, self.username, self.password = starttls, username, password
        self.ca_file, self.timeout = ca_file, timeout

    def wants(self, state: str) -> bool:
        return state in (ESCALATED, AWAITING_APPROVAL, HEALED)

    async def send(self, notice: Notice, memo: dict[str, Any]) -> Delivery:
        if notice.state == HEALED and not memo.get("sent"):
            return Delivery(True, detail="nobody was mailed about it", memo=memo)
        try:
            await asyncio.to_thread(self._send, message(notice, self.sender, self.to))
        except smtplib.SMTPResponseException as exc:
            return Delivery(False, retryable=exc.smtp_code < 500,
                            detail=f"SMTP {exc.smtp_code} from {self.host}")
        except smtplib.SMTPRecipientsRefused:
            return Delivery(False, detail=f"{self.host} refused every recipient")
        except (smtplib.SMTPException, OSError) as exc:
            return Delivery(False, retryable=True,
                            detail=f"{type(exc).__name__} talking to {self.host}")
        return Delivery(True, memo={"sent": True})

    def _send(self, msg: EmailMessage) -> None:
        with smtplib.SMTP(self.host, self.port, timeout=self.timeout) as smtp:
            smtp.ehlo()
            if self.starttls:
                ctx = ssl.create_default_context(cafile=self.ca_file or None)
                smtp.starttls(context=ctx)
                smtp.ehlo()
            if self.username:
                smtp.login(self.username, self.password)
            smtp.send_message(msg)
