"""Applying agent results exactly once, also across ``kill -9``, and handing them on.

1. the result's id is the sha256 of its file's name and bytes (``healer.core.bus.validate``);
2. a marker ``sets/results-pending/<id>`` is made, then the ledger record ``results/<id>`` is
   *created* (create-only: a second creation of the same id fails atomically) — this creation
   is the application;
3. subscribers are called with the result; they get ``result.id`` so their own state changes
   can be idempotent;
4. the marker is removed (and the watcher moves the file to ``applied/``).

A crash before 2 leaves the file to be seen again; a crash after 2 finds the ledger record, so
the file is only moved; a crash during 3 leaves the marker, and start-up delivers the ledger
record to the subscribers again.

A batch of results (what the watcher found ready at once) is one group commit. One marker
``batch-<key>`` and the batch's own journal record ``results-journal/<key>`` (all its records:
what a crash of this process during delivery needs to deliver them again) come first; then
each record is created (create-only, as above) and the subscribers are called — none of it
flushed to disk one by one. ``settle`` then makes one or more applied batches durable with one
journal record holding every record they created (its fsync and its folder's: two per round,
however many batches and results), and removes their markers; only then do the files move.

The results bus (``dispatch_batch``) delivers a batch at once and leaves ``settle`` to its
mover thread: a record is visible to every process, and survives a crash of this one, the
moment it is created, so a slow disk delays only the files' move, never the subscribers.
What a power loss can do before ``settle`` returns: the batch's files are still in the
results dir, so the next start applies again what left no ledger record and delivers it
again; a record that reached the disk without its journal is a duplicate there, delivered
before the power loss. Either way each result has one ledger record, and subscribers (which
key their changes on ``result.id``) may see it twice — as after a crash during 3.
(``apply_results`` does both steps before it returns.)

The ledger records reach the disk with the kernel's writeback (``vm.dirty_expire``, 30 s by
default); a power loss before that may take some, so start-up (``recover``) puts back every
record of the journal that is missing or unreadable and delivers it again, and delivers again
the records a batch whose marker survived created. A journal record older than
``JOURNAL_KEEP_S`` has long been written back and is pruned.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from healer.core.store.base import Store
from healer.errors import ConflictError, StoreError

log = logging.getLogger(__name__)

LEDGER = "results"
PENDING = "results-pending"
JOURNAL = "results-journal"
BATCH_MARK = "batch-"  # a pending-set member for a whole batch (result ids are hex)
JOURNAL_KEEP_S = 120.0  # 4x the kernel's dirty-page expiry (30 s): the records are on disk


@dataclass(frozen=True)
class AgentResult:
    """One applied agent result."""

    id: str
    name: str
    kind: str
    target: str
    epoch: int
    data: dict[str, Any]
    received_at: float

    @property
    def status(self) -> str:
        return str(self.data.get("status", ""))

    @property
    def incident(self) -> str:
        return str(self.data.get("incident", ""))


Subscriber = Callable[[AgentResult], None]


@dataclass(frozen=True)
class Applied:
    """A batch applied and delivered, to be made durable (``Ledger.settle``): its pending
    mark, and the ledger records it created, for one journal record (none from
    ``apply_result``, whose one record is flushed itself)."""

    mark: str
    records: dict[str, dict[str, Any]]


@dataclass
class BusStats:
    applied: int = 0
    duplicates: int = 0
    rejected: int = 0
    subscriber_errors: int = 0
    seeds: int = 0
    waits: int = 0  # looks at an incomplete file that left it waiting for its writer
    commits: int = 0  # rounds of durable ledger writes (one journal record, two fsyncs)
    last_rejections: list[tuple[str, str]] = field(default_factory=list)


class Ledger:
    """The exactly-once half of the results bus: apply a result once, then its subscribers."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._subs: list[tuple[str | None, Subscriber]] = []
        self._file_subs: list[tuple[Subscriber, Callable[[str, str], None]]] = []
        self.stats = BusStats()
        # Results this process is delivering; a shared store gives each node its own set.
        self.pending_set = PENDING

    def subscribe(self, fn: Subscriber, kind: str | None = None) -> None:
        """Call ``fn`` for every applied result (of ``kind``, if given)."""
        self._subs.append((kind, fn))

    def watch_files(self, landed: Subscriber, rejected: Callable[[str, str], None]) -> None:
        """Hear about the result files this process's watcher handles: ``landed(result)`` for
        each valid one once it is handed on (applied here, or published for another node to
        apply), ``rejected(name, reason)`` for each it sets aside."""
        self._file_subs.append((landed, rejected))

    def _file_event(self, result: AgentResult | None, name: str, reason: str = "") -> None:
        for landed, rejected in list(self._file_subs):
            try:
                landed(result) if result is not None else rejected(name, reason)
            except Exception:
                self.stats.subscriber_errors += 1
                log.exception("bus: file subscriber failed on %s", name)

    def dispatch(self, result: AgentResult) -> None:
        """Where a valid result goes: applied here (a shared-bus subclass publishes it)."""
        self.apply_result(result)

    def dispatch_batch(self, results: list[AgentResult]) -> Applied | None:
        """Where a batch of valid results goes: applied here and delivered at once. Returns
        what ``settle`` makes durable before the files may move (None: nothing to wait for)."""
        return self._begin_batch(results)[1] if results else None

    def apply_result(self, result: AgentResult) -> bool:
        """Apply once: create the ledger record, then run the subscribers. False if the
        result was applied before (by this process, an earlier run or another node)."""
        return self.apply_results([result])[0]

    def apply_results(self, results: list[AgentResult]) -> list[bool]:
        """Apply each result once, a batch with one durable write (see the module doc); for
        each result, False if it was applied before. Returns once the batch is on disk."""
        if len(results) == 1:
            applied, pending = self._begin_one(results[0])
        else:
            applied, pending = self._begin_batch(results) if results else ([], None)
        if pending is not None:
            self.settle([pending])
        return applied

    def _begin_batch(self, results: list[AgentResult]) -> tuple[list[bool], Applied]:
        """Apply and deliver ``results``; (which were new, what is left to make durable)."""
        docs = {r.id: _record(r) for r in results}
        key = _batch_key()
        lone = len(results) == 1  # its own id marks it, as ``_begin_one``'s: no journal
        mark = results[0].id if lone else BATCH_MARK + key
        self.store.add_member(self.pending_set, mark)
        if not lone:
            # What a crash of this process during delivery needs to deliver the batch again
            # (a power loss is the business of ``settle``'s journal record). Create-only: the
            # key is new (time, pid, random), so no lock and no read are needed.
            self.store.put(JOURNAL, key, {"at": time.time(), "records": docs},
                           expected_revision=0, durable=False)
        fresh: list[AgentResult] = []
        for result in results:
            try:
                self.store.put(LEDGER, result.id, docs[result.id], expected_revision=0,
                               durable=False)
            except ConflictError:
                self.stats.duplicates += 1
                continue
            fresh.append(result)
        for result in fresh:
            self._deliver(result)
            self.stats.applied += 1
        applied = {id(r) for r in fresh}
        return [id(r) in applied for r in results], Applied(mark, {r.id: docs[r.id] for r in fresh})

    def _begin_one(self, result: AgentResult) -> tuple[list[bool], Applied | None]:
        self.store.add_member(self.pending_set, result.id)
        try:
            self.store.create(LEDGER, result.id, _record(result))  # flushed on its own
        except ConflictError:
            self.store.remove_member(self.pending_set, result.id)
            self.stats.duplicates += 1
            return [False], None
        self._deliver(result)
        self.stats.applied += 1
        return [True], Applied(result.id, {})

    def settle(self, batches: list[Applied]) -> None:
        """Make applied batches durable with one journal record for all of them (one round
        of fsyncs however many batches there are), then drop their pending marks."""
        if not batches:
            return
        records = {rid: doc for b in batches for rid, doc in b.records.items()}
        if records:
            self.store.put(JOURNAL, _batch_key(), {"at": time.time(), "records": records},
                           expected_revision=0)
        # (the writes made so far: this journal record, a lone result's own record)
        self.store.sync()
        self.stats.commits += 1
        for b in batches:
            self.store.remove_member(self.pending_set, b.mark)

    def _deliver(self, result: AgentResult) -> None:
        for kind, fn in list(self._subs):
            if kind is not None and kind != result.kind:
                continue
            try:
                fn(result)
            except Exception:
                self.stats.subscriber_errors += 1
                log.exception("bus: subscriber %r failed on %s", fn, result.name)

    def recover(self) -> None:
        """Put back ledger records a power loss took (from the journal), and deliver those
        and the ones whose delivery a crash interrupted."""
        self._replay_journal()
        for rid in self.store.members(self.pending_set):
            if rid.startswith(BATCH_MARK):
                continue
            rec = self.store.get(LEDGER, rid)
            if rec is not None:
                d = rec.data
                log.info("bus: re-delivering %s after an interrupted run", d["name"])
                self._deliver(_result(rid, d))
            self.store.remove_member(self.pending_set, rid)

    def _replay_journal(self) -> None:
        marks = {m for m in self.store.members(self.pending_set) if m.startswith(BATCH_MARK)}
        delivered: set[str] = set()  # a record is in its batch's journal and its round's
        for key in self.store.keys(JOURNAL):
            try:
                batch = self.store.get(JOURNAL, key)
            except StoreError:  # a batch's own record a power loss left empty: the round's
                continue        # journal record (or the results dir) has its records
            if batch is None:
                continue
            interrupted = BATCH_MARK + key in marks
            for rid, doc in batch.data["records"].items():
                if rid in delivered:
                    continue
                try:
                    current = self.store.get(LEDGER, rid)
                except StoreError:  # a record whose content the crash did not write
                    current = None
                if current is None:
                    log.warning("bus: ledger record of %s missing after a crash; put back "
                                "from the journal and delivered again", doc["name"])
                    self.store.put(LEDGER, rid, doc)
                elif not (interrupted and current.data == doc):
                    continue  # delivered, or applied by an earlier batch (a duplicate)
                delivered.add(rid)
                self._deliver(_result(rid, doc))
            if interrupted:
                self.store.remove_member(self.pending_set, BATCH_MARK + key)
        for mark in marks:  # a batch that crashed before its journal record: nothing applied
            self.store.remove_member(self.pending_set, mark)
        self.prune_journal()

    def prune_journal(self, now: float | None = None) -> int:
        """Drop journal records older than ``JOURNAL_KEEP_S`` (their ledger records are on
        disk by then); how many went."""
        oldest_kept = int(((time.time() if now is None else now) - JOURNAL_KEEP_S) * 1e9)
        gone = 0
        for key in self.store.keys(JOURNAL):
            written_ns = key.split("-", 1)[0]  # the key starts with its time (_batch_key)
            if written_ns.isdigit() and int(written_ns) < oldest_kept:
                gone += self.store.delete(JOURNAL, key)
        return gone


def _record(result: AgentResult) -> dict[str, Any]:
    return {"name": result.name, "kind": result.kind, "target": result.target,
            "epoch": result.epoch, "received_at": result.received_at, "data": result.data}


def _result(rid: str, doc: dict[str, Any]) -> AgentResult:
    return AgentResult(id=rid, name=doc["name"], kind=doc["kind"], target=doc["target"],
                       epoch=doc["epoch"], data=doc["data"], received_at=doc["received_at"])


def _batch_key() -> str:
    return f"{time.time_ns()}-{os.getpid()}-{secrets.token_hex(4)}"
