"""The Store interface every state backend implements, and the Record it returns.

Records are addressed by ``kind`` and ``key``, both safe names. Every write bumps the record's
``revision``; a write that names the revision it expects fails with ``ConflictError`` when
someone else wrote first. ``update``/``create``/``require``/``list`` are built here on the
backend's primitives, so every backend shares their semantics.
"""

from __future__ import annotations

import abc
import inspect
import json
import logging
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from healer.errors import ConflictError, NotFoundError, StoreError

Clock = Callable[[], float]
Updater = Callable[[dict[str, Any] | None], dict[str, Any] | None]


@dataclass(frozen=True)
class Record:
    kind: str
    key: str
    revision: int
    data: dict[str, Any]
    updated_at: float


class Store(abc.ABC):
    """What every state backend offers. ``expected_revision``: None = don't care,
    0 = the record must not exist yet, N = the record must be at revision N."""

    @abc.abstractmethod
    def get(self, kind: str, key: str) -> Record | None: ...

    @abc.abstractmethod
    def put(
        self, kind: str, key: str, data: dict[str, Any], *, expected_revision: int | None = None,
        durable: bool = True,
    ) -> Record:
        """Write a record, visible to every reader when this returns. ``durable=False``: for
        derived records that can be rebuilt (counters, indexes) a backend may skip the flush to
        disk; atomicity stays. A durable write is on disk when this returns only under
        ``store.sync: always``; otherwise ``sync()`` waits for it."""

    @abc.abstractmethod
    def delete(self, kind: str, key: str, *, expected_revision: int | None = None) -> bool: ...

    @abc.abstractmethod
    def keys(self, kind: str) -> list[str]: ...

    @abc.abstractmethod
    def add_member(self, set_name: str, key: str) -> None: ...

    @abc.abstractmethod
    def remove_member(self, set_name: str, key: str) -> None: ...

    @abc.abstractmethod
    def members(self, set_name: str) -> list[str]: ...

    def close(self) -> None:
        """Release connections (the file store holds none), after the ``on_close`` hooks."""
        self.before_closing()

    def on_close(self, fn: Callable[[], object]) -> None:
        """Call ``fn`` (held weakly if it is a bound method) when the store closes: a ledger
        writes what it gathered while the store can still take it."""
        ref: Callable[[], Callable[[], object] | None] = (
            weakref.WeakMethod(fn) if inspect.ismethod(fn) else lambda: fn)
        hooks = [h for h in self.__dict__.get("_on_close", []) if h() is not None]
        self.__dict__["_on_close"] = [*hooks, ref]

    def before_closing(self) -> None:
        """Run the ``on_close`` hooks once (a failing one is logged, the rest still run)."""
        for ref in self.__dict__.pop("_on_close", []):
            fn = ref()
            if fn is None:
                continue
            try:
                fn()
            except Exception:
                logging.getLogger(__name__).warning("store close hook failed", exc_info=True)

    def sync(self) -> None:  # noqa: B027 - optional hook
        """Block until every durable write this process made survives a power loss. The
        file store batches its fsyncs (``store.sync``); a server-side store has nothing to
        wait for here."""

    @property
    def writes_wait(self) -> bool:
        """Whether a write may wait long (a network round trip, the disk under
        ``store.sync: always``): async callers then run it in a thread, and otherwise on
        their loop (a thread hand-off costs more than the write)."""
        return True

    def stamp(self, kind: str, key: str) -> object | None:
        """A cheap token that changes whenever the record changes, or None if the backend
        has none (callers then re-read). Lets hot paths cache records safely."""
        return None

    def get_stamped(self, kind: str, key: str) -> tuple[Record | None, object | None]:
        """The record and the ``stamp`` of exactly that version (None if the backend has no
        stamps), read as one: a cache filled from it can never pair new data with an old
        stamp or the reverse."""
        return self.get(kind, key), None

    # Shared behaviour built on the primitives above --------------------------------------

    def require(self, kind: str, key: str) -> Record:
        rec = self.get(kind, key)
        if rec is None:
            raise NotFoundError(kind, key)
        return rec

    def create(self, kind: str, key: str, data: dict[str, Any]) -> Record:
        """Create the record; ``ConflictError`` if it already exists."""
        return self.put(kind, key, data, expected_revision=0)

    def update(self, kind: str, key: str, fn: Updater, *, attempts: int = 50,
               durable: bool = True) -> Record | None:
        """Read-modify-write with optimistic concurrency.

        ``fn`` gets the current data (None if absent) and returns the new data, or None to
        leave the record as it is. It may be called more than once, so it must not have side
        effects. Returns the record written (or the unchanged one).
        """
        for _ in range(attempts):
            current = self.get(kind, key)
            new = fn(json.loads(json.dumps(current.data)) if current else None)
            if new is None:
                return current
            try:
                return self.put(
                    kind, key, new, expected_revision=current.revision if current else 0,
                    durable=durable,
                )
            except ConflictError:
                continue
        raise StoreError(f"{kind}/{key}: gave up after {attempts} conflicting updates")

    def list(self, kind: str) -> Iterator[Record]:
        for key in self.keys(kind):
            rec = self.get(kind, key)
            if rec is not None:
                yield rec

    def index_once(self, marker: tuple[str, str], kind: str,
                   add: Callable[[Record], None]) -> None:
        """For an index (a member set) kept up to date with the records of ``kind``: a
        state dir from before the index gets it built once — ``add`` sees every record —
        and ``marker`` notes that it was. A state dir without such records needs none."""
        if self.get(*marker) is None and self.keys(kind):
            for rec in self.list(kind):
                add(rec)
            self.put(*marker, {"at": time.time()})
