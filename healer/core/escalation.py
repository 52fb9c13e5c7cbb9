"""Escalation to a human: one readable seed file, a forge issue, and the notify targets.

Used by every capability when it stops trying (play remediation, fleet healing and its
repair ladder, living context, self-healing). The seed file in ``.fleet-messages/human/`` must
let a person act without any other context: what happened, what healer tried and how each try
ended, what to do next (with exact commands), and the evidence. All text is scrubbed and
validated before it is written or sent.

Dedup: the forge issue is shared by escalations with one ``dedup_key`` within a window (later
ones become comments, ``healer.core.publish.forge_issues``). An escalation with ``one_open``
also keeps **one open seed file** per key: while that file is still in ``human/`` (a person has
not moved it to ``archive/``), the next escalation rewrites it in place instead of adding a
file, and its forge issue gets a comment (at most once per ``comment_every_s`` while the title
stays the same). The record of the open escalation is ``escalations/<dedup_key>`` in the store.

The seed folder is opened with ``healer.core.safedirs``: when ``human/`` (or a folder above it
healer owns) is a symlink, another user's or group/other-writable, nothing is written and an
ERROR line names the folder and why; the issue and notification still go out.

Notifications (Slack, PagerDuty, webhook, e-mail, Discord) go through ``healer.core.notify``:
an escalation of a ledger incident (``incident`` set) is told by the notify reconciler when
the caller marks the incident escalated; one without an incident (a budget notice, say) is
put in the notify outbox here, routed like any other. Nothing here waits for a receiver.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer.core import safedirs, seeds
from healer.core.publish.forge_issues import IssueRef, Issues, dedup_key
from healer.core.store import Store
from healer.errors import UnsafeDirError

log = logging.getLogger(__name__)

OPEN = "escalations"  # store kind: the open escalation of each dedup key (``one_open``)


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
    one_open: bool = False
    """One open seed file per ``dedup_key``: while the last one is not archived, rewrite it
    (with an "escalated N times" line) instead of writing a new file; see the module doc."""
    publish: bool = True
    """Also publish beyond this machine: the forge issue and the notify targets. False: the
    seed file only, for an escalation whose subject should not leave this machine even scrubbed."""
    dedup_window_s: float | None = None
    """Forge-issue dedup window; None: ``play.dedup_window_s``."""
    own: tuple[str, ...] = ()
    """Identifiers healer minted that the text names (attempt ids, fingerprints, branches),
    besides ``incident`` and ``target``: random by construction, so the publish check's
    entropy census is told they are not keys."""
    comment_every_s: float = 0.0
    """With ``one_open``: the least time between two comments on the open escalation's issue
    when the title is unchanged (0: every update comments). For escalations that repeat on a
    timer, like the fleet repair ladder."""

    def markdown(self, repeat: str = "") -> str:
        """The seed file body; ``repeat`` is a line about earlier escalations of the key."""
        lines = [f"# {self.title}", "",
                 f"**Severity:** {self.severity} · **Target:** `{self.target}`"
                 + (f" · **Incident:** `{self.incident}`" if self.incident else ""), ""]
        if repeat:
            lines += [f"_{repeat}_", ""]
        lines += ["## What happened", "", self.what_happened.strip(), ""]
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


def redact(text: str, findings: list[Any]) -> str:
    """``text`` with each finding's span replaced by its marker (``[REDACTED-KIND]``)."""
    out, at = [], 0
    for f in sorted(findings, key=lambda f: f.start):
        if f.start < at:
            continue  # overlaps one already blanked
        out += [text[at:f.start], f"[REDACTED-{f.kind}]"]
        at = f.end
    return "".join([*out, text[at:]])


@dataclass
class EscalationRecord:
    seed_file: Path | None
    issue: IssueRef | None
    notified: tuple[str, ...] = ()
    """The notify targets this escalation was queued for here (an incident's escalation is
    queued by the notify reconciler instead: empty)."""
    updated: bool = False  # ``one_open``: an open seed file was rewritten, not a new one
    count: int = 1  # ``one_open``: escalations of this key since its seed file was opened


