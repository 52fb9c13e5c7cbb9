"""Checking one result file for the results bus, and waiting for files still being written.

``check_file`` opens a candidate without following links, refuses what is not a plain file of
its own (symlinks, FIFOs, hard links to files elsewhere), reads at most ``max_file_bytes``,
parses it with ``healer.core.strict_json`` (no NaN, no 1e400, no lone surrogates …), checks
``schemas/agent-result.schema.json`` and that the content agrees with the name. It raises
``RejectedFile`` for a file that can never become valid, and ``Incomplete`` for one that ends
before its document does — a writer may still be adding to it.

``PartialFiles`` decides how long an incomplete file is waited for:

- while its size or mtime keeps changing, or its writer still holds it open (the bus hears
  inotify's close-after-write), it is waited for — at most ``max_wait_s`` in all;
- once the writer has closed it and it has not changed for ``settle_s``, it is rejected
  ("incomplete: the writer stopped after N bytes for S s");
- after ``max_wait_s`` (since the bus first saw it, or since its last change: a partial file
  left from before a restart goes at once) it is rejected either way — as incomplete when it
  has not changed for ``settle_s`` (a writer that hangs with the file open), otherwise as
  "still being written after D s".

Where no close events arrive (no inotify, or a file found by a rescan), an incomplete file is
waited for until it has been unchanged for ``max_wait_s``.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.core.schemas import errors as schema_errors
from healer.core.strict_json import StrictJSONError, loads_strict
from healer.errors import RejectedFile

RESULT_NAME = re.compile(
    r"heal-(?P<kind>[a-z0-9_]{1,32})-(?P<target>[A-Za-z0-9][A-Za-z0-9._-]{0,127})"
    r"-(?P<epoch>\d{9,13})\.json"
)
_CLOSED_KEPT = 4096  # close events remembered (files written in place are few)


@dataclass(frozen=True)
class Checked:
    """A valid result file: what its name and its content say."""

    id: str
    kind: str
    target: str
    epoch: int
    data: dict[str, Any]
    ino: int = 0  # the file checked: a file put in its place later is not this one


class Incomplete(Exception):
    """The file ends before its JSON document does; its writer may not have finished."""

    def __init__(self, detail: str, *, size: int, signature: tuple[int, int, int],
                 mtime: float):
        super().__init__(detail)
        self.detail = detail
        self.size = size
        self.signature = signature  # (inode, size, mtime_ns): any change means "still written"
        self.mtime = mtime
        self.mtime_ns = signature[2]


class LinkInProgress(Exception):
    """A hard link made moments ago (link-then-unlink writers pass through one): look again."""


def check_file(path: str | Path, *, max_file_bytes: int, max_json_depth: int, settle_s: float,
               clock: Callable[[], float] = time.time, name: str | None = None) -> Checked:
    """Check one result file (``name``: its name, when the caller has it); ``RejectedFile``,
    ``Incomplete`` or ``LinkInProgress`` if not valid (``FileNotFoundError`` if it
    vanished)."""
    if name is None:
        name = os.path.basename(path)
    m = RESULT_NAME.fullmatch(name)
    if not m:
        raise RejectedFile("name is not heal-<kind>-<target>-<epoch>.json")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if os.path.islink(path):
            raise RejectedFile("is a symlink") from exc
        raise RejectedFile(f"cannot open: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RejectedFile("not a regular file")
        if st.st_nlink > 1:
            # Another name shares this file, perhaps outside the results dir: its content is
            # not the agent's to hand over. A link made just now may be a writer's
            # link-then-unlink; it gets settle_s to drop back to one name.
            if clock() - st.st_ctime < settle_s:
                raise LinkInProgress
            raise RejectedFile(f"is a hard link ({st.st_nlink} names share the file; "
                               "results must be files of their own)")
        if st.st_size > max_file_bytes:
            raise RejectedFile(f"larger than {max_file_bytes} bytes ({st.st_size})")
        raw = _read_all(fd, st.st_size, max_file_bytes)
        if len(raw) > max_file_bytes:
            raise RejectedFile(f"larger than {max_file_bytes} bytes")
    finally:
        os.close(fd)
    signature = (st.st_ino, len(raw), st.st_mtime_ns)
    if not raw.strip():
        raise Incomplete("empty file", size=len(raw), signature=signature, mtime=st.st_mtime)
    try:
        data = loads_strict(raw, max_json_depth)
    except StrictJSONError as exc:
        if exc.truncated:
            raise Incomplete(exc.reason, size=len(raw), signature=signature,
                             mtime=st.st_mtime) from exc
        raise RejectedFile(exc.reason) from exc
    problems = schema_errors("agent-result", data)  # its fast yes first, jsonschema if unsure
    if problems:
        key, message = problems[0]
        raise RejectedFile(f"schema: {key + ': ' if key else ''}{message}"[:2000])
    if data["kind"] != m["kind"] or data["target"] != m["target"]:
        raise RejectedFile(
            f"name says {m['kind']}/{m['target']} but content says "
            f"{data['kind']}/{data['target']}"
        )
    digest = hashlib.sha256(name.encode() + b"\0" + raw).hexdigest()[:32]
    return Checked(id=digest, kind=m["kind"], target=m["target"], epoch=int(m["epoch"]),
                   data=data, ino=st.st_ino)


def _read_all(fd: int, size: int, max_file_bytes: int) -> bytes:
    """The file's bytes, at most ``max_file_bytes + 1``. One read of the size fstat gave, plus
    one byte: a regular file's read comes back short only at its end, so a full read means
    it grew meanwhile and the rest is read too. (Not one read of the limit: that allocates
    and frees a buffer of ``max_file_bytes`` for every file.)"""
    want = min(size, max_file_bytes) + 1
    raw = os.read(fd, want)
    if len(raw) < want:
        return raw
    chunks, total = [raw], len(raw)
    while total <= max_file_bytes:
        more = os.read(fd, max_file_bytes + 1 - total)
        if not more:
            break
        chunks.append(more)
        total += len(more)
    return b"".join(chunks)


def warm_up() -> None:
    """Build the result schema's validator now (its first use imports jsonschema: ~1 s)."""
    schema_errors("agent-result", {})


