"""What every notification target shares: the ``Notice`` it renders, the ``Delivery`` it
answers, and the one-method ``Target`` protocol.

A target renders one notice in its own wire format and sends it once; it never retries, never
sleeps and never raises for a receiver's failure: it answers a ``Delivery`` saying whether
the failure is worth retrying (``retryable``: a network error, 408, 429, 5xx) and, on
success, what it must remember for the next notice of the same incident (``memo``: Slack's
channel and ``ts``, PagerDuty's last action). The outbox (``healer.core.notify.outbox``) owns
retries and back-off. Every text a notice carries was scrubbed before it was built
(``healer.core.notify.notices``); URLs of receivers never reach a log line (``redact_url``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

# The notice states of an incident, in the order an incident usually moves through them.
INVESTIGATING, AWAITING_APPROVAL, PR_OPEN = "investigating", "awaiting_approval", "pr_open"
HEALED, ESCALATED, ACKNOWLEDGED, SILENCED = "healed", "escalated", "acknowledged", "silenced"
STATES = (INVESTIGATING, AWAITING_APPROVAL, PR_OPEN, HEALED, ESCALATED, ACKNOWLEDGED, SILENCED)

HEADLINES = {
    INVESTIGATING: "healer is investigating",
    AWAITING_APPROVAL: "waiting for a person's approval",
    PR_OPEN: "a fix is open for review",
    HEALED: "resolved",
    ESCALATED: "ESCALATED: a person has to act",
    ACKNOWLEDGED: "acknowledged",
}


@dataclass(frozen=True)
class Notice:
    """One incident's state as people are told of it (every text already scrubbed)."""

    incident: str
    kind: str
    state: str
    severity: str
    title: str
    source: str = ""
    summary: str = ""
    what_healer_did: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    acknowledged_by: str = ""
    at: float = 0.0

    @property
    def headline(self) -> str:
        return HEADLINES.get(self.state, self.state)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Notice:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})

    def text(self) -> str:
        """Plain text a person can act on without other context (e-mail, webhooks)."""
        lines = [f"{self.title}", "", f"State: {self.headline}",
                 f"Incident: {self.incident} ({self.kind}, severity {self.severity}"
                 + (f", from {self.source}" if self.source else "") + ")"]
        if self.acknowledged_by:
            lines.append(f"Acknowledged by: {self.acknowledged_by}")
        if self.summary:
            lines += ["", "What happened:", self.summary]
        lines += ["", "What healer did:"]
        lines += [f"  - {d}" for d in self.what_healer_did] or ["  - nothing yet"]
        if self.next_steps:
            lines += ["", "What to do:"] + [f"  - {s}" for s in self.next_steps]
        if self.links:
            lines += ["", "Links:"] + [f"  {k}: {v}" for k, v in self.links.items()]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Delivery:
    """What one send did: ``ok``; if not, whether trying again may help, and why."""

    ok: bool
    retryable: bool = False
    detail: str = ""
    memo: dict[str, Any] = field(default_factory=dict)


class Target(Protocol):
    """A receiver of notices (``name`` is what routes list)."""

    name: str

    def wants(self, state: str) -> bool:
        """Whether a notice in ``state`` concerns this target at all."""
        ...

    async def send(self, notice: Notice, memo: dict[str, Any]) -> Delivery:
        """Send ``notice``; ``memo`` is what the last successful send of this incident
        left. Never raises for the receiver's failure."""
        ...


def by_status(code: int, detail: str = "") -> Delivery:
    """A failed HTTP answer: 408, 425, 429 and 5xx are worth retrying, other 4xx are not."""
    return Delivery(False, retryable=code in (408, 425, 429) or code >= 500,
                    detail=f"HTTP {code}" + (f": {detail[:200]}" if detail else ""))


def redact_url(url: str) -> str:
    """A receiver's URL fit for a log line: its scheme and host only (webhook URLs carry
    their credential in the path)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}/…" if parts.scheme else "<url>"
