"""The state store: JSON records with revisions, compare-and-set, and small member sets.

Records (sessions, incidents, attempts, applied results, ...) are addressed by ``kind`` and
``key``, both safe names. Every write bumps the record's ``revision``; a write that names the
revision it expects fails with ``ConflictError`` when someone else wrote first, so two
processes (or two nodes, with the JetStream backend) can never both win the same incident.

``FileStore`` keeps one JSON file per record under the state dir::

    <state>/records/<kind>/<key>.json     {"kind", "key", "revision", "updated_at", "data"}
    <state>/locks/<kind>/<key>.lock       filelock guarding compare-and-set
    <state>/sets/<set>/<key>              membership markers (e.g. the active sessions)

Reads take no lock: every write is a rename, so a reader sees the old or the new record,
never half of one.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from healer.core.files import atomic_create_bytes, atomic_write_bytes
from healer.core.names import safe_name
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
        self, kind: str, key: str, data: dict[str, Any], *, expected_revision: int | None = None
    ) -> Record: ...

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

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the file store holds none."""

    def stamp(self, kind: str, key: str) -> object | None:
        """A cheap token that changes whenever the record changes, or None if the backend
        has none (callers then re-read). Lets hot paths cache records safely."""
        return None

    # Shared behaviour built on the primitives above --------------------------------------

    def require(self, kind: str, key: str) -> Record:
        rec = self.get(kind, key)
        if rec is None:
            raise NotFoundError(kind, key)
        return rec

    def create(self, kind: str, key: str, data: dict[str, Any]) -> Record:
        """Create the record; ``ConflictError`` if it already exists."""
        return self.put(kind, key, data, expected_revision=0)

    def update(self, kind: str, key: str, fn: Updater, *, attempts: int = 50) -> Record | None:
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
                    kind, key, new, expected_revision=current.revision if current else 0
                )
            except ConflictError:
                continue
        raise StoreError(f"{kind}/{key}: gave up after {attempts} conflicting updates")

    def list(self, kind: str) -> Iterator[Record]:
        for key in self.keys(kind):
            rec = self.get(kind, key)
            if rec is not None:
                yield rec


class FileStore(Store):
    """Records as JSON files under the state dir, for one machine (many processes)."""

    def __init__(self, root: Path | str, *, clock: Clock = time.time, lock_timeout: float = 30):
        self.root = Path(root)
        self._clock = clock
        self._lock_timeout = lock_timeout
        self._made: set[Path] = set()
        self._paths: dict[tuple[str, str], Path] = {}

    def _dir(self, *parts: str) -> Path:
        path = self.root.joinpath(*parts)
        if path not in self._made:
            path.mkdir(parents=True, exist_ok=True)
            self._made.add(path)
        return path

    def _path(self, kind: str, key: str) -> Path:
        # Memoised: name checks and path joins dominate the cost of a small read.
        path = self._paths.get((kind, key))
        if path is None:
            safe_name(kind, "record kind")
            safe_name(key, "record key")
            path = self._dir("records", kind) / f"{key}.json"
            if len(self._paths) > 100_000:
                self._paths.clear()
            self._paths[(kind, key)] = path
        return path

    def _lock(self, kind: str, key: str) -> FileLock:
        return FileLock(self._dir("locks", kind) / f"{key}.lock", timeout=self._lock_timeout)

    @staticmethod
    def _read(path: Path) -> Record | None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            doc = json.loads(raw)
            return Record(doc["kind"], doc["key"], doc["revision"], doc["data"],
                          doc["updated_at"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{path}: corrupt record ({exc})") from exc

    def _encode(self, kind: str, key: str, revision: int, data: dict[str, Any]) -> Record:
        return Record(kind, key, revision, data, self._clock())

    @staticmethod
    def _bytes(rec: Record) -> bytes:
        doc = {"kind": rec.kind, "key": rec.key, "revision": rec.revision,
               "updated_at": rec.updated_at, "data": rec.data}
        return (json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()

    def get(self, kind: str, key: str) -> Record | None:
        return self._read(self._path(kind, key))

    def stamp(self, kind: str, key: str) -> object | None:
        # Every write renames a new file into place, so the inode changes with each revision.
        try:
            st = os.stat(self._path(kind, key))
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def put(
        self, kind: str, key: str, data: dict[str, Any], *, expected_revision: int | None = None
    ) -> Record:
        path = self._path(kind, key)
        if not isinstance(data, dict):
            raise TypeError("record data must be a dict")
        if expected_revision == 0:
            # Create-only needs no lock: link(2) refuses an existing target atomically.
            rec = self._encode(kind, key, 1, data)
            if not atomic_create_bytes(path, self._bytes(rec)):
                current = self._read(path)
                raise ConflictError(kind, key, 0, current.revision if current else None)
            return rec
        try:
            with self._lock(kind, key):
                current = self._read(path)
                actual = current.revision if current else 0
                if expected_revision is not None and expected_revision != actual:
                    raise ConflictError(kind, key, expected_revision, actual or None)
                rec = self._encode(kind, key, actual + 1, data)
                atomic_write_bytes(path, self._bytes(rec))
                return rec
        except Timeout as exc:
            raise StoreError(f"{kind}/{key}: lock not acquired in {self._lock_timeout}s") from exc

    def delete(self, kind: str, key: str, *, expected_revision: int | None = None) -> bool:
        path = self._path(kind, key)
        with self._lock(kind, key):
            current = self._read(path)
            if current is None:
                return False
            if expected_revision is not None and expected_revision != current.revision:
                raise ConflictError(kind, key, expected_revision, current.revision)
            path.unlink()
            return True

    def keys(self, kind: str) -> list[str]:
        safe_name(kind, "record kind")
        folder = self.root / "records" / kind
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        return sorted(n[:-5] for n in names if n.endswith(".json") and not n.startswith("."))

    def add_member(self, set_name: str, key: str) -> None:
        safe_name(set_name, "set name")
        marker = self._dir("sets", set_name) / safe_name(key, "member")
        if not marker.exists():
            marker.touch()

    def remove_member(self, set_name: str, key: str) -> None:
        safe_name(set_name, "set name")
        with contextlib.suppress(FileNotFoundError):
            (self.root / "sets" / set_name / safe_name(key, "member")).unlink()

    def members(self, set_name: str) -> list[str]:
        safe_name(set_name, "set name")
        try:
            return sorted(n for n in os.listdir(self.root / "sets" / set_name)
                          if not n.startswith("."))
        except FileNotFoundError:
            return []


def open_store(settings: Any) -> Store:
    """The store the settings ask for."""
    backend = settings.store.backend
    if backend == "file":
        return FileStore(settings.state_path)
    if backend == "jetstream":
        from healer.core.jetstream import JetStreamStore

        return JetStreamStore.connect(settings)
    raise StoreError(f"unknown store backend {backend!r}")
