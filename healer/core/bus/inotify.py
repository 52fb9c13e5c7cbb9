"""Linux inotify read directly: the file names that land in a few folders, a read at a time.

watchdog hands every event through four threads (the inotify reader, its dispatcher, the
emitter's delay queue, the observer) and builds several objects for it; at 2,000 result files
a second (four kernel events each: the temp file's creation and close, its rename out and in)
that took a third of the bus process's CPU and kept its worker waiting for the GIL. The bus
needs names only, so one thread blocks on the inotify descriptor and hands the names of a
whole read (up to ``READ_BYTES`` of events: hundreds in a burst) to the bus in one call, which
queues them under one lock.

Watches never follow a symlink (``IN_DONT_FOLLOW``) and take only a folder (``IN_ONLYDIR``).
When the kernel's queue overflows (``IN_Q_OVERFLOW``) events were lost and the callback is
told, so that the bus rescans at once. ``available()`` is False off Linux (the bus falls back
to watchdog there).
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

from healer.core.bus.libc import libc as _libc

log = logging.getLogger(__name__)

IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000
# What brings a file: it appears (created, renamed in) or its writer closes it after writing.
# Not opens, reads (the bus's own), modifications or deletions: half the events, none needed.
MASK = IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR | IN_DONT_FOLLOW
READ_BYTES = 256 * 1024  # a few thousand events per read(2) when they pile up
_HEAD = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)


class FileEvent(NamedTuple):
    """A file name that landed in ``folder``; ``closed``: its writer closed it after writing."""

    folder: str
    name: str
    closed: bool


# (events of one read, whether the kernel dropped events before them)
Deliver = Callable[[list[FileEvent], bool], None]


def available() -> bool:
    lib = _libc()
    return sys.platform.startswith("linux") and lib is not None and \
        hasattr(lib, "inotify_init1")


class DirWatcher:
    """Watches ``folders`` (not recursively) and calls ``deliver`` from its own thread."""

    def __init__(self, folders: Sequence[str], deliver: Deliver):
        libc = _libc()
        if libc is None or not available():
            raise OSError("inotify is not available here")
        self._deliver = deliver
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self._fd = fd
        self._folders: dict[int, str] = {}
        try:
            for folder in folders:
                wd = libc.inotify_add_watch(fd, os.fsencode(folder), MASK)
                if wd < 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"inotify_add_watch {folder}: {os.strerror(err)}")
                self._folders[wd] = folder
            self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        except BaseException:
            os.close(fd)
            raise
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="healer-bus-inotify",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop reading and close the descriptors (events not yet read are dropped: the bus's
        start-up scan finds their files)."""
        if self._closed:
            return
        if self._thread.is_alive():
            os.write(self._wake_w, b"x")
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self._closed = True
            for fd in (self._fd, self._wake_r, self._wake_w):
                os.close(fd)

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            ready = poller.poll()  # blocks without the GIL
            if any(fd == self._wake_r for fd, _ in ready):
                return
            try:
                buf = os.read(self._fd, READ_BYTES)
            except BlockingIOError:
                continue
            except OSError:
                log.exception("bus: reading inotify failed; the rescan still finds files")
                return
            try:
                self._deliver(*self.parse(buf))
            except Exception:  # the reader never dies of one read's handling
                log.exception("bus: handling %d bytes of inotify events failed", len(buf))

    def parse(self, buf: bytes) -> tuple[list[FileEvent], bool]:
        """The file events in ``buf`` (folders' own events and subfolders left out), and
        whether the kernel reported an overflow."""
        events: list[FileEvent] = []
        overflow = False
        folders, head, size = self._folders, _HEAD.unpack_from, _HEAD.size
        off, end = 0, len(buf)
        while off < end:
            wd, mask, _cookie, length = head(buf, off)
            start, off = off + size, off + size + length
            if mask & IN_Q_OVERFLOW:
                overflow = True
            elif mask & IN_IGNORED:
                gone = folders.pop(wd, None)
                if gone is not None:
                    log.warning("bus: %s is no longer watched (removed or unmounted); only "
                                "the rescan looks at it now", gone)
            elif length and not mask & IN_ISDIR and wd in folders:
                name = buf[start:off].rstrip(b"\0")
                events.append(FileEvent(folders[wd], os.fsdecode(name),
                                        bool(mask & IN_CLOSE_WRITE)))
        return events, overflow
