"""``FileStore``: one JSON file per record under the state dir, for one machine.

::

    <state>/records/<kind>/<key>.json     {"kind", "key", "revision", "updated_at", "data"}
    <state>/locks/<kind>/<key>.lock       filelock guarding compare-and-set
    <state>/sets/<set>/<key>              membership markers (e.g. the active sessions):
                                          hard links to the set's empty ``.member`` file

Reads take no lock: every write is a rename, so a reader sees the old or the new record,
never half of one. Durable writes are group-committed (``healer.core.store.commit``): the
record is visible when ``put`` returns; its fsyncs (file and folder) are batched by the
process's one flusher. ``sync="always"`` (setting ``store.sync``) waits for the batch in every
``put``; ``"batched"`` (the default) does not, and ``sync()`` waits for everything so far.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from healer.core.files import atomic_create_bytes, atomic_write_bytes
from healer.core.names import safe_name
from healer.core.store.base import Clock, Record, Store
from healer.core.store.commit import SYNC_MODES, GroupCommit, process_commit
from healer.errors import ConflictError, StoreError

# One encoder for every record (json.dumps with options makes a new one per call).
_encode = json.JSONEncoder(sort_keys=True, ensure_ascii=False).encode
SHARED_MARKER = ".member"  # what a set's markers are hard links to (names never start with .)


class FileStore(Store):
    """Records as JSON files under the state dir, for one machine (many processes)."""

    def __init__(self, root: Path | str, *, clock: Clock = time.time, lock_timeout: float = 30,
                 sync: str = "batched", commit: GroupCommit | None = None):
        if sync not in SYNC_MODES:
            raise StoreError(f"store.sync must be one of {', '.join(SYNC_MODES)}, got {sync!r}")
        self.root = Path(root)
        self._clock = clock
        self._lock_timeout = lock_timeout
        self.sync_mode = sync
        self.commit = commit or process_commit()
        self._made: dict[tuple[str, ...], str] = {}
        self._paths: dict[tuple[str, str], str] = {}
        self._shared: set[str] = set()  # sets' .member files known to be plain files

    # Paths are plain strings, memoised: name checks and pathlib joins cost more than the
    # small reads and writes they lead to.
    def _dir(self, *parts: str) -> str:
        path = self._made.get(parts)
        if path is None:
            path = os.path.join(self.root, *parts)
            os.makedirs(path, exist_ok=True)
            self._made[parts] = path
        return path

    def _path(self, kind: str, key: str) -> str:
        path = self._paths.get((kind, key))
        if path is None:
            folder = self._made_folder("records", kind, "record kind")
            path = f"{folder}/{safe_name(key, 'record key')}.json"
            if len(self._paths) > 100_000:
                self._paths.clear()
            self._paths[(kind, key)] = path
        return path

    def _made_folder(self, area: str, name: str, what: str) -> str:
        """``<root>/<area>/<name>``, made if missing; the name checked when first made."""
        return self._made.get((area, name)) or self._dir(area, safe_name(name, what))

    def _folder(self, area: str, name: str, what: str) -> str:
        """``<root>/<area>/<name>`` (``records`` and a kind, ``sets`` and a set), the name
        checked; nothing is created."""
        return self._made.get((area, name)) or os.path.join(self.root, area,
                                                           safe_name(name, what))

    def _lock(self, kind: str, key: str) -> FileLock:
        return FileLock(os.path.join(self._dir("locks", kind), f"{key}.lock"),
                        timeout=self._lock_timeout)

    @staticmethod
    def _read(path: str) -> Record | None:
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
        except FileNotFoundError:
            return None
        return FileStore._decode(path, raw)

    @staticmethod
    def _decode(path: str, raw: bytes) -> Record:
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
        # One line, no indent: json's C encoder runs only without one (5-10x faster on the
        # hot write path); `jq .` reads it as well.
        return (_encode(doc) + "\n").encode()

    def get(self, kind: str, key: str) -> Record | None:
        return self._read(self._path(kind, key))

    def stamp(self, kind: str, key: str) -> object | None:
        # Every write renames a new file into place, so the inode changes with each revision.
        try:
            st = os.stat(self._path(kind, key))
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def get_stamped(self, kind: str, key: str) -> tuple[Record | None, object | None]:
        # One open file: its fstat names the very inode whose bytes were read (a write
        # renames a new inode into place, so no later write can change what this stamp names).
        path = self._path(kind, key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None, None
        except OSError as exc:  # a symlink in its place (ELOOP): healer made none
            raise StoreError(f"{path}: not a record file ({exc.strerror})") from exc
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            raw = fh.read()
        return self._decode(path, raw), (st.st_ino, st.st_mtime_ns, st.st_size)

    def put(
        self, kind: str, key: str, data: dict[str, Any], *, expected_revision: int | None = None,
        durable: bool = True,
    ) -> Record:
        path = self._path(kind, key)
        if not isinstance(data, dict):
            raise TypeError("record data must be a dict")
        if expected_revision == 0:
            # Create-only needs no lock: link(2) refuses an existing target atomically.
            rec = self._encode(kind, key, 1, data)
            if not atomic_create_bytes(path, self._bytes(rec), durable=False):
                current = self._read(path)
                raise ConflictError(kind, key, 0, current.revision if current else None)
            return self._committed(path, rec, durable)
        try:
            with self._lock(kind, key):
                try:
                    current = self._read(path)
                except StoreError:
                    if expected_revision is not None:
                        raise
                    current = None  # a blind write replaces what a crash left unreadable
                actual = current.revision if current else 0
                if expected_revision is not None and expected_revision != actual:
                    raise ConflictError(kind, key, expected_revision, actual or None)
                rec = self._encode(kind, key, actual + 1, data)
                atomic_write_bytes(path, self._bytes(rec), durable=False)
        except Timeout as exc:
            raise StoreError(f"{kind}/{key}: lock not acquired in {self._lock_timeout}s") from exc
        return self._committed(path, rec, durable)  # the wait, if any, outside the lock

    def _committed(self, path: str, rec: Record, durable: bool) -> Record:
        """Hand a durable write to the group commit (and wait for it under ``always``)."""
        if durable:
            ticket = self.commit.written(path)
            if self.sync_mode == "always":
                self.commit.wait(ticket)
        return rec

    @property
    def writes_wait(self) -> bool:
        return self.sync_mode == "always"

    def sync(self) -> None:
        """Block until every durable write this process made is on disk."""
        self.commit.sync()

    def delete(self, kind: str, key: str, *, expected_revision: int | None = None) -> bool:
        path = self._path(kind, key)
        with self._lock(kind, key):
            current = self._read(path)
            if current is None:
                return False
            if expected_revision is not None and expected_revision != current.revision:
                raise ConflictError(kind, key, expected_revision, current.revision)
            os.unlink(path)
            return True

    def keys(self, kind: str) -> list[str]:
        folder = self._folder("records", kind, "record kind")
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        return sorted(n[:-5] for n in names if n.endswith(".json") and not n.startswith("."))

    def add_member(self, set_name: str, key: str) -> None:
        folder = self._made_folder("sets", set_name, "set name")
        marker = os.path.join(folder, safe_name(key, "member"))
        # A marker is a hard link to the set's one empty ``.member`` file, not a file of its
        # own: link(2) allocates no inode. A set whose members come and go (sessions start
        # and finish) leaves many freshly freed inodes behind, and ext4 skips those one by
        # one when it allocates the next (measured: 150 µs of kernel time per new marker).
        shared = self._shared_marker(folder)
        try:
            os.link(shared, marker)
            return
        except FileExistsError:
            pass  # already a member, or something else in its place: checked below
        except FileNotFoundError:
            self._shared.discard(shared)  # removed meanwhile: made again next time
        except OSError as exc:
            if exc.errno != errno.EMLINK:  # EMLINK: the shared file has all the links it may
                raise StoreError(f"{marker}: cannot mark a member ({exc.strerror})") from exc
        # A file of its own then; one open(2), no stat first; O_NOFOLLOW: a symlink planted
        # as a member is refused.
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(f"{marker}: not a member marker ({exc.strerror})") from exc
        os.close(fd)

    def _shared_marker(self, folder: str) -> str:
        """The set's ``.member`` file the markers link to: made (or checked to be a plain
        file, not a planted symlink) once per process."""
        shared = os.path.join(folder, SHARED_MARKER)
        if shared not in self._shared:
            try:
                fd = os.open(shared, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o644)
            except OSError as exc:
                raise StoreError(f"{shared}: not a marker file ({exc.strerror})") from exc
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise StoreError(f"{shared}: not a marker file")
            finally:
                os.close(fd)
            self._shared.add(shared)
        return shared

    def remove_member(self, set_name: str, key: str) -> None:
        folder = self._folder("sets", set_name, "set name")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, safe_name(key, "member")))

    def members(self, set_name: str) -> list[str]:
        folder = self._folder("sets", set_name, "set name")
        try:
            return sorted(n for n in os.listdir(folder) if not n.startswith("."))
        except FileNotFoundError:
            return []
