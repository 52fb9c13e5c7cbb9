"""Duties: the work that must happen once in a fleet of replicas, each under a fenced lease.

Several ``healer loop`` replicas may share one store (``store.backend: jetstream``). Every
replica receives (HTTP intake, MCP, the bus subscriber: their effects stay once through the
gate and the ledger), but a *duty* — a watcher, a poller, a sweep, the notifier — runs on one
replica only, the one holding the lease ``leases/duty-<name>`` (see docs/ha.md):

1. **Take.** Every replica tries every duty's lease each ``ttl/3``; a free, expired or released
   lease is taken with compare-and-set, so exactly one replica wins it. The owner is
   ``"<node>/<instance>"``, new at every process start.
2. **Renew.** The holder renews every ``ttl/3``. It counts the duty as its own only until
   ``ttl - ttl/3`` after the renewal started (``holds``): a replica that cannot renew (the
   store is gone, the process was paused) stops the duty *before* the lease can expire and
   another replica take it — as client-go's leader election does.
3. **Fence.** The fencing token is the revision of the write that took the lease; it stays
   the same across renewals and grows with every change of holder (a release expires the
   record instead of deleting it, so also the file store's revisions only grow). Before an
   irreversible side effect, ``fence(name)`` re-reads the lease: it returns the token only if
   the record is still the one this replica last wrote. Shared records a duty writes carry
   the token (``fenced_update``): a write with an older token than the record's is refused, so
   a paused leader that wakes up after a takeover cannot overwrite its successor's work.
4. **Release.** A clean stop expires every held lease at once, so a successor takes over on
   its next try, not after ``ttl``.

The clock is wall time (``expires_at`` is compared across machines): replicas' clocks must
agree to well within ``ttl/3`` (NTP does).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from healer.core.lease import KIND, Lease
from healer.core.names import safe_name
from healer.core.store import Store
from healer.errors import ConflictError

log = logging.getLogger(__name__)

PREFIX = "duty-"
FENCE_FIELD = "fence"


def lease_key(name: str) -> str:
    return PREFIX + name


@dataclass
class _Duty:
    name: str
    lease: Lease
    token: int = 0  # revision of the write that took the lease; 0: not ours
    since: float = 0.0
    safe_until: float = 0.0  # our clock: the duty stops at this moment unless renewed


@dataclass
class Duties:
    """The duties of one loop and the leases behind them (``healer.duties``)."""

    store: Store
    owner: str
    ttl_s: float = 9.0
    clock: Callable[[], float] = time.time
    _duties: dict[str, _Duty] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _released: bool = False  # after release() nothing is taken again (a late tick in flight)
    # Gains and the release are logged at INFO once the loop is up (``Leading.started``); a
    # start that fails (a taken port) says why in one line, not which duties it held a moment.
    announce: bool = False

    @property
    def renew_every_s(self) -> float:
        return self.ttl_s / 3

    @property
    def names(self) -> list[str]:
        return list(self._duties)

    def add(self, name: str) -> None:
        """Know duty ``name`` (a safe name); the next ``tick`` tries to take it."""
        safe_name(name, "duty")
        with self._lock:
            if name not in self._duties:
                self._duties[name] = _Duty(name, Lease(self.store, lease_key(name), self.owner,
                                                       self.ttl_s, clock=self.clock))

    def tick(self) -> dict[str, bool]:
        """Take or renew every duty's lease once; returns which duties this replica holds.
        A store error on one duty is logged and leaves that duty to run out (``holds``)."""
        gained = []
        for d in list(self._duties.values()):
            try:
                if self._tick(d):
                    gained.append(f"{d.name} (token {d.token})")
            except Exception as exc:  # the store is down or slow: the safe_until decides
                log.warning("duty %s: could not reach the lease: %s", d.name, exc)
        if gained:
            log.log(logging.INFO if self.announce else logging.DEBUG, "%s now leads: %s",
                    self.owner, ", ".join(gained))
        return {name: self.holds(name) for name in self._duties}

    def _tick(self, d: _Duty) -> bool:
        """Renew or take one lease; True if it was just taken."""
        with self._lock:
            if self._released:
                return False
            started = self.clock()
            if d.token and d.lease.held:
                if d.lease.renew():
                    d.safe_until = started + self.ttl_s - self.renew_every_s
                    return False
                log.warning("duty %s: lost the lease (another replica holds it)", d.name)
                self._forget(d)
                return False
            if d.lease.acquire():
                d.token, d.since = d.lease.revision, started
                d.safe_until = started + self.ttl_s - self.renew_every_s
                return True
            return False

    def _forget(self, d: _Duty) -> None:
        d.token, d.since, d.safe_until = 0, 0.0, 0.0
        d.lease.revision = 0

    def holds(self, name: str) -> bool:
        """Whether this replica leads ``name`` now: lease taken and renewed recently enough
        that no other replica can have taken it."""
        d = self._duties.get(name)
        return bool(d and d.token and self.clock() < d.safe_until)

    def fence(self, name: str) -> int:
        """The fencing token of ``name`` if this replica still holds its lease, re-read from
        the store; ``ConflictError`` if not held, about to expire, or taken by another."""
        with self._lock:
            d = self._duties.get(name)
            if d is None or not self.holds(name):
                raise ConflictError(KIND, lease_key(name), d.token if d else None, None)
            rec = self.store.get(KIND, lease_key(name))
            if rec is None or rec.revision != d.lease.revision or \
                    rec.data.get("owner") != self.owner:
                log.warning("duty %s: the lease moved on; stopping it", name)
                token = d.token
                self._forget(d)
                raise ConflictError(KIND, lease_key(name), token, rec.revision if rec else None)
            return d.token

    def check(self, name: str, token: int) -> None:
        """Refuse (``ConflictError``) unless ``name`` is still held under ``token``: call it
        right before an irreversible side effect of work started under that token."""
        current = self.fence(name)
        if current != token:
            raise ConflictError(KIND, lease_key(name), token, current)

    def release(self) -> None:
        """Give up every held lease at once (a clean stop): the record is expired, not
        deleted, so the next holder's token is still larger than ours. Final: a renewal still
        in flight takes nothing afterwards."""
        with self._lock:
            self._released = True
            for d in self._duties.values():
                if not d.lease.held:
                    continue
                try:
                    rec = self.store.get(KIND, d.lease.name)
                    if rec is not None and rec.data.get("owner") == self.owner:
                        now = self.clock()
                        self.store.put(KIND, d.lease.name,
                                       {**rec.data, "expires_at": now, "released_at": now},
                                       expected_revision=d.lease.revision)
                except Exception as exc:  # they expire by themselves within ttl
                    log.warning("duties: could not release the leases: %s", exc)
                    for rest in self._duties.values():
                        self._forget(rest)
                    return  # the store is away: asking again for each duty only waits longer
                self._forget(d)
        log.log(logging.INFO if self.announce else logging.DEBUG, "%s released its duties",
                self.owner)

    def leaders(self) -> list[dict[str, Any]]:
        """``{duty, owner, since, expires_at, revision, mine}`` for every duty known here or
        with a lease in the store; ``owner`` is None while no replica leads it."""
        return read_leaders(self.store, mine=self.owner, known=self.names, clock=self.clock)


def read_leaders(store: Store, *, mine: str = "", known: list[str] | None = None,
                 clock: Callable[[], float] = time.time) -> list[dict[str, Any]]:
    """Who leads which duty, from the lease records (works without a running loop)."""
    now = clock()
    rows: dict[str, dict[str, Any]] = {
        n: {"duty": n, "owner": None, "since": None, "expires_at": None, "revision": 0,
            "mine": False} for n in known or []}
    for key in store.keys(KIND):
        if not key.startswith(PREFIX):
            continue
        rec = store.get(KIND, key)
        if rec is None:
            continue
        name = key[len(PREFIX):]
        live = float(rec.data.get("expires_at", 0)) > now
        owner = str(rec.data.get("owner", "")) if live else None
        rows[name] = {"duty": name, "owner": owner,
                      "since": rec.data.get("taken_at") if live else None,
                      "expires_at": rec.data.get("expires_at") if live else None,
                      "revision": rec.revision, "mine": bool(live and owner == mine)}
    return [rows[n] for n in sorted(rows)]


def fenced_update(store: Store, kind: str, key: str, fn: Callable[[dict[str, Any] | None],
                  dict[str, Any] | None], *, duty: str, token: int) -> Any:
    """``store.update`` for a shared record a duty writes: the record keeps the highest token
    that wrote it (``fence: {duty: token}``), and a write under an older token — a leader
    that lost the duty and has not noticed yet — raises ``ConflictError``."""
    def guarded(current: dict[str, Any] | None) -> dict[str, Any] | None:
        seen = int(((current or {}).get(FENCE_FIELD) or {}).get(duty, 0))
        if token < seen:
            raise ConflictError(kind, key, token, seen)
        new = fn(current)
        if new is None:
            return None
        return {**new, FENCE_FIELD: {**(new.get(FENCE_FIELD) or {}), duty: token}}

    return store.update(kind, key, guarded)