@dataclass
class _Partial:
    first_seen: float  # monotonic
    changed_at: float  # monotonic time of the last change (from the file's mtime)
    signature: tuple[int, int, int]


class PartialFiles:
    """Incomplete result files being waited for, and when each one's writer closed it."""

    def __init__(self, *, settle_s: float, max_wait_s: float,
                 clock: Callable[[], float] = time.time):
        self.settle_s = settle_s
        self.max_wait_s = max(max_wait_s, settle_s)
        self._clock = clock
        self._partials: dict[str, _Partial] = {}  # by path
        self._closed: dict[str, int] = {}  # path → time.time_ns() of the close event
        self._lock = threading.Lock()

    def closed(self, path: str) -> None:
        """The writer of ``path`` closed it after writing (inotify IN_CLOSE_WRITE)."""
        with self._lock:
            self._closed.pop(path, None)
            self._closed[path] = time.time_ns()
            while len(self._closed) > _CLOSED_KEPT:
                del self._closed[next(iter(self._closed))]

    def forget(self, path: str) -> None:
        with self._lock:
            self._partials.pop(path, None)
            self._closed.pop(path, None)

    def waiting(self) -> dict[str, float]:
        """Name → seconds waited, for every incomplete file still being waited for."""
        now = time.monotonic()
        with self._lock:
            return {os.path.basename(p): round(now - w.first_seen, 1)
                    for p, w in self._partials.items()}

    def verdict(self, path: str, inc: Incomplete) -> str | None:
        """None to keep waiting for ``path``; otherwise the reason to reject it."""
        now = time.monotonic()
        age = max(0.0, self._clock() - inc.mtime)
        with self._lock:
            w = self._partials.get(path)
            if w is None or w.signature != inc.signature:
                w = _Partial(first_seen=w.first_seen if w else now, changed_at=now - age,
                             signature=inc.signature)
                self._partials[path] = w
            closed_ns = self._closed.get(path)
        idle, waited = now - w.changed_at, now - w.first_seen
        writer_done = closed_ns is not None and closed_ns >= inc.mtime_ns
        overdue = max(idle, waited) >= self.max_wait_s
        if idle >= self.settle_s and (writer_done or overdue):
            how = "closed it" if writer_done else "left it"
            return (f"incomplete: the writer stopped after {inc.size} bytes for {idle:.1f} s "
                    f"({how} unfinished: {inc.detail})")
        if overdue:
            return (f"still being written after {waited:.1f} s ({inc.size} bytes so far; "
                    f"bus.max_wait_s is {self.max_wait_s:g}): {inc.detail}")
        return None
