"""Silences and maintenance windows: a person says "not this, not now" before it happens.

A silence is Alertmanager's idea applied to incidents of every kind:

=============  ================================================================================
field          meaning
=============  ================================================================================
``id``         ``s-`` and 12 hex digits, made here
``matchers``   all must match: ``{"name", "op", "value"}``; ``op`` is ``=``, ``!=``, ``=~`` or
               ``!~`` (a regex matches the *whole* value, as in Alertmanager: ``=~ .*disk.*``)
``starts_at``  epoch seconds; a silence that starts later is ``pending`` (a maintenance window)
``ends_at``    epoch seconds; after it the silence is ``expired`` by itself
``author``     who made it (``--by``, the API caller, the dashboard session, the Slack user)
``comment``    why
``expired_at`` set when a person ended it early (``expired_by`` says who)
=============  ================================================================================

Matcher names (``NAMES``): ``kind``, ``source``, ``key``, ``summary``, ``severity``, ``node``
(a fleet incident's peer), ``play`` (a play incident's play id) and ``label.<name>`` — the
labels of an Alertmanager alert (``detail.labels``), else the incident's ``about`` field of
that name (``label.environment``, ``label.release``, ``label.code``). A missing value is
the empty string, so ``label.env!=prod`` matches an incident without that label.

What a silence does (the capabilities call ``Silences.decision`` where their gate runs):

1. a matching signal is still recorded and counted, but its gate decision is ``silenced``
   (``healer.core.gate.SILENCED``): no agent starts for it;
2. its incident carries ``silenced_by`` (the silence id) — the notification reconciler sends
   nothing for it, not even a first message;
3. ``reconcile`` (the loop's ``silences`` job, and every add or expire) marks the open and
   escalated incidents a silence covers and clears ``silenced_by`` once no silence covers
   an incident any more (it ended, or was expired).

Everything lives in one store record (``silences/all``): the gate's hot path reads it once per
signal. At most ``MAX_SILENCES``; silences that ended more than ``KEEP_ENDED_S`` ago are
dropped from it (the audit trail keeps ``silence_added`` / ``silence_expired``).
"""

from __future__ import annotations

import math
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from healer.core.audit import Audit
from healer.core.gate import SILENCED, Decision
from healer.core.stamped import StampedRecords
from healer.core.store import Store
from healer.errors import NotFoundError, UsageError

SILENCES, ALL = "silences", "all"
NAMES = ("kind", "source", "key", "summary", "severity", "node", "play")
LABEL = "label."
OPS = ("=", "!=", "=~", "!~")
ACTIVE, PENDING, EXPIRED = "active", "pending", "expired"
MAX_SILENCES = 500
MAX_MATCHERS = 20
MAX_VALUE = 500
MAX_AUTHOR = 100
MAX_COMMENT = 1000
MAX_DURATION_S = 366 * 86400.0
KEEP_ENDED_S = 7 * 86400.0
_ID = re.compile(r"s-[0-9a-f]{12}")
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_MATCHER = re.compile(r"\s*(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)\s*(?P<op>=~|!~|!=|=)(?P<value>.*)",
                      re.S)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

Clock = Callable[[], float]


@dataclass(frozen=True)
class Matcher:
    """One condition of a silence; ``parse`` reads ``name=value``, ``name=~regex`` …"""

    name: str
    op: str
    value: str

    def __post_init__(self) -> None:
        if self.name not in NAMES and not (self.name.startswith(LABEL) and
                                           _LABEL.fullmatch(self.name[len(LABEL):])):
            raise UsageError(f"unknown matcher name {self.name!r}: one of "
                             f"{', '.join(NAMES)} or label.<name>")
        if self.op not in OPS:
            raise UsageError(f"unknown matcher operator {self.op!r}: one of {', '.join(OPS)}")
        if not isinstance(self.value, str) or len(self.value) > MAX_VALUE:
            raise UsageError(f"matcher {self.name}: the value must be text of at most "
                             f"{MAX_VALUE} characters")
        if self.op in ("=~", "!~"):
            try:
                re.compile(self.value)
            except re.error as exc:
                raise UsageError(f"matcher {self.name}{self.op}: not a regular expression "
                                 f"({exc})") from None

    @classmethod
    def parse(cls, text: str) -> Matcher:
        m = _MATCHER.fullmatch(text or "")
        if not m:
            raise UsageError(f"not a matcher: {text!r} (name=value, name!=value, "
                             "name=~regex or name!~regex)")
        value = m.group("value").strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        return cls(m.group("name"), m.group("op"), value)

    @classmethod
    def of(cls, data: object) -> Matcher:
        """From an API body's ``{"name", "op"?, "value"}`` or a ``"name=value"`` string."""
        if isinstance(data, str):
            return cls.parse(data)
        if not isinstance(data, Mapping):
            raise UsageError("a matcher is an object {name, op, value} or a string name=value")
        return cls(str(data.get("name", "")), str(data.get("op") or "="),
                   str(data.get("value", "")))

    def matches(self, value: str) -> bool:
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        hit = re.fullmatch(self.value, value, re.S) is not None
        return hit if self.op == "=~" else not hit

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "op": self.op, "value": self.value}

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value}"