async def escalate(settings: Any, store: Store, esc: Escalation, *,
                   issues: Issues | None = None, metrics: Any = None) -> EscalationRecord:
    """Write the human seed file, open/comment the forge issue, queue the notifications.

    Each output is independent: one failing (network, validation) does not stop the others,
    and the seed file — the one that always works offline — is written first.

    ``settings`` is healer's Settings (``node``, ``fleet_path``, ``play.dedup_window_s``,
    ``notify``, and what ``Issues`` reads), typed ``Any`` so that core does not import the
    config layer.
    """
    from healer.core.publish.findings import AnonymizationError
    from healer.core.publish.sanitizer import ensure_publishable, scrub

    now = time.time()
    window = settings.play.dedup_window_s if esc.dedup_window_s is None else esc.dedup_window_s
    key = esc.dedup_key or f"esc.{esc.target}"
    prior = _open(store, key) if esc.one_open else None
    count = int(prior.get("count", 1)) + 1 if prior else 1
    repeat = (f"Escalated {count} times since {prior.get('first', '?')}; this file is "
              "rewritten with the latest each time." if prior else "")
    body = scrub(esc.markdown(repeat))
    title = scrub(esc.title)[:200]
    seed_path: Path | None = None
    updated = False
    own = (esc.incident, esc.target, esc.dedup_key, *esc.own)
    try:
        try:
            ensure_publishable(body, "escalation", own=own)
        except AnonymizationError as exc:
            # A person is always told: what still looked secret after scrubbing is blanked
            # out, and the file is written.
            body = redact(body, exc.findings)
            log.warning("escalation %s: %d span(s) that looked secret were blanked out",
                        esc.target, len(exc.findings))
        seed = seeds.Seed(sender=settings.node, to=seeds.HUMAN, subject=title, body=body,
                          type=esc.kind, severity=esc.severity, incident=esc.incident)
        if prior:
            seed_path = Path(prior["seed_file"])
            with safedirs.opened(seed_path.parent, create=False) as fd:
                safedirs.replace_file(fd, seed_path.name, seeds.render(seed).encode())
            updated = True
        else:
            seed_path = seeds.write(settings.fleet_path, seed)
            if esc.one_open:  # found again from any working directory
                seed_path = seed_path.resolve()
        _count(metrics, "seed")
    except UnsafeDirError as exc:
        seed_path = None
        log.error("escalation seed file for %s not written: %s", esc.target, exc)
    except Exception:
        log.exception("escalation seed file for %s could not be written", esc.target)
    ref: IssueRef | None = None
    posted = not prior
    if esc.publish:
        try:
            issues = issues or Issues(settings, store)
            number = int(prior.get("issue_number") or 0) if prior else 0
            if number and prior is not None:
                ref = IssueRef(number, str(prior.get("issue_url", "")), created=False)
                posted = (title != prior.get("title")
                          or now - float(prior.get("posted_at") or 0) >= esc.comment_every_s)
                if posted:
                    await asyncio.to_thread(functools.partial(
                        issues.forge.comment_issue, number, body, own=own))
            else:
                ref = await issues.open(key=key, title=title, body=body, labels=esc.labels,
                                        window_s=window, own=own)
                posted = True
            if posted:
                _count(metrics, "forge")
        except Exception:
            log.exception("escalation issue for %s could not be opened", esc.target)
    sent: tuple[str, ...] = ()
    if esc.publish and posted and not esc.incident:
        sent = _notify(settings, store, esc, key, title, body, ref, now)
        for name in sent:
            _count(metrics, name)
    if esc.one_open:
        _remember(store, key, prior, seed_path, ref, title, now, count, posted)
    log.warning("escalated to a human: %s (seed %s%s, issue %s, notify %s)", title, seed_path,
                " updated" if updated else "", ref.url if ref else None,
                ", ".join(sent) or ("by incident" if esc.incident else "none"))
    return EscalationRecord(seed_path, ref, sent, updated=updated, count=count)


def _notify(settings: Any, store: Store, esc: Escalation, key: str, title: str, body: str,
            ref: IssueRef | None, now: float) -> tuple[str, ...]:
    """Queue an escalation that has no incident record in the notify outbox."""
    from healer.core.notify import Notice, Notifier
    from healer.core.notify.base import ESCALATED

    try:
        notifier = Notifier(settings, store)
        if not notifier.targets:
            return ()
        notice = Notice(incident=dedup_key(key), kind=esc.kind, state=ESCALATED,
                        severity=esc.severity, title=title, source=settings.node,
                        summary=body[:2000], next_steps=[], at=now,
                        links={"issue": ref.url} if ref and ref.url else {})
        return tuple(notifier.enqueue(notice, kind=esc.kind, severity=esc.severity,
                                      source=settings.node))
    except Exception:
        log.exception("escalation %s: notifications not queued", esc.target)
        return ()


def _open(store: Store, key: str) -> dict[str, Any] | None:
    """The open escalation of ``key``: its seed file is still waiting for a person."""
    try:
        rec = store.get(OPEN, dedup_key(key))
    except Exception:
        log.exception("could not read the open escalation of %s", key)
        return None
    seed_file = (rec.data.get("seed_file") or "") if rec else ""
    if not seed_file or not Path(seed_file).is_file():
        return None  # never written, or a person archived it: the next one starts anew
    return dict(rec.data) if rec else None


def _remember(store: Store, key: str, prior: dict[str, Any] | None, seed_path: Path | None,
              ref: IssueRef | None, title: str, now: float, count: int, posted: bool) -> None:
    data: dict[str, Any] = {
        **(prior or {}), "key": key, "last_at": now, "count": count, "title": title,
        "first": (prior or {}).get("first") or seeds.now_iso(),
        "seed_file": str(seed_path) if seed_path else (prior or {}).get("seed_file", ""),
    }
    if not prior:
        data["first_at"] = now
    if ref is not None:
        data.update(issue_number=ref.number, issue_url=ref.url)
    if posted:
        data["posted_at"] = now
    try:
        store.put(OPEN, dedup_key(key), data)
    except Exception:
        log.exception("could not record the open escalation of %s", key)


def _count(metrics: Any, channel: str) -> None:
    if metrics is not None:
        metrics.escalations.labels(channel=channel).inc()
