"""Incidents: one record and one state machine for every kind of trouble healer handles.

A capability's intake turns what it saw into a ``Signal``; ``Ledger.receive`` files it under
``(kind, key)`` — one incident however often and in however many batches it arrives
(``count``, ``first_seen``, ``last_seen``). Everything that happens to it afterwards — what the
gate said (a refusal is recorded and counted, never dropped), each attempt, the fix, the
escalation, the resolution — is a transition of the same record::

    open ──► healing ──► open         the attempt ended; another may follow
     │          ├──────► fixed ─────► resolved      a fix waits for review / was merged
     │          └──────► escalated    a person has to act (a seed file says what)
     ├──► escalated
     └──► resolved                    the source said it cleared, or the heal was verified
    resolved / fixed ──► open         firing again (reopened, or a regression)

Every incident carries the trust of its sources (``trust``: ``trusted`` once any trusted
source reported it, else ``anonymous``; ``healer.core.trust``), the distinct users or
releases that reported it (``reporters``), and a person's verdicts (``approvals``:
``healer.core.approval``): ``judge`` applies one (a denial resolves the incident), ``held``
notes a fix waiting for a person before publication. What it is about — the culprit of a
code incident, the alert code and object of a play one, the peer and channel of a fleet one —
is its ``about`` block (``healer.core.about``): set by the capability at intake, shown by
``public_view``.

Before an incident is eligible for an agent its source may want more than one occurrence
(``gate.thresholds``; ``healer.core.thresholds``): a ledger given those rules keeps the window
(``threshold``) in the same write that counts a signal, and ``below`` says whether it is met.

Records: ``incidents/<kind>-<key>``. Indexes kept with every write, so no read lists the
whole folder: a store set per status (``incidents-open`` …), the set of active anonymous
incidents (``incidents-anonymous``, for ``code.max_open_anonymous``), the ring of the most
recently changed ids (``incident-index/recent``) for paging, and one record of counters
(``incident-stats/all``: incidents by kind and status, gate decisions, attempts,
escalations, what the flood limits dropped) that ``/metrics`` and ``healer status`` read
whichever process wrote them.

The counters and the ring are folded in memory: each write adds its deltas (``+1 open``,
``-1 healing``, "move this id to the end") to the process's pending batch, and one
compare-and-set per record applies the batch to what is stored — so another process's
updates are never overwritten — at most ``FLUSH_EVERY_S`` after the first (a timer), when a
flood limit drops something, and at exit. Every ledger of this process on the same store shows
the pending deltas at once (``stats``, the ring); other processes see them within the window.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from healer.core import about as _about
from healer.core import approval
from healer.core import thresholds as th
from healer.core.audit import Audit
from healer.core.gate import Decision
from healer.core.names import is_safe_name
from healer.core.repeats import Repeats, counting_only
from healer.core.store import Store
from healer.core.trust import ANONYMOUS, ANONYMOUS_SET, LEVELS, TRUSTED
from healer.errors import NotFoundError, UsageError

log = logging.getLogger(__name__)

INCIDENTS = "incidents"
INDEX, RECENT = "incident-index", "recent"
STATS, STATS_KEY = "incident-stats", "all"
SILENCED_SET = "incidents-silenced"  # incidents a silence covers (healer.core.silences)
ACK_VIAS = ("cli", "api", "dashboard", "slack")

FIRING, RESOLVED_SIGNAL = "firing", "resolved"
OPEN, HEALING, FIXED, ESCALATED, RESOLVED = "open", "healing", "fixed", "escalated", "resolved"
STATUSES = (OPEN, HEALING, FIXED, ESCALATED, RESOLVED)
ACTIVE = frozenset({OPEN, HEALING, FIXED})
KINDS = ("play", "code", "fleet")
SEVERITIES = ("critical", "high", "medium", "low", "info")

MAX_HISTORY = 100
RECENT_SIZE = 2000
SMALL_SET = 500  # a finished status set this small is read whole when filtered on
MAX_KEY = 100
MAX_JUDGED = 1024  # incidents whose last repeat verdict is kept (``Ledger._repeat``)
FLUSH_EVERY_S = 1.0
DELIVERIES, MAX_DELIVERIES = "deliveries", 20  # the latest delivery ids an incident keeps

Clock = Callable[[], float]
Refire = Callable[[dict[str, Any], float], str]
Fields = dict[str, Any] | Callable[[], dict[str, Any]] | None


@dataclass(frozen=True)
class Signal:
    """One thing a source said about one incident: it is ``firing`` or it has ``resolved``.

    ``key`` identifies the incident within its kind (a fingerprint, ``peer-problem``,
    ``play-agent-code``): the intake derives it from what stays the same across repeats,
    never from counts or times. ``trust``: what the intake knows of the sender
    (``healer.core.trust``). Left empty, a code signal is anonymous (its intake must say it
    authenticated the sender) and a play or fleet signal trusted (they come from healer's own
    watchers, probes and log detection, and never start a code agent). ``reporters``: who it
    hit (``u:<user hash>``, ``r:<release>``), counted for approval eligibility. ``about``:
    what the incident concerns, in a few short fields the capability chooses (the culprit,
    the alert code and its object, the peer and channel; ``healer.core.about``).
    ``delivery``: an id the intake gives this filing of the signal; filed again under the
    same id (a retry after the store failed, when it is unclear whether the write landed)
    it changes nothing a second time — the incident keeps its latest ids."""

    kind: str
    key: str
    source: str
    status: str = FIRING
    severity: str = "medium"
    summary: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    count: int = 1
    trust: str = ""
    reporters: tuple[str, ...] = ()
    about: dict[str, Any] = field(default_factory=dict)
    delivery: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "about", _about.clean(self.about))
        if self.kind not in KINDS:
            raise UsageError(f"unknown incident kind {self.kind!r}")
        if not is_safe_name(self.key) or len(self.key) > MAX_KEY:
            raise UsageError(f"unusable incident key {self.key!r}")
        if self.status not in (FIRING, RESOLVED_SIGNAL):
            raise UsageError(f"status must be firing or resolved, got {self.status!r}")
        if self.severity not in SEVERITIES:
            raise UsageError(f"severity must be one of {', '.join(SEVERITIES)}")
        if not self.trust:
            object.__setattr__(self, "trust", ANONYMOUS if self.kind == "code" else TRUSTED)
        if self.trust not in LEVELS:
            raise UsageError(f"trust must be one of {', '.join(LEVELS)}")

    @property
    def id(self) -> str:
        return incident_id(self.kind, self.key)


def incident_id(kind: str, key: str) -> str:
    return f"{kind}-{key}"


def digest(text: str, *, keep: int = 60) -> str:
    """A usable key from ``text``: the text itself when it is a short safe name, else its
    readable start and a hash of the whole (so operators still recognise it)."""
    if is_safe_name(text) and len(text) <= keep + 17:
        return text
    head = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9._-]+", "-", text))[:keep].strip(".-_")
    tail = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
    key = f"{head}-{tail}" if head else tail
    return key if is_safe_name(key) else tail


@dataclass(frozen=True)
class Receipt:
    """What the ledger did with a signal: ``opened``, ``duplicate``, ``reopened``,
    ``regression``, ``resolved`` or ``ignored`` (a resolution of something never seen)."""

    id: str
    action: str
    status: str = ""
    incident: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in ("", None)}


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    total: int
    offset: int
    limit: int

    @property
    def next_offset(self) -> int | None:
        end = self.offset + len(self.items)
        return end if end < self.total else None


def _hist(rec: dict[str, Any], at: float, event: str, **detail: Any) -> None:
    rec["history"] = [*rec.get("history", []), {"at": round(at, 3), "event": event, **detail}][
        -MAX_HISTORY:]


def _status_set(status: str) -> str:
    return f"incidents-{status}"


def empty_stats() -> dict[str, Any]:
    return {"status": {}, "opened": {}, "decisions": {}, "attempts": {}, "escalations": {},
            "sources": {}, "dropped": {}}


def trust_of(data: dict[str, Any]) -> str:
    """An incident's trust; a code incident recorded before trust levels counts as anonymous
    (it asks a person once more), other kinds come from healer's own watchers."""
    found = data.get("trust")
    if found in LEVELS:
        return str(found)
    return ANONYMOUS if data.get("kind") == "code" else TRUSTED


