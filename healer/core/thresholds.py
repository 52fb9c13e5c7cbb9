"""Thresholds before an incident opens: how often, or by how many people, per source.

``gate.thresholds`` says, per source, when an incident from it becomes eligible for an agent:

- ``{occurrences: N, window_s: W}`` — after N occurrences within W seconds (a sliding window;
  no ``window_s``: N occurrences since the incident opened);
- ``{users: N}`` — after N distinct users reported it (``u:<hash>`` reporters: a Sentry
  event's user, for instance); both keys given: whichever is met first.

No entry (the default) is one occurrence, as always. Below its threshold an incident is
recorded and counted like any other, carries the gate decision ``awaiting_occurrences`` (in
``healer status``, ``GET /api/v1/incidents``, the metrics' decision counts) and starts no
agent and sends nothing. It is never retried on its own: the next occurrence asks again.

1. **Counted where every incident is counted.** ``Ledger.receive`` (``healer.core.incidents``)
   keeps the window in the incident record (``threshold``: the recent occurrences as
   ``[at, count]`` pairs, at most N kept) in the same write that counts the signal, for every
   kind, whenever the ledger was given rules for the signal's source.
2. **Asked before the gate.** An intake asks ``Ledger.below`` right after the severity gate:
   pure, over the record (with the signal it is about to file counted, or already counted).
3. **Met once per opening.** The first time the rule is met, ``met_at`` is written and the
   incident stays eligible while it is active; when it resolves and fires again, it counts
   from zero (an occurrence outside the window never counted at all).

Sources that have rules: the code kind's intakes (``report_error``, ``sentry``,
``alertmanager``, ``loki``, ``slack``). The play and fleet kinds decide with thresholds of
their own (``detect``'s error and warning counts, the fleet watchdog's silence times), so the
settings refuse a rule for them rather than ignore it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healer.core.gate import Decision
from healer.errors import ConfigError

AWAITING_OCCURRENCES = "awaiting_occurrences"
SOURCES = ("report_error", "sentry", "alertmanager", "loki", "slack")
MAX_N = 1000
KEYS = ("occurrences", "window_s", "users")


@dataclass(frozen=True)
class Threshold:
    """One source's rule. ``occurrences`` ≥ 1 (1: none), ``window_s`` 0 = since it opened,
    ``users`` 0 = no user rule."""

    occurrences: int = 1
    window_s: float = 0.0
    users: int = 0

    @property
    def trivial(self) -> bool:
        return self.occurrences <= 1 and self.users <= 1

    def describe(self) -> str:
        parts = []
        if self.occurrences > 1:
            within = f" within {_span(self.window_s)}" if self.window_s else ""
            parts.append(f"{self.occurrences} occurrences{within}")
        if self.users > 1:
            parts.append(f"{self.users} distinct users")
        return " or ".join(parts) or "1 occurrence"


def _span(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def parse(raw: Mapping[str, Any] | None) -> dict[str, Threshold]:
    """The rules of ``gate.thresholds``; ``ConfigError`` naming the bad entry."""
    out: dict[str, Threshold] = {}
    for source, rule in (raw or {}).items():
        key = f"gate.thresholds.{source}"
        if source not in SOURCES:
            raise ConfigError(f"no threshold can apply to source {source!r}", file="settings",
                              key=key, expected="one of " + ", ".join(SOURCES))
        if not isinstance(rule, Mapping) or not rule:
            raise ConfigError("expected a rule", file="settings", key=key,
                              expected="{occurrences: N, window_s: W} or {users: N}")
        unknown = sorted(set(rule) - set(KEYS))
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r}", file="settings", key=key,
                              expected="occurrences, window_s, users")
        occurrences = _whole(rule.get("occurrences", 1), f"{key}.occurrences")
        users = _whole(rule.get("users", 0), f"{key}.users", least=0)
        window = rule.get("window_s", 0)
        if isinstance(window, bool) or not isinstance(window, int | float) or window < 0 \
                or window != window:
            raise ConfigError("must be a number of seconds, 0 or more", file="settings",
                              key=f"{key}.window_s", expected="seconds (e.g. 600)")
        if window and occurrences <= 1:
            raise ConfigError("a window needs occurrences above 1", file="settings",
                              key=f"{key}.window_s", expected="occurrences: 2 or more")
        out[str(source)] = Threshold(occurrences, float(window), users)
    return out


def _whole(value: Any, key: str, *, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) \
            or not least <= value <= MAX_N:
        raise ConfigError(f"must be a whole number from {least} to {MAX_N}", file="settings",
                          key=key, expected="a whole number")
    return int(value)


def users_of(reporters: Any) -> int:
    """Distinct users among an incident's reporters (releases are not people)."""
    return sum(1 for r in reporters or () if str(r).startswith("u:"))


def advance(state: Mapping[str, Any] | None, count: int, users: int, now: float,
            rule: Threshold) -> dict[str, Any]:
    """The window after ``count`` more occurrences at ``now`` with ``users`` distinct users
    in all (pure: the ledger applies it in its write, ``below`` on a copy)."""
    out = dict(state or {})
    if out.get("met_at"):
        return out
    seen = [list(p) for p in out.get("seen") or [] if isinstance(p, list | tuple)
            and len(p) == 2]
    if count > 0:
        seen.append([round(now, 3), int(count)])
    if rule.window_s:
        seen = [p for p in seen if now - float(p[0]) <= rule.window_s]
    seen = seen[-max(1, rule.occurrences):]
    n = sum(int(p[1]) for p in seen)
    out.update(seen=seen, n=n, users=users)
    if (rule.occurrences > 1 and n >= rule.occurrences) or \
            (rule.users > 1 and users >= rule.users) or rule.trivial:
        out = {"met_at": round(now, 3), "n": n, "users": users}
    return out


def below(incident: Mapping[str, Any] | None, rule: Threshold | None, now: float, *,
          source: str, count: int = 0, reporters: tuple[str, ...] = ()) -> Decision | None:
    """The refusal while ``incident`` (with ``count`` more occurrences from ``reporters``
    about to be filed) is under ``rule``; None once it is met."""
    if rule is None or rule.trivial:
        return None
    cur = incident or {}
    state = cur.get("threshold")
    if isinstance(state, Mapping) and state.get("met_at"):
        return None
    known = list(cur.get("reporters") or [])
    users = users_of(dict.fromkeys([*known, *reporters]))
    after = advance(state if isinstance(state, Mapping) else None, count, users, now, rule)
    if after.get("met_at"):
        return None
    have = []
    if rule.occurrences > 1:
        within = f" within {_span(rule.window_s)}" if rule.window_s else ""
        have.append(f"seen {after.get('n', 0)} of {rule.occurrences} times{within}")
    if rule.users > 1:
        have.append(f"reported by {users} of {rule.users} distinct users")
    return Decision(AWAITING_OCCURRENCES, f"Recorded, not yet acted on: {' and '.join(have)} "
                    f"(gate.thresholds.{source}: "
                    f"{rule.describe()}). Continue normally.")
