"""The bus's watcher where inotify cannot be read directly (not Linux, or no watch left).

watchdog (kqueue, FSEvents, polling …) turned into the same calls as
``healer.core.bus.inotify.DirWatcher``: ``deliver([FileEvent], overflow=False)``, one event at
a time — slower, but only the fallback.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from healer.core.bus.inotify import Deliver, FileEvent

# What brings a file: it appears (created, renamed in) or its writer closes it after writing.
WATCHED: list[type[FileSystemEvent]] = [FileCreatedEvent, FileMovedEvent, FileClosedEvent]


def _no_move_pairing_delay() -> None:
    """Stop watchdog holding renames for half a second.

    watchdog keeps every IN_MOVED_FROM for 0.5 s to pair it with its IN_MOVED_TO, and its
    consumer sleeps through that delay even when the pair is matched at once — so each
    temp-file-then-rename write, which is how agents are told to write results, would reach
    the bus half a second late and serialise at two per second. The bus needs only the
    destination (an unpaired IN_MOVED_TO arrives as a created event), so pairing is moot here.
    """
    try:
        from watchdog.observers.inotify_move_event_grouper import InotifyMoveEventGrouper
    except ImportError:  # not Linux, or a watchdog without the grouper
        return
    InotifyMoveEventGrouper.delay = 0.0


class WatchdogWatcher:
    """Watches ``folders`` (not recursively) with a watchdog observer."""

    def __init__(self, folders: Sequence[str], deliver: Deliver):
        _no_move_pairing_delay()
        handler = _Handler(deliver)
        self._observer = Observer()
        for folder in folders:
            self._observer.schedule(handler, folder, recursive=False, event_filter=WATCHED)
        self._observer.daemon = True

    def start(self) -> None:
        self._observer.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._observer.stop()
        self._observer.join(timeout)


class _Handler(FileSystemEventHandler):
    def __init__(self, deliver: Deliver):
        self.deliver = deliver

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type in ("deleted", "opened", "closed_no_write"):
            return
        target = getattr(event, "dest_path", "") or event.src_path
        if isinstance(target, bytes):
            target = os.fsdecode(target)
        folder, name = os.path.split(target)
        self.deliver([FileEvent(folder, name, event.event_type == "closed")], False)