def subject(incident: Mapping[str, Any]) -> dict[str, str]:
    """What matchers read of an incident (or of a signal shaped like one)."""
    about = incident.get("about") or {}
    detail = incident.get("detail") or {}
    out = {"kind": str(incident.get("kind") or ""), "source": str(incident.get("source") or ""),
           "key": str(incident.get("key") or ""), "summary": str(incident.get("summary") or ""),
           "severity": str(incident.get("severity") or ""),
           "node": str(about.get("peer") or detail.get("peer") or detail.get("node") or ""),
           "play": str(about.get("play_id") or detail.get("play_id") or "")}
    for name, value in about.items():
        if isinstance(value, str | int | float | bool):
            out[LABEL + name] = str(value)
    labels = detail.get("labels")
    if isinstance(labels, Mapping):
        out.update({LABEL + str(k): str(v) for k, v in labels.items()})
    return out


def matchers_of(silence: Mapping[str, Any]) -> list[Matcher]:
    return [Matcher.of(m) for m in silence.get("matchers") or ()]


def state(silence: Mapping[str, Any], now: float) -> str:
    if silence.get("expired_at") is not None or now >= float(silence.get("ends_at") or 0):
        return EXPIRED
    return PENDING if now < float(silence.get("starts_at") or 0) else ACTIVE


def covers(silence: Mapping[str, Any], incident: Mapping[str, Any], now: float) -> bool:
    """Whether ``silence`` is active now and every one of its matchers matches."""
    if state(silence, now) != ACTIVE:
        return False
    values = subject(incident)
    return all(m.matches(values.get(m.name, "")) for m in matchers_of(silence))


