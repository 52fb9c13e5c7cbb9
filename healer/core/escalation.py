"""Escalation to a human: one readable seed file, a Discord post for P0/P1, a forge issue.

Used by every capability when it stops trying (play remediation, fleet healing, living
context). The seed file in ``.fleet-messages/human/`` must let a person act without any other
context: what happened, what healer tried and how each try ended, what to do next (with exact
commands), and the evidence. All text is scrubbed and validated before it is written or sent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer.config import Settings
from healer.core import seeds
from healer.core.forge_issues import IssueRef, Issues
from healer.core.notify import post_discord
from healer.core.store import Store

log = logging.getLogger(__name__)

NOTIFY_SEVERITIES = ("critical", "high")  # P0/P1


@dataclass
class Attempt:
    number: int
    action: str
    outcome: str
    detail: str = ""
    at: str = ""


@dataclass
class Escalation:
    title: str
    target: str
    severity: str  # info | warning | high | critical
    what_happened: str
    attempts: list[Attempt] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    incident: str = ""
    kind: str = "escalation"
    labels: list[str] = field(default_factory=lambda: ["heal", "escalation"])
    dedup_key: str = ""

    def markdown(self) -> str:
        lines = [f"# {self.title}", "",
                 f"**Severity:** {self.severity} · **Target:** `{self.target}`"
                 + (f" · **Incident:** `{self.incident}`" if self.incident else ""), "",
                 "## What happened", "", self.what_happened.strip(), ""]
        lines += ["## What healer tried", ""]
        if self.attempts:
            for a in self.attempts:
                when = f" ({a.at})" if a.at else ""
                lines.append(f"{a.number}. {a.action}{when} → **{a.outcome}**"
                             + (f": {a.detail}" if a.detail else ""))
        else:
            lines.append("Nothing: this needs a person from the start.")
        lines += ["", "## What you should do next", ""]
        lines += [f"- {step}" for step in self.next_steps] or ["- Investigate the evidence below."]
        if self.commands:
            lines += ["", "```sh", *self.commands, "```"]
        if self.evidence:
            fence = "```"
            while any(fence in e for e in self.evidence):
                fence += "`"
            lines += ["", "## Evidence", "", fence + "text", *self.evidence[:20], fence]
        lines += ["", "When it is fixed, move this file to `archive/` beside it.", ""]
        return "\n".join(lines)


@dataclass
class EscalationRecord:
    seed_file: Path | None
    issue: IssueRef | None
    discord: bool


async def escalate(settings: Settings, store: Store, esc: Escalation, *,
                   issues: Issues | None = None, metrics: Any = None) -> EscalationRecord:
    """Write the human seed file, open/comment the forge issue, post to Discord for P0/P1.

    Each output is independent: one failing (network, validation) does not stop the others,
    and the seed file — the one that always works offline — is written first.
    """
    from healer.selfheal.sanitize import ensure_publishable, scrub

    body = scrub(esc.markdown())
    title = scrub(esc.title)[:200]
    seed_path: Path | None = None
    try:
        ensure_publishable(body, "escalation")
        seed_path = seeds.write(settings.fleet_path, seeds.Seed(
            sender=settings.node, to=seeds.HUMAN, subject=title, body=body, type=esc.kind,
            severity=esc.severity, incident=esc.incident))
        _count(metrics, "seed")
    except Exception:
        log.exception("escalation seed file for %s could not be written", esc.target)
    ref: IssueRef | None = None
    try:
        issues = issues or Issues(settings, store)
        ref = await issues.open(key=esc.dedup_key or f"esc.{esc.target}", title=title,
                                body=body, labels=esc.labels,
                                window_s=settings.play.dedup_window_s)
        _count(metrics, "forge")
    except Exception:
        log.exception("escalation issue for %s could not be opened", esc.target)
    sent = False
    if esc.severity in NOTIFY_SEVERITIES and settings.notify.discord_webhook_url:
        sent = await post_discord(settings.notify.discord_webhook_url, title, body,
                                  severity=esc.severity, url=ref.url if ref else "",
                                  timeout=settings.notify.timeout_s)
        if sent:
            _count(metrics, "discord")
    log.warning("escalated to a human: %s (seed %s, issue %s, discord %s)", title, seed_path,
                ref.url if ref else None, sent)
    return EscalationRecord(seed_path, ref, sent)


def _count(metrics: Any, channel: str) -> None:
    if metrics is not None:
        metrics.escalations.labels(channel=channel).inc()
