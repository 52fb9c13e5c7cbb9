"""Repeats of an incident the gate judges as before: counted in memory, written once a second.

The hot path of ``report_error`` (and of any intake that records the gate's decision with the
signal) is one bug reported over and over: each repeat only moves the incident's ``count``,
``last_seen``, its ``rejections`` tally and the time of the gate's unchanged verdict. Writing
that record durably for every repeat cost an fsync (milliseconds) per report, so the
``Ledger`` hands such repeats here instead:

* **Which repeats.** The ledger runs its own update on the incident as last read and asks
  ``counting_only``: a repeat that would change anything but those fields (a new status, a
  new gate reason, a history entry, a new source or trust) takes the ordinary write.
* **Never stale.** The incident as last read is kept with its store ``stamp`` (for the file
  store the inode, mtime and size of the very file read: every write renames a new one into
  place). Before each use the stamp is taken again, one ``stat``; any write by any process
  changes it, and the record is read afresh.
* **Written soon, and at exit.** What is gathered is written (one compare-and-set per
  incident, as deltas, so other processes' counts are never overwritten) at most
  ``window_s`` after the first repeat, by a timer thread, before this process writes that
  incident otherwise, and when the process exits. Within this process ``Ledger.get`` shows
  the counts at once; other processes see them within ``window_s``.

A crash of the whole machine within the window can lose those counts; nothing else is at
stake (statuses, decisions and attempts are written as before).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from healer.core.store import Store

log = logging.getLogger(__name__)

# The fields a repeat the gate judges as before may change; anything else is a real write.
COUNTING = frozenset({"count", "last_seen", "updated_at", "rejections", "gate"})
MAX_CACHED = 1024
MAX_PENDING = 1000  # incidents with counts waiting: beyond that, written at once

Write = Callable[[str, Callable[[dict[str, Any] | None], dict[str, Any] | None]], object]


@dataclass
class Pending:
    """What this process counted for one incident and has not written yet."""

    count: int = 0
    last_seen: float = 0.0
    rejections: dict[str, int] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)

    def fold(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` (changed in place and returned) with these counts added."""
        data["count"] = int(data.get("count", 0)) + self.count
        data["last_seen"] = max(float(data.get("last_seen") or 0.0), self.last_seen)
        if self.rejections:
            rej = dict(data.get("rejections") or {})
            for reason, n in self.rejections.items():
                rej[reason] = int(rej.get(reason, 0)) + n
            data["rejections"] = rej
        cur = data.get("gate") or {}
        # Only a newer time for the same verdict: a different one written meanwhile stands.
        if (self.gate and cur.get("reason") == self.gate.get("reason")
                and cur.get("attempt_id") == self.gate.get("attempt_id")
                and float(cur.get("at") or 0.0) <= float(self.gate.get("at") or 0.0)):
            data["gate"] = dict(self.gate)
        return data


def counting_only(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether ``after`` differs from ``before`` in the counting fields alone (the gate's
    verdict itself — reason and attempt — unchanged)."""
    if before.keys() != after.keys():
        return False
    for key, value in after.items():
        if key in COUNTING:
            continue
        old = before[key]
        if value is not old and value != old:
            return False
    old_gate, new_gate = before.get("gate") or {}, after.get("gate") or {}
    return (old_gate.get("reason") == new_gate.get("reason")
            and old_gate.get("attempt_id") == new_gate.get("attempt_id"))


class Repeats:
    """The cache of incidents as last read and the counts not yet written, for one ledger.
    Thread-safe; ``write(iid, fn)`` is the ledger's compare-and-set write."""

    def __init__(self, store: Store, kind: str, write: Write, *, window_s: float):
        self.store = store
        self.kind = kind
        self.window_s = window_s
        self._write = write
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[object, dict[str, Any]]] = {}
        self._pending: dict[str, Pending] = {}
        self._timer: threading.Timer | None = None
        self._flushing: threading.Thread | None = None

    def current(self, iid: str) -> dict[str, Any] | None:
        """The incident as stored now (not to be changed), from the cache when its stamp is
        still the stored one; None when the store keeps no stamps or there is no record."""
        stamp = self.store.stamp(self.kind, iid)
        if stamp is None:
            return None
        hit = self._seen.get(iid)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        rec, stamp = self.store.get_stamped(self.kind, iid)
        if rec is None or stamp is None:
            return None
        if len(self._seen) >= MAX_CACHED:
            self._seen.clear()
        self._seen[iid] = (stamp, rec.data)
        return rec.data

    def add(self, iid: str, *, count: int, at: float, gate: dict[str, Any]) -> None:
        """Count one repeat of ``iid`` judged ``gate`` (a refusal) at ``at``."""
        with self._lock:
            pend = self._pending.setdefault(iid, Pending())
            pend.count += count
            pend.last_seen = max(pend.last_seen, at)
            reason = str(gate.get("reason", ""))
            pend.rejections[reason] = pend.rejections.get(reason, 0) + 1
            pend.gate = gate
            crowded = len(self._pending) > MAX_PENDING
            if not crowded and self._timer is None:
                self._timer = threading.Timer(self.window_s, self._due)
                self._timer.daemon = True
                self._timer.name = "healer-incident-repeats"
                self._timer.start()
        if crowded:
            self.flush()

    def overlay(self, iid: str, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` with this process's unwritten counts of ``iid`` (a copy if any)."""
        with self._lock:
            pend = self._pending.get(iid)
            if pend is None:
                return data
            return pend.fold(dict(data))

    def take(self, iid: str) -> Pending | None:
        with self._lock:
            return self._pending.pop(iid, None)

    def flush_one(self, iid: str) -> None:
        """Write ``iid``'s counts now (before another write of it from this process)."""
        pend = self.take(iid)
        if pend is not None:
            self._store(iid, pend)

    def flush(self) -> None:
        """Write every incident's gathered counts (one compare-and-set each)."""
        with self._lock:
            batch, self._pending = self._pending, {}
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        for iid, pend in batch.items():
            self._store(iid, pend)

    def close(self) -> None:
        """At exit: wait for a write under way, then write what is left."""
        running = self._flushing
        if running is not None and running is not threading.current_thread():
            running.join(timeout=10)
        self.flush()

    def _due(self) -> None:
        self._flushing = threading.current_thread()
        try:
            with self._lock:
                self._timer = None
            self.flush()
        except Exception:
            log.warning("incident repeat counts not written; kept for the next try",
                        exc_info=True)
        finally:
            self._flushing = None

    def _store(self, iid: str, pend: Pending) -> None:
        try:
            self._write(iid, lambda cur: pend.fold(cur) if cur is not None else None)
        except Exception:
            with self._lock:  # keep them: merged into what was counted meanwhile
                again = self._pending.setdefault(iid, Pending())
                again.count += pend.count
                again.last_seen = max(again.last_seen, pend.last_seen)
                for reason, n in pend.rejections.items():
                    again.rejections[reason] = again.rejections.get(reason, 0) + n
                again.gate = again.gate or pend.gate
            raise