def parse_duration(text: str) -> float:
    """``90m``, ``2h``, ``1d``, ``1h30m``, ``45s`` or plain seconds → seconds."""
    raw = (text or "").strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        seconds = float(raw)
    else:
        parts = re.findall(r"(\d+)([smhdw])", raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise UsageError(f"not a duration: {text!r} (e.g. 90m, 2h, 1d, 1h30m)")
        seconds = float(sum(int(n) * _UNITS[u] for n, u in parts))
    if seconds <= 0 or seconds > MAX_DURATION_S:
        raise UsageError(f"a silence lasts more than 0 s and at most {int(MAX_DURATION_S)} s")
    return seconds


def public(silence: Mapping[str, Any], now: float) -> dict[str, Any]:
    """A silence as the CLI, the API and the dashboard show it (with its ``state``)."""
    return {**silence, "state": state(silence, now),
            "matchers_text": ", ".join(str(m) for m in matchers_of(silence))}


class Silences:
    """The silences of one store. Process-safe: every change is one compare-and-set."""

    def __init__(self, store: Store, *, clock: Clock = time.time, audit: Audit | None = None):
        self.store = store
        self.clock = clock
        self.audit = audit
        # Every report asks (most often: there is none): a stat, not an open and a parse.
        self._record = StampedRecords(store, SILENCES)

    def all(self) -> list[dict[str, Any]]:
        """Every silence kept (as stored now: read, never change, the items)."""
        return list((self._record.get(ALL) or {}).get("silences") or [])

    def list(self, *, include_expired: bool = False) -> list[dict[str, Any]]:
        now = self.clock()
        out = [public(s, now) for s in self.all()]
        return [s for s in out if include_expired or s["state"] != EXPIRED]

    def get(self, sid: str) -> dict[str, Any]:
        for s in self.all():
            if s.get("id") == sid:
                return public(s, self.clock())
        raise NotFoundError(SILENCES, sid)

    def add(self, matchers: Iterable[Matcher], *, ends_at: float, author: str,
            comment: str = "", starts_at: float | None = None) -> dict[str, Any]:
        """A new silence (``UsageError`` for no matchers, an end before its start, …)."""
        found = list(matchers)
        if not found or len(found) > MAX_MATCHERS:
            raise UsageError(f"a silence needs 1 to {MAX_MATCHERS} matchers")
        now = self.clock()
        start = now if starts_at is None else float(starts_at)
        if not ends_at > max(start, now):
            raise UsageError("a silence must end after it starts, and in the future")
        if ends_at - start > MAX_DURATION_S:
            raise UsageError(f"a silence lasts at most {int(MAX_DURATION_S // 86400)} days")
        who = " ".join(str(author or "").split())[:MAX_AUTHOR]
        if not who:
            raise UsageError("a silence needs an author")
        silence = {"id": f"s-{secrets.token_hex(6)}", "matchers": [m.as_dict() for m in found],
                   "starts_at": math.floor(start * 1000) / 1000,
                   "ends_at": round(float(ends_at), 3),
                   "author": who, "comment": str(comment or "")[:MAX_COMMENT],
                   "created_at": round(now, 3)}

        def fn(cur: dict[str, Any] | None) -> dict[str, Any]:
            kept = [s for s in (cur or {}).get("silences") or ()
                    if now - float(s.get("expired_at") or s.get("ends_at") or 0) < KEEP_ENDED_S
                    or state(s, now) != EXPIRED]
            if len([s for s in kept if state(s, now) != EXPIRED]) >= MAX_SILENCES:
                raise UsageError(f"at most {MAX_SILENCES} silences at once: expire some first")
            return {"silences": [*kept, silence][-MAX_SILENCES * 2:]}

        self.store.update(SILENCES, ALL, fn)
        self._audit("silence_added", id=silence["id"], author=who,
                    matchers=[str(m) for m in found], starts_at=silence["starts_at"],
                    ends_at=silence["ends_at"], comment=silence["comment"][:200])
        return public(silence, now)

    def expire(self, sid: str, *, by: str) -> dict[str, Any]:
        """End a silence now (``NotFoundError`` if there is none with that id; expiring an
        expired one changes nothing)."""
        if not _ID.fullmatch(sid or ""):
            raise UsageError(f"not a silence id: {sid!r} (s- and 12 hex digits)")
        now = self.clock()
        out: dict[str, Any] = {}

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            items = list((cur or {}).get("silences") or [])
            for s in items:
                if s.get("id") == sid:
                    out["s"] = s
                    if state(s, now) == EXPIRED:
                        return None
                    s.update(expired_at=round(now, 3), expired_by=" ".join(
                        str(by or "").split())[:MAX_AUTHOR])
                    out["changed"] = True
                    return {"silences": items}
            return None

        self.store.update(SILENCES, ALL, fn)
        if "s" not in out:
            raise NotFoundError(SILENCES, sid)
        if out.get("changed"):
            self._audit("silence_expired", id=sid, by=by)
        return public(out["s"], now)

    def covering(self, incident: Mapping[str, Any],
                 among: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
        """The first active silence that covers ``incident`` (a record, or a signal's
        fields shaped like one), or None."""
        now = self.clock()
        for s in self.all() if among is None else among:
            if covers(s, incident, now):
                return s
        return None

    def decision(self, incident: Mapping[str, Any]) -> tuple[Decision, str] | None:
        """The gate's ``silenced`` decision and the silence's id, if one covers it."""
        s = self.covering(incident)
        if s is None:
            return None
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(s["ends_at"])))
        return Decision(SILENCED, f"Recorded; silenced by {s['id']} ({s.get('author', '?')}, "
                        f"until {until}): no healing agent starts and nobody is notified. "
                        "Continue normally."), str(s["id"])

    def reconcile(self, ledger: Any) -> dict[str, int]:
        """Bring ``silenced_by`` on the incidents in line with the silences now: mark the
        open and escalated ones a silence covers, clear it where none does any more.
        ``ledger``: a ``healer.core.incidents.Ledger`` on the same store."""
        silences = self.all()
        marked = cleared = 0
        seen: set[str] = set()
        candidates = [*ledger.active(), *ledger.list(status="escalated", limit=500).items]
        for iid in ledger.silenced_ids():
            data = ledger.get(iid)
            if data is not None:
                candidates.append(data)
        for inc in candidates:
            iid = str(inc.get("id") or "")
            if not iid or iid in seen:
                continue
            seen.add(iid)
            found = self.covering(inc, silences)
            want = str(found["id"]) if found and inc.get("status") != "resolved" else ""
            if want != str(inc.get("silenced_by") or ""):
                ledger.silence(iid, want)
                if want:
                    marked += 1
                else:
                    cleared += 1
        return {"marked": marked, "cleared": cleared}

    def _audit(self, event: str, **fields: Any) -> None:
        if self.audit is not None:
            self.audit.write(event, "", **fields)


def for_incident(incident: Mapping[str, Any]) -> list[Matcher]:
    """The matchers of a silence of exactly this incident (its kind and key)."""
    return [Matcher("kind", "=", str(incident.get("kind") or "")),
            Matcher("key", "=", str(incident.get("key") or ""))]


def silence_incident(store: Store, ledger: Any, iid: str, *, seconds: float, author: str,
                     comment: str = "", clock: Clock = time.time,
                     audit: Audit | None = None) -> dict[str, Any]:
    """Silence one incident for ``seconds`` from now (Slack's "Silence 1h", the dashboard's
    button) and mark it at once; ``NotFoundError`` if ``iid`` is unknown."""
    inc = ledger.require(iid)
    book = Silences(store, clock=clock, audit=audit)
    made = book.add(for_incident(inc), ends_at=clock() + seconds, author=author,
                    comment=comment or f"silenced from incident {iid}")
    ledger.silence(iid, made["id"])
    return made
