"""Trust by source: who may open incidents, and how many.

Every signal carries a trust level, set by the intake that authenticated its sender:

=========================================================  ===========  =====================
source                                                     trust        limit bucket (origin)
=========================================================  ===========  =====================
``report_error`` over MCP (stdio: the local session)       trusted      —
``healer report`` (the CLI, run by the local operator)     trusted      —
``POST /api/v1/errors`` with the configured bearer token   trusted      —
``POST /api/v1/errors`` with no token configured / sent    anonymous    ``api``
Sentry integration webhook (``Sentry-Hook-Signature``)     trusted      —
Alertmanager webhook (bearer), Slack (signature)           trusted      —
LogQL rules healer evaluates itself (Loki)                 trusted      —
the Kubernetes and GitHub watchers, fleet probes, logs     trusted      —
the Sentry DSN ingest (``/api/<project>/envelope/``)       anonymous    ``dsn-<project>-<key>``
a webhook accepted without a configured secret             anonymous    (none today: every
                                                                        webhook refuses then)
=========================================================  ===========  =====================

An incident is ``trusted`` once any trusted source reported it; until then it is
``anonymous`` (``healer.core.approval`` decides what that means for starting a code agent).

**Floods.** Anonymous input may open and count incidents, within limits checked before a NEW
incident is opened (repeats of an existing one are always counted):

1. ``max_open_anonymous`` — at most this many anonymous incidents active (open, healing,
   fixed) at once, over every anonymous source (``anonymous_cap``);
2. ``new_per_hour`` — each anonymous origin (a DSN key, the token-less API) opens at most this
   many new incidents an hour: a token bucket of that size refilled over the hour, kept in
   ``intake-limits/<origin>`` so every process shares it (``new_incident_limit``).

What a limit refuses is counted (``Ledger.dropped``: the ledger's counters, ``/metrics``
``healer_incidents_dropped``, ``healer status``), never silently lost. 0 turns a limit off.

Breakers: the gate's circuit breaker has a lane per trust (``lane``), so attempts started for
anonymous incidents that fail never open the breaker trusted reports use.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from healer.core.names import is_safe_name
from healer.core.store import Store

TRUSTED, ANONYMOUS = "trusted", "anonymous"
LEVELS = (TRUSTED, ANONYMOUS)

LIMITS = "intake-limits"
ANONYMOUS_SET = "incidents-anonymous"  # active anonymous incidents (kept by the ledger)
NEW_INCIDENT_LIMIT = "new_incident_limit"
ANONYMOUS_CAP = "anonymous_cap"
DROP_REASONS = (NEW_INCIDENT_LIMIT, ANONYMOUS_CAP)
HOUR_S = 3600.0
ANONYMOUS_LANE = "anonymous"


def check(level: str) -> str:
    if level not in LEVELS:
        raise ValueError(f"trust must be one of {', '.join(LEVELS)}, got {level!r}")
    return level


def combine(*levels: str | None) -> str:
    """Trusted once any of ``levels`` is (a record from before trust levels counts as not)."""
    return TRUSTED if TRUSTED in levels else ANONYMOUS


def lane(level: str) -> str:
    """The gate's breaker lane for an attempt of an incident of this trust ("" = trusted)."""
    return "" if level == TRUSTED else ANONYMOUS_LANE


def origin_name(*parts: object) -> str:
    """A limit bucket's record key from its parts (a DSN key is hashed, never stored)."""
    text = "-".join(str(p) for p in parts if str(p))
    if is_safe_name(text) and len(text) <= 64:
        return text
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:24]


def dsn_origin(project: str, key: str) -> str:
    """The bucket of one DSN key of one project: ``dsn-<project>-<12 hex of the key's hash>``."""
    digest = hashlib.sha256(f"healer-dsn\x1f{key}".encode("utf-8", "replace")).hexdigest()[:12]
    return origin_name("dsn", project[:20], digest)


@dataclass(frozen=True)
class FloodPolicy:
    """What the flood checks read (``code.new_incidents_per_hour``, ``code.max_open_anonymous``)."""

    new_per_hour: int = 30
    max_open_anonymous: int = 100


def take(cur: dict[str, Any] | None, now: float, per_hour: int) -> tuple[bool, dict[str, Any]]:
    """One token from a bucket of ``per_hour`` refilled over an hour: (allowed, new state).

    Pure, so it runs inside compare-and-set."""
    state = dict(cur or {})
    tokens = float(state.get("tokens", per_hour))
    at = float(state.get("at", now))
    tokens = min(float(per_hour), tokens + max(0.0, now - at) * per_hour / HOUR_S)
    allowed = tokens >= 1.0
    if allowed:
        tokens -= 1.0
    state.update(tokens=round(tokens, 6), at=now)
    if not allowed:
        state["refused"] = int(state.get("refused", 0)) + 1
    return allowed, state


def open_anonymous(store: Store) -> int:
    """Anonymous incidents active now (from the ledger's set, not a scan)."""
    return len(store.members(ANONYMOUS_SET))


def admit_new(store: Store, origin: str, policy: FloodPolicy, now: float) -> str:
    """``""`` when one more anonymous incident may be opened from ``origin``, else the
    reason it may not (``anonymous_cap`` or ``new_incident_limit``). The cap is read first,
    so a capped flood takes no token."""
    if policy.max_open_anonymous and open_anonymous(store) >= policy.max_open_anonymous:
        return ANONYMOUS_CAP
    if policy.new_per_hour <= 0:
        return ""
    out: dict[str, bool] = {}

    def fn(cur: dict[str, Any] | None) -> dict[str, Any]:
        out["ok"], new = take(cur, now, policy.new_per_hour)
        return new

    # A bucket is derived state: losing it in a crash only refills it.
    store.update(LIMITS, origin_name(origin or "anonymous"), fn, durable=False)
    return "" if out["ok"] else NEW_INCIDENT_LIMIT


def drop_message(reason: str, policy: FloodPolicy) -> str:
    if reason == ANONYMOUS_CAP:
        return (f"Not recorded: {policy.max_open_anonymous} incidents from anonymous sources "
                "are open already (code.max_open_anonymous). The report was counted; "
                "authenticate (a token, a signed webhook) to be heard regardless.")
    return (f"Not recorded: this anonymous source opened {policy.new_per_hour} new incidents "
            "in the last hour (code.new_incidents_per_hour). Repeats of known incidents are "
            "still counted.")