def _anonymous_active(data: dict[str, Any] | None) -> bool:
    return bool(data) and data.get("trust") == ANONYMOUS and data.get("status") in ACTIVE


class Ledger:
    """The incident records of one store. Process-safe: every write is compare-and-set."""

    def __init__(self, store: Store, *, clock: Clock = time.time, audit: Audit | None = None,
                 thresholds: dict[str, th.Threshold] | None = None):
        self.store = store
        self.clock = clock
        self.audit = audit
        # gate.thresholds (healer.core.thresholds): the windows are kept with every write of
        # a source that has a rule; a ledger made without them leaves what is kept as it is.
        self.thresholds = {k: v for k, v in (thresholds or {}).items() if not v.trivial}
        self._lock = threading.Lock()
        # Held through a whole flush: a reader waits for a write under way, as its counts
        # are neither pending any more nor stored yet.
        self._flushing = threading.Lock()
        self._pending: list[tuple[tuple[str, ...], int]] = []
        self._touched: dict[str, None] = {}  # ids to move to the ring's end, oldest first
        self._timer: threading.Timer | None = None
        # Repeats the gate judges as before: counted here, written once a second.
        self.repeats = Repeats(store, INCIDENTS, self._cas, window_s=FLUSH_EVERY_S)
        # Per incident: the stored version a repeat was last judged "counting only" on, and
        # what of the signal and the decision that verdict rested on (``_repeat``).
        self._judged: dict[str, tuple[dict[str, Any], tuple[Any, ...]]] = {}
        _LIVE.add(self)
        store.on_close(self.close)

    def close(self) -> None:
        """Write what this ledger gathered (repeats, counters, ring moves): at exit, or
        when its store closes."""
        self.repeats.close()
        self.flush()

    # --- reading ------------------------------------------------------------------------------

    def get(self, iid: str) -> dict[str, Any] | None:
        if not is_safe_name(iid):
            return None
        rec = self.store.get(INCIDENTS, iid)
        if rec is None:
            return None
        data = rec.data
        for ledger in self._siblings():  # repeats counted by any ledger of this process
            data = ledger.repeats.overlay(iid, data)
        return data

    def require(self, iid: str) -> dict[str, Any]:
        found = self.get(iid)
        if found is None:
            raise NotFoundError(INCIDENTS, iid)
        return found

    def find(self, kind: str, key: str) -> dict[str, Any] | None:
        return self.get(incident_id(kind, key))

    def ids(self, status: str) -> list[str]:
        return self.store.members(_status_set(status))

    def active(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Open, healing and fixed incidents (of one kind), most recently seen first."""
        return self._read_ids(
            (i for s in sorted(ACTIVE) for i in self.ids(s)), kind=kind, status=None)

    def list(self, *, kind: str | None = None, status: str | None = None, limit: int = 20,
             offset: int = 0) -> Page:
        """A page of incidents, the active ones first (most recently seen first), then the
        finished ones, most recently changed first. Cost: the active set plus the page, not
        every incident ever recorded (only paging past the recent ring scans the folder)."""
        if kind is not None and kind not in KINDS:
            raise UsageError(f"kind must be one of {', '.join(KINDS)}")
        if status is not None and status not in STATUSES:
            raise UsageError(f"status must be one of {', '.join(STATUSES)}")
        limit = max(1, min(int(limit), 500))
        offset = max(0, int(offset))
        stats = self.stats()["status"]
        kinds = [kind] if kind else list(stats)
        statuses = [status] if status else list(STATUSES)
        total = sum(int(stats.get(k, {}).get(s, 0)) for k in kinds for s in statuses)
        wanted = offset + limit
        first: list[dict[str, Any]] = []
        if status is None or status in ACTIVE:
            first = self._read_ids((i for s in (statuses if status else sorted(ACTIVE))
                                    for i in self.ids(s)), kind=kind, status=status)
        seen = {d["id"] for d in first}
        rest: list[dict[str, Any]] = []
        members = self.ids(status) if status is not None and status not in ACTIVE else None
        if members is not None and len(members) <= SMALL_SET:
            # A small finished set (escalated, typically): read it, not the ring.
            rest = sorted(self._read_ids(members, kind=kind, status=status),
                          key=lambda d: d.get("updated_at", 0), reverse=True)
        elif status is None or status not in ACTIVE:
            wanted_ids = set(members) if members is not None else None
            for iid in reversed(self._recent()):
                if len(first) + len(rest) >= wanted:
                    break
                if iid in seen or (wanted_ids is not None and iid not in wanted_ids):
                    continue
                seen.add(iid)
                data = self.get(iid)
                if data and data.get("status") not in ACTIVE and _matches(data, kind, status):
                    rest.append(data)
            if len(first) + len(rest) < min(wanted, total):
                rest += self._scan(seen, kind, status)  # deep pages only
        items = (first + rest)[offset:wanted]
        return Page(items, max(total, offset + len(items)), offset, limit)

    def _read_ids(self, ids: Iterable[str], *, kind: str | None,
                  status: str | None) -> list[dict[str, Any]]:
        out = []
        for iid in dict.fromkeys(ids):
            data = self.get(iid)
            if data and _matches(data, kind, status):
                out.append(data)
        return sorted(out, key=lambda d: d.get("last_seen", 0), reverse=True)

    def _scan(self, seen: set[str], kind: str | None, status: str | None
              ) -> list[dict[str, Any]]:
        found = [r.data for r in self.store.list(INCIDENTS)
                 if r.key not in seen and r.data.get("status") not in ACTIVE
                 and _matches(r.data, kind, status)]
        return sorted(found, key=lambda d: d.get("updated_at", 0), reverse=True)

    def recent(self) -> list[str]:
        """The ids of the most recently changed incidents, oldest first, with the moves this
        process has not written yet (another process sees them within ``FLUSH_EVERY_S``)."""
        return self._recent()

    def _recent(self) -> list[str]:
        rec = self.store.get(INDEX, RECENT)
        ids = list(rec.data.get("ids", [])) if rec else []
        touched: list[str] = []
        for ledger in self._siblings():
            with ledger._lock:
                touched += ledger._touched
        return _ring(ids, touched) if touched else ids

    def stats(self) -> dict[str, Any]:
        """The shared counters, with this process's not yet written counts added."""
        siblings = sorted(self._siblings(), key=id)  # one order: no two readers deadlock
        with contextlib.ExitStack() as held:
            for ledger in siblings:
                held.enter_context(ledger._flushing)
            rec = self.store.get(STATS, STATS_KEY)
            data = json.loads(json.dumps(rec.data)) if rec else empty_stats()
            pending: list[tuple[tuple[str, ...], int]] = []
            for ledger in siblings:
                with ledger._lock:
                    pending += ledger._pending
        return _apply(data, pending) if pending else data

    def _siblings(self) -> list[Ledger]:
        """The ledgers of this process on this store (whose unwritten counts are ours too)."""
        where = _where(self.store)
        return [led for led in list(_LIVE) if led is self or _where(led.store) == where]

    # --- intake -------------------------------------------------------------------------------

    def receive(self, signal: Signal, *, fields: Fields = None,
                refire: Refire | None = None, decision: Decision | None = None,
                merge: Callable[[dict[str, Any]], None] | None = None) -> Receipt:
        """File one signal: open, count, reopen or resolve its incident.

        ``fields``: kind-specific data stored with a new (or reopened) incident, or a function
        making it (called only when it is stored: a repeat that is only counted needs none).
        ``refire(incident, now)`` decides what a firing signal does to a ``fixed`` or
        ``resolved`` incident (``reopened``, ``regression`` or ``duplicate``); by default a
        resolved one reopens and a fixed one is a duplicate.
        ``decision``: what the gate already said about it, recorded in the same write (the
        hot path of a repeated report is one write).
        ``merge(incident)``: folds what a repeat adds (users, tags, the latest breadcrumbs,
        a count in a map of ``about``) into an existing incident, in the same write."""
        now = self.clock()
        out: dict[str, str] = {}
        if (decision is not None and not decision.accepted and signal.status == FIRING
                and merge is None and signal.source not in self.thresholds
                and not signal.delivery):
            counted = self._repeat(signal, decision, now)
            if counted is not None:
                return counted

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is not None and signal.delivery and \
                    signal.delivery in (cur.get(DELIVERIES) or ()):
                out["action"] = "duplicate"
                return cur  # filed already: the attempt that failed had landed
            if signal.status == FIRING:
                new = self._firing(cur, signal, fields, now, out, refire)
                if cur is not None and merge is not None:
                    merge(new)
                    if new.get("about"):  # what the capability folded in, within the limits
                        new["about"] = _about.clean(new["about"])
                rule = self.thresholds.get(signal.source)
                if rule is not None:
                    new["threshold"] = th.advance(new.get("threshold"), signal.count,
                                                  th.users_of(new.get("reporters")), now, rule)
            else:
                new = _resolving(cur, signal.source, now, out)
            if new is not None and decision is not None:
                out["previous_reason"] = (new.get("gate") or {}).get("reason", "")
                _gate(new, decision, now)
            if new is not None and signal.delivery:
                new[DELIVERIES] = [*(new.get(DELIVERIES) or []), signal.delivery][
                    -MAX_DELIVERIES:]
            return new

        data = self._write(signal.id, fn,
                           stat=("decisions", decision.reason) if decision else None)
        action = out.get("action", "ignored")
        # The trail keeps what changed: a repeat the gate judges as before is only counted.
        trail: list[tuple[str, str, dict[str, Any]]] = []
        if action != "duplicate":
            trail.append((action, signal.id, {"source": signal.source, "signal": signal.status,
                                              "status": data.get("status", "") if data else ""}))
        if decision is not None and data is not None and (
                action != "duplicate" or out.get("previous_reason") != decision.reason):
            trail.append(("gate", signal.id, {"decision": decision.reason,
                                              "message": decision.message[:500],
                                              "attempt_id": decision.attempt_id}))
        if trail and self.audit is not None:
            self.audit.write_many(trail)  # one append for both lines
        return Receipt(signal.id, action, data.get("status", "") if data else "", data)

    def _repeat(self, signal: Signal, decision: Decision, now: float) -> Receipt | None:
        """A refused repeat that would change only the counting fields (``repeats``):
        counted in memory, no write. None: it needs the ordinary write."""
        iid = signal.id
        cur = self.repeats.current(iid)
        if cur is None or cur.get("status") not in (OPEN, HEALING):
            return None
        # Whether the update changes more than the counts depends on the stored version
        # and on these alone (not on the time or the count): judged once per version.
        like = (signal.source, signal.trust, signal.reporters, signal.about, decision.reason,
                decision.attempt_id)
        judged = self._judged.get(iid)
        if judged is None or judged[0] is not cur or judged[1] != like:
            out: dict[str, str] = {}
            new = self._firing(dict(cur), signal, None, now, out, None)
            _gate(new, decision, now)
            new["updated_at"] = now
            if out.get("action") != "duplicate" or not counting_only(cur, new):
                return None
            if len(self._judged) >= MAX_JUDGED:
                self._judged.clear()
            self._judged[iid] = (cur, like)  # the version itself: never a recycled id
        self.repeats.add(iid, count=signal.count, at=now, gate=_gate_entry(decision, now))
        self._count(str(cur.get("kind", signal.kind)), None, None,
                    stat=("decisions", decision.reason), source=str(cur.get("source", "")))
        data = self.repeats.overlay(iid, cur)
        return Receipt(iid, "duplicate", str(data.get("status", "")), data)

    def _firing(self, cur: dict[str, Any] | None, signal: Signal, fields: Fields,
                now: float, out: dict[str, str], refire: Refire | None) -> dict[str, Any]:
        if cur is None:
            out["action"] = "opened"
            rec = {"id": signal.id, "kind": signal.kind, "key": signal.key,
                   "source": signal.source, "sources": [signal.source], "status": OPEN,
                   "severity": signal.severity, "summary": signal.summary[:500],
                   "count": signal.count, "first_seen": now, "last_seen": now,
                   "attempts": 0, "attempt_ids": [], "rejections": {},
                   "detail": dict(signal.detail), "trust": signal.trust, **_made(fields)}
            if signal.about:
                rec["about"] = dict(signal.about)
            if signal.reporters:
                rec["reporters"] = approval.merge_reporters([], signal.reporters)
            _hist(rec, now, "opened", source=signal.source, trust=signal.trust)
            return rec
        cur["count"] = int(cur.get("count", 0)) + signal.count
        cur["last_seen"] = now
        if signal.about:
            cur["about"] = _about.update(cur.get("about"), signal.about)
        if signal.source not in cur.get("sources", []):
            cur["sources"] = [*cur.get("sources", []), signal.source][-10:]
        if signal.trust == TRUSTED and cur.get("trust") != TRUSTED:
            cur["trust"] = TRUSTED  # a trusted source reported it too
            _hist(cur, now, "trusted", source=signal.source)
        if signal.reporters and len(cur.get("reporters") or ()) < approval.MAX_REPORTERS:
            cur["reporters"] = approval.merge_reporters(cur.get("reporters"), signal.reporters)
        status = cur.get("status")
        action = "duplicate"
        if status in (RESOLVED, FIXED):
            action = (refire(cur, now) if refire else
                      ("reopened" if status == RESOLVED else "duplicate"))
        if action in ("reopened", "regression"):
            cur.pop("threshold", None)  # a new opening counts its occurrences anew
            cur.update(_made(fields))
            cur.update(status=OPEN, summary=signal.summary[:500] or cur.get("summary", ""),
                       severity=signal.severity, resolved_at=None, resolved_by=None,
                       stop_requested=False, reopened=int(cur.get("reopened", 0)) + 1)
            cur.pop("acknowledged", None)  # firing again: a person has to take it anew
            _hist(cur, now, action, source=signal.source)
        out["action"] = action
        return cur

    def below(self, signal: Signal, incident: dict[str, Any] | None = None, *,
              filed: bool = False) -> Decision | None:
        """The ``awaiting_occurrences`` refusal while ``signal``'s incident is under its
        source's threshold (``healer.core.thresholds``), None once met or without a rule (no
        read then). ``incident``: the record if the caller has it; ``filed``: the signal is
        counted in it already (else it is counted as about to be filed)."""
        rule = self.thresholds.get(signal.source)
        if rule is None:
            return None
        cur = incident if incident is not None else self.get(signal.id)
        if cur is not None and cur.get("status") == RESOLVED:
            cur = {**cur, "threshold": None}  # fires again after an end: counts from zero
        return th.below(cur, rule, self.clock(), source=signal.source,
                        count=0 if filed else signal.count,
                        reporters=() if filed else signal.reporters)

    # --- transitions --------------------------------------------------------------------------

    def decided(self, iid: str, decision: Decision) -> dict[str, Any] | None:
        """Record what the gate said. A refusal stays visible on the incident with its
        reason, and counts (``rejections``); the incident stays open for a later retry."""
        now = self.clock()

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None:
                return None
            _gate(cur, decision, now)
            return cur

        data = self._write(iid, fn, stat=("decisions", decision.reason))
        self._audit("gate", iid, decision=decision.reason, message=decision.message[:500],
                    attempt_id=decision.attempt_id)
        return data

    def started(self, iid: str, attempt_id: str, doing: str) -> dict[str, Any] | None:
        """An attempt began: ``healing``, attempt n+1. An incident its source resolved
        meanwhile stays resolved: the attempt is recorded with ``stop_requested``, so it
        stops at its next check instead of reopening what is already well."""
        now = self.clock()

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None or attempt_id in cur.get("attempt_ids", []):
                return None
            if cur.get("status") == RESOLVED:
                cur["stop_requested"] = True
            else:
                cur.update(status=HEALING, doing=doing[:300])
            cur.update(attempt_id=attempt_id,
                       attempts=int(cur.get("attempts", 0)) + 1,
                       attempt_ids=[*cur.get("attempt_ids", []), attempt_id][-50:])
            approval.use(cur, attempt_id)  # a run approval admits one attempt
            _hist(cur, now, "attempt_started", attempt_id=attempt_id, n=cur["attempts"])
            return cur

        data = self._write(iid, fn, stat=("attempts", ""))
        self._audit("attempt_started", iid, attempt_id=attempt_id, doing=doing[:300])
        return data

    def attempt_ended(self, iid: str, attempt_id: str, outcome: str, *, status: str = OPEN,
                      reason: str = "", **fields: Any) -> dict[str, Any] | None:
        """An attempt ended with ``outcome``; the incident goes to ``status`` (open for a
        retry, fixed, resolved) unless it was resolved meanwhile or escalated already."""
        now = self.clock()

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None:
                return None
            cur.update(fields)
            cur["last_outcome"] = {"attempt_id": attempt_id, "outcome": outcome,
                                   "reason": reason[:500], "at": now}
            if cur.get("status") not in (RESOLVED, ESCALATED):
                cur["status"] = status
            if cur.get("attempt_id") == attempt_id or cur["status"] != HEALING:
                cur["doing"] = ""
            _hist(cur, now, "attempt_ended", attempt_id=attempt_id, outcome=outcome)
            return cur

        data = self._write(iid, fn)
        self._audit("attempt_ended", iid, attempt_id=attempt_id, outcome=outcome,
                    reason=reason[:500])
        return data

    def escalated(self, iid: str, *, seed_file: str, reason: str, issue_url: str = ""
                  ) -> dict[str, Any] | None:
        """A person was told (``seed_file`` in ``.fleet-messages/human/``)."""
        now = self.clock()

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None:
                return None
            if cur.get("status") != RESOLVED:
                cur["status"] = ESCALATED
            cur.update(doing="", escalation={"seed_file": seed_file, "reason": reason[:2000],
                                             "issue_url": issue_url, "at": now})
            _hist(cur, now, "escalated", seed_file=seed_file)
            return cur

        data = self._write(iid, fn, stat=("escalations", ""))
        self._audit("escalated", iid, seed_file=seed_file, reason=reason[:500],
                    issue_url=issue_url)
        return data

    def resolve(self, iid: str, by: str) -> dict[str, Any] | None:
        """Resolved (the source cleared it, or healer verified the heal). A running attempt
        sees ``stop_requested`` and stops; nothing retries it."""
        now = self.clock()
        out: dict[str, str] = {}
        data = self._write(iid, lambda cur: _resolving(cur, by, now, out))
        if out.get("action") == "resolved":
            self._audit("resolved", iid, by=by)
        return data

    def update(self, iid: str, event: str = "", **fields: Any) -> dict[str, Any] | None:
        """Set kind-specific ``fields`` (not the status) and note ``event``."""
        if "status" in fields:
            raise ValueError("the status changes only through the transitions")
        now = self.clock()

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None:
                return None
            cur.update(fields)
            if event:
                _hist(cur, now, event)
            return cur

        return self._write(iid, fn)

    def set_status(self, iid: str, status: str, event: str, *,
                   unless: frozenset[str] = frozenset(), **fields: Any) -> dict[str, Any] | None:
        """A kind's own transition (e.g. a watched fix passed: ``resolved``); ``unless``:
        statuses that stay as they are (the fields are still set)."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        now = self.clock()

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None:
                return None
            cur.update(fields)
            if cur.get("status") not in unless:
                cur["status"] = status
                if status != HEALING:
                    cur["doing"] = ""
            _hist(cur, now, event)
            return cur

        data = self._write(iid, fn, stat=("escalations", "") if status == ESCALATED else None)
        self._audit(event, iid, status=status)
        return data

    def judge(self, iid: str, verdict: approval.Verdict, policy: approval.Policy
              ) -> dict[str, Any]:
        """Record a person's verdict on the stage that waits (``healer.core.approval``) in one
        compare-and-set: ``ApprovalError`` if nothing of that stage waits (so of two people
        approving at once, one wins). A denial resolves the incident."""
        self.require(iid)
        now = self.clock()
        verdict_word = approval.APPROVED if verdict.approved else approval.DENIED

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None:
                return None
            approval.judge(cur, verdict, policy)
            _hist(cur, now, verdict_word, stage=verdict.stage, by=verdict.by[:100],
                  via=verdict.via)
            return cur

        data = self._write(iid, fn)
        if data is None:
            raise NotFoundError(INCIDENTS, iid)
        rec = approval.records(data).get(verdict.stage) or {}
        self._audit(verdict_word, iid, stage=verdict.stage, by=verdict.by[:100],
                    via=verdict.via, comment=verdict.comment[:approval.MAX_COMMENT],
                    attempt_id=str(rec.get("attempt_id") or ""))
        return data

    def held(self, iid: str, attempt_id: str, reasons: list[str], **fields: Any
             ) -> dict[str, Any] | None:
        """A fix of ``attempt_id`` passed everything and waits for a person before it is
        published: the incident is ``fixed`` (unless resolved or escalated meanwhile) with
        ``approvals.publish`` waiting."""
        now = self.clock()

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None:
                return None
            cur.update(fields)
            cur["last_outcome"] = {"attempt_id": attempt_id, "outcome": "awaiting_approval",
                                   "reason": "; ".join(reasons)[:500], "at": now}
            if cur.get("status") not in (RESOLVED, ESCALATED):
                cur["status"] = FIXED
            cur["doing"] = ""
            approval.hold(cur, attempt_id, reasons, now)
            _hist(cur, now, "publication_held", attempt_id=attempt_id)
            return cur

        data = self._write(iid, fn)
        self._audit("publication_held", iid, attempt_id=attempt_id, reasons=reasons[:20])
        return data

    def acknowledge(self, iid: str, *, by: str, via: str) -> dict[str, Any]:
        """A person takes the incident (``acknowledged``: by, at, via); the notification
        reconciler tells PagerDuty and updates the chat message. ``UsageError`` when it is
        resolved or acknowledged already (saying by whom); ``NotFoundError`` if unknown."""
        if via not in ACK_VIAS:
            raise UsageError(f"via must be one of {', '.join(ACK_VIAS)}")
        who = " ".join(str(by or "").split())[:100]
        if not who:
            raise UsageError("an acknowledgement needs who gave it")
        self.require(iid)
        now = self.clock()
        why: dict[str, str] = {}

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            why.clear()  # a conflicting write may call this again
            if cur is None:
                return None
            if cur.get("status") == RESOLVED:
                why["no"] = "it is resolved: nothing to acknowledge"
                return None
            ack = cur.get("acknowledged") or {}
            if ack:
                why["no"] = f"acknowledged already, by {ack.get('by', '?')} " \
                            f"(via {ack.get('via', '?')})"
                return None
            cur["acknowledged"] = {"by": who, "at": now, "via": via}
            _hist(cur, now, "acknowledged", by=who, via=via)
            return cur

        data = self._write(iid, fn)
        if why:
            raise UsageError(f"{iid}: {why['no']}")
        if data is None:
            raise NotFoundError(INCIDENTS, iid)
        self._audit("acknowledged", iid, by=who, via=via)
        return data

    def silence(self, iid: str, silence_id: str) -> dict[str, Any] | None:
        """Set (or with ``""`` clear) ``silenced_by``: a silence covers the incident; the
        notification reconciler sends nothing for it while it does."""
        now = self.clock()
        changed: list[bool] = []

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            changed.clear()
            if cur is None or str(cur.get("silenced_by") or "") == silence_id:
                return None
            changed.append(True)
            if silence_id:
                cur["silenced_by"] = silence_id
            else:
                cur.pop("silenced_by", None)
            _hist(cur, now, "silenced" if silence_id else "unsilenced",
                  **({"silence": silence_id} if silence_id else {}))
            return cur

        data = self._write(iid, fn)
        if data is None:  # an unknown id leaves no set member behind
            self.store.remove_member(SILENCED_SET, iid)
            return None
        if not changed:
            return data
        self._audit("silenced" if silence_id else "unsilenced", iid, silence=silence_id)
        return data

    def silenced_ids(self) -> list[str]:
        """The incidents ``silenced_by`` some silence (the index, not a scan)."""
        return self.store.members(SILENCED_SET)

    def publish_failed(self, iid: str, error: str) -> dict[str, Any] | None:
        """Publishing an approved fix failed: the publication waits for a person again."""

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None:
                return None
            approval.reopen_publish(cur, error)
            return cur

        data = self._write(iid, fn)
        self._audit("publication_failed", iid, error=error[:500])
        return data

    def dropped(self, source: str, reason: str) -> None:
        """A flood limit refused to open an incident from ``source``: counted, not stored.
        Written at once (with what else is pending), so the count is never lost in the
        lull after a flood; the flood itself is bounded by the ingest's rate."""
        with self._lock:
            self._pending.append((("dropped", source or "?", reason), 1))
        self.flush()

    def should_stop(self, iid: str) -> bool:
        data = self.get(iid)
        return bool(data and (data.get("stop_requested") or data.get("status") == RESOLVED))

    # --- the one write path: record, indexes, counters -------------------------------------------

    def _write(self, iid: str, fn: Callable[[dict[str, Any] | None], dict[str, Any] | None],
               *, stat: tuple[str, str] | None = None) -> dict[str, Any] | None:
        self.repeats.flush_one(iid)  # counted repeats first: this write may change the gate
        return self._cas(iid, fn, stat=stat)

    def _cas(self, iid: str, fn: Callable[[dict[str, Any] | None], dict[str, Any] | None],
             *, stat: tuple[str, str] | None = None) -> dict[str, Any] | None:
        before: dict[str, Any] = {}

        def wrapped(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            before["status"] = cur.get("status") if cur else None
            before["new"] = cur is None
            before["anonymous"] = _anonymous_active(cur)
            before["silenced"] = bool(cur and cur.get("silenced_by"))
            new = fn(cur)
            if new is not None:
                new["updated_at"] = self.clock()
            return new

        rec = self.store.update(INCIDENTS, iid, wrapped)
        if rec is None:
            return None
        data = rec.data
        old, new = before.get("status"), data.get("status")
        anonymous = _anonymous_active(data)
        if anonymous != before.get("anonymous"):
            if anonymous:
                self.store.add_member(ANONYMOUS_SET, iid)
            else:
                self.store.remove_member(ANONYMOUS_SET, iid)
        if bool(data.get("silenced_by")) != before.get("silenced"):
            if data.get("silenced_by"):
                self.store.add_member(SILENCED_SET, iid)
            else:
                self.store.remove_member(SILENCED_SET, iid)
        if before.get("new") or old != new:
            if old:
                self.store.remove_member(_status_set(old), iid)
            self.store.add_member(_status_set(new), iid)
            self._touch_recent(iid)
            self._count(data["kind"], old, new, opened=bool(before.get("new")), stat=stat,
                        source=str(data.get("source", "")))
        elif stat:
            self._count(data["kind"], None, None, stat=stat, source=str(data.get("source", "")))
        return data

    def _touch_recent(self, iid: str) -> None:
        with self._lock:
            self._touched.pop(iid, None)
            self._touched[iid] = None
            self._soon()

    def _count(self, kind: str, old: str | None, new: str | None, *, opened: bool = False,
               stat: tuple[str, str] | None = None, source: str = "") -> None:
        """Move the shared counters: gathered here, written within ``FLUSH_EVERY_S`` (and
        when the process exits); this process's ledgers count them at once."""
        ops: list[tuple[tuple[str, ...], int]] = []
        if old:
            ops.append((("status", kind, old), -1))
        if new:
            ops.append((("status", kind, new), 1))
        if opened:
            ops.append((("opened", kind), 1))
        if stat:
            table, label = stat
            ops.append(((table, kind, label) if label else (table, kind), 1))
            if table == "decisions" and source:
                ops.append((("sources", source, label), 1))
        with self._lock:
            self._pending.extend(ops)
            self._soon()

    def _soon(self) -> None:
        """A flush within the window (under ``_lock``)."""
        if self._timer is None:
            self._timer = threading.Timer(FLUSH_EVERY_S, self._due)
            self._timer.daemon = True
            self._timer.name = "healer-incident-counters"
            self._timer.start()

    def _due(self) -> None:
        try:
            self.flush()
        except Exception:
            log.warning("incident counters not written; kept for the next try", exc_info=True)

    def flush(self) -> None:
        """Write the gathered counts and ring moves: one compare-and-set of each record,
        applied to what is stored then (deltas, so no other process's update is lost)."""
        with self._flushing:
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            ops, self._pending = self._pending, []
            touched, self._touched = list(self._touched), {}
            timer, self._timer = self._timer, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        try:
            if touched:  # derived records, rebuildable: no flush to disk needed
                self.store.update(INDEX, RECENT, lambda cur: {"ids": _ring(
                    list((cur or {}).get("ids", [])), touched)}, durable=False)
                touched = []
            if ops:
                self.store.update(STATS, STATS_KEY,
                                  lambda cur: _apply(cur or empty_stats(), ops), durable=False)
        except Exception:
            with self._lock:  # the next flush tries again, before what came meanwhile
                self._pending = ops + self._pending
                self._touched = dict.fromkeys(_last_wins([*touched, *self._touched]))
                self._soon()
            raise

    def _audit(self, event: str, iid: str, **fields: Any) -> None:
        if self.audit is not None:
            self.audit.write(event, iid, **fields)


def _ring(ids: list[str], touched: list[str]) -> list[str]:
    """The recent ring with ``touched`` moved (in order) to its end."""
    moved = set(touched)
    return [*(i for i in ids if i not in moved), *_last_wins(touched)][-RECENT_SIZE:]


def _last_wins(ids: list[str]) -> list[str]:
    """``ids`` without repeats, each where it came last."""
    return list(reversed(dict.fromkeys(reversed(ids))))


def _where(store: Store) -> object:
    # Two FileStore objects on one state dir are one store (the same files).
    root = getattr(store, "root", None)
    return str(root) if root is not None else id(store)


def _apply(stats: dict[str, Any], ops: list[tuple[tuple[str, ...], int]]) -> dict[str, Any]:
    for path, delta in ops:
        node = stats
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = max(0, int(node.get(path[-1], 0)) + delta)
    return stats


_LIVE: weakref.WeakSet[Ledger] = weakref.WeakSet()


@atexit.register
def _flush_all() -> None:
    """A CLI process (``healer report``) exits right after its one report: count it."""
    for ledger in list(_LIVE):
        try:
            ledger.close()
        except Exception:
            log.warning("incident counters not written at exit")


def _gate_entry(decision: Decision, now: float) -> dict[str, Any]:
    gate: dict[str, Any] = {"reason": decision.reason, "message": decision.message[:500],
                            "at": now}
    if decision.attempt_id:
        gate["attempt_id"] = decision.attempt_id
    return gate


def _gate(cur: dict[str, Any], decision: Decision, now: float) -> None:
    cur["gate"] = _gate_entry(decision, now)
    if not decision.accepted:
        rej = dict(cur.get("rejections") or {})
        rej[decision.reason] = int(rej.get(decision.reason, 0)) + 1
        cur["rejections"] = rej
    if not cur.get("history") or cur["history"][-1].get("reason") != decision.reason:
        _hist(cur, now, "gate", reason=decision.reason)


def _made(fields: Fields) -> dict[str, Any]:
    return (fields() if callable(fields) else fields) or {}


def _matches(data: dict[str, Any], kind: str | None, status: str | None) -> bool:
    return (kind is None or data.get("kind") == kind) and (
        status is None or data.get("status") == status)


def _resolving(cur: dict[str, Any] | None, by: str, now: float,
               out: dict[str, str]) -> dict[str, Any] | None:
    if cur is None:
        out["action"] = "ignored"  # a resolution of something never seen here
        return None
    if cur.get("status") == RESOLVED:
        out["action"] = "duplicate"
        return None
    out["action"] = "resolved"
    cur.update(status=RESOLVED, resolved_at=now, resolved_by=by, doing="",
               stop_requested=cur.get("status") == HEALING)
    _hist(cur, now, "resolved", by=by)
    return cur


def public_view(data: dict[str, Any]) -> dict[str, Any]:
    """What the API and ``healer status`` show of an incident."""
    keys = ("id", "kind", "key", "source", "sources", "trust", "status", "severity", "summary",
            "about", "count", "first_seen", "last_seen", "attempts", "attempt_id", "doing", "gate",
            "approvals",
            "rejections", "last_outcome", "escalation", "resolved_at", "resolved_by",
            "reopened", "target", "links", "code", "failure_class", "held", "held_total",
            "resume_at", "waits", "threshold", "acknowledged", "silenced_by", "updated_at")
    out = {k: data[k] for k in keys if data.get(k) not in (None, "", [], {})}
    out["trust"] = trust_of(data)
    if data.get("reporters"):
        out["reporters"] = len(data["reporters"])  # how many, never who
    return out
