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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from healer.core.store.base import Store
from healer.errors import ConflictError

log = logging.getLogger(__name__)

LEDGER = "results"
PENDING = "results-pending"


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


@dataclass
class BusStats:
    applied: int = 0
    duplicates: int = 0
    rejected: int = 0
    subscriber_errors: int = 0
    seeds: int = 0
    waits: int = 0  # looks at an incomplete file that left it waiting for its writer
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

    def apply_result(self, result: AgentResult) -> bool:
        """Apply once: create the ledger record, then run the subscribers. False if the
        result was applied before (by this process, an earlier run or another node)."""
        self.store.add_member(self.pending_set, result.id)
        try:
            self.store.create(LEDGER, result.id, {
                "name": result.name, "kind": result.kind, "target": result.target,
                "epoch": result.epoch, "received_at": result.received_at, "data": result.data,
            })
        except ConflictError:
            self.store.remove_member(self.pending_set, result.id)
            self.stats.duplicates += 1
            return False
        self._deliver(result)
        self.store.remove_member(self.pending_set, result.id)
        self.stats.applied += 1
        return True

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
        """Deliver ledger records whose delivery a crash interrupted."""
        for rid in self.store.members(self.pending_set):
            rec = self.store.get(LEDGER, rid)
            if rec is not None:
                d = rec.data
                log.info("bus: re-delivering %s after an interrupted run", d["name"])
                self._deliver(AgentResult(id=rid, name=d["name"], kind=d["kind"],
                                          target=d["target"], epoch=d["epoch"], data=d["data"],
                                          received_at=d["received_at"]))
            self.store.remove_member(self.pending_set, rid)
