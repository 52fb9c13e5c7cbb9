"""Group commit for the file store: records are visible at once, their fsyncs are batched.

A durable write used to cost two fsyncs on the caller's path (the record file, then its
folder for the rename): milliseconds each on a busy disk, per record. Now:

1. **Visible at once.** The writer writes the temp file and renames (or links) it into place
   as before — any process reading the store sees the new record the moment ``put`` returns,
   and a crash of the *process* loses nothing (the kernel holds the page).
2. **Synced in batches.** The writer hands the path to this process's one ``GroupCommit``
   (``written``) and gets a ticket. One flusher thread waits up to ``window_s`` for more
   writes (not when someone is waiting), then fsyncs every file written meanwhile (once per
   path, however often it was rewritten) and each folder once, and marks every ticket up to
   the batch's last as durable.
3. **Waiting is the caller's choice.** ``wait(ticket)`` / ``sync()`` block until the batch is
   on disk; many threads waiting at once share one round of fsyncs (a leader syncs, the others
   join the next batch). ``FileStore`` waits after each durable write when ``store.sync`` is
   ``always`` and never when it is ``batched``; code that must know its write survived a power
   loss before it goes on (a journal, an exactly-once marker) calls ``store.sync()``.
4. **At exit, after fork.** Pending writes are synced when the interpreter exits; a forked
   child starts with an empty batch and its own flusher (the parent syncs its own writes).

What a power loss (not a process crash) can cost under ``batched``: the writes of the last
batch, ``window_s`` plus one round of fsyncs (a few ms); on a file system that does not order
data before the rename, such a record may be found empty. The paths are reopened
``O_NOFOLLOW``: a symlink planted in a record's place is never followed, and a record
deleted or replaced meanwhile is fine (the newer file is what counts).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path

from healer.errors import StoreError

log = logging.getLogger(__name__)

SYNC_MODES = ("batched", "always")
WINDOW_S = 0.005  # how long a batch gathers writes when nobody waits for it
MAX_BATCH = 512  # a batch this large is synced without waiting out the window
_MISSING = (FileNotFoundError, NotADirectoryError)


class GroupCommit:
    """One flusher: ``written(path)`` registers a renamed-in file, ``wait``/``sync`` block
    until it is on disk. Thread-safe. ``fsync`` is a seam for tests (counts, failures)."""

    def __init__(self, *, window_s: float = WINDOW_S,
                 fsync: Callable[[int], None] | None = None):
        self.window_s = window_s
        self._fsync = fsync
        self.fsyncs = 0  # files and folders synced
        self.batches = 0
        self._reset()
        _LIVE.add(self)

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._files: dict[str, None] = {}
        self._dirs: dict[str, None] = {}
        self._written = 0  # the last ticket handed out
        self._synced = 0  # every ticket up to this one is on disk (or failed: _failed)
        self._failed: deque[tuple[int, int, str]] = deque(maxlen=64)
        self._waiting = 0
        self._thread: threading.Thread | None = None

    def written(self, path: Path | str) -> int:
        """Note a file just renamed into place; returns the ticket ``wait`` takes."""
        path = os.fspath(path)
        with self._cond:
            self._written += 1
            first = not self._files
            self._files[path] = None
            self._dirs[os.path.dirname(path) or "."] = None
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="healer-group-commit",
                                                daemon=True)
                self._thread.start()
            # Wake the flusher only to start a batch or to cut a full one short: waking it on
            # every write would hand the GIL back and forth for nothing.
            if first or len(self._files) >= MAX_BATCH:
                self._cond.notify_all()
            return self._written

    def wait(self, ticket: int, timeout: float | None = None) -> None:
        """Block until the write of ``ticket`` is on disk. ``StoreError`` if its batch could
        not be synced (the disk said no) or ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._waiting += 1
            self._cond.notify_all()  # the flusher need not wait out the window
            try:
                while self._synced < ticket:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise StoreError(f"writes not synced to disk within {timeout}s")
                    self._cond.wait(left)
            finally:
                self._waiting -= 1
            for lo, hi, why in self._failed:
                if lo <= ticket <= hi:
                    raise StoreError(f"a write could not be synced to disk: {why}")

    def sync(self, timeout: float | None = None) -> None:
        """Block until everything written so far is on disk."""
        with self._cond:
            ticket = self._written
        if ticket:
            self.wait(ticket, timeout)

    def pending(self) -> int:
        """Writes not yet on disk."""
        with self._cond:
            return self._written - self._synced

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._files:
                    self._cond.wait()
                deadline = time.monotonic() + self.window_s
                while not self._waiting and len(self._files) < MAX_BATCH:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                files, dirs, upto = self._files, self._dirs, self._written
                self._files, self._dirs = {}, {}
                first = self._synced + 1
            error = self._sync(files, dirs)
            with self._cond:
                if error:
                    self._failed.append((first, upto, error))
                self._synced = upto
                self.batches += 1
                self._cond.notify_all()

    def _sync(self, files: dict[str, None], dirs: dict[str, None]) -> str:
        error = ""
        for path in files:
            error = self._sync_one(path, os.O_RDONLY) or error
        for folder in dirs:
            error = self._sync_one(folder, os.O_RDONLY | os.O_DIRECTORY) or error
        if error:
            log.warning("group commit: %s", error)
        return error

    def _sync_one(self, path: str, flags: int) -> str:
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
        except _MISSING:
            return ""  # deleted or replaced meanwhile: nothing of ours to keep
        except OSError as exc:  # ELOOP: a symlink in its place, healer made none
            return f"{path}: {exc.strerror}"
        try:
            (self._fsync or os.fsync)(fd)
            self.fsyncs += 1
            return ""
        except OSError as exc:
            return f"{path}: {exc.strerror or exc}"
        finally:
            os.close(fd)

    def _forked(self) -> None:
        self._reset()


_LIVE: weakref.WeakSet[GroupCommit] = weakref.WeakSet()
_PROCESS: GroupCommit | None = None
_PROCESS_LOCK = threading.Lock()


def process_commit() -> GroupCommit:
    """This process's flusher, shared by every ``FileStore`` (one per process)."""
    global _PROCESS
    with _PROCESS_LOCK:
        if _PROCESS is None:
            _PROCESS = GroupCommit()
        return _PROCESS


def _after_fork() -> None:
    global _PROCESS_LOCK
    _PROCESS_LOCK = threading.Lock()
    for commit in list(_LIVE):
        commit._forked()


@atexit.register
def _sync_all() -> None:
    for commit in list(_LIVE):
        with contextlib.suppress(Exception):
            commit.sync(timeout=30)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
