"""Records read on a hot path, parsed again only when they changed.

Every ``report_error`` asks whether a silence covers it and whether its fingerprint's newest
attempt is a merged fix still watched: records that are usually absent (no silence, no
attempt yet) or the same for many reports in a row. Reading them afresh cost an ``open`` and
a JSON parse each time; ``StampedRecords`` costs one ``stat`` instead.

The store's ``stamp`` (for the file store: the inode, mtime and size of the very file; every
write renames a new file into place) is taken before each use: any write, by this process or
another, changes it, and the record is read again (with the stamp of exactly that version,
``get_stamped``). So a reader never sees an older version than a plain ``get`` would: no
window, no staleness. A store that keeps no stamps is simply read every time.

What ``get`` returns is shared with later calls: callers read it, never change it.
"""

from __future__ import annotations

import threading
from typing import Any

from healer.core.store import Store

MAX_CACHED = 1024


class StampedRecords:
    """The records of one kind, each re-read only when its stamp changed. Thread-safe."""

    def __init__(self, store: Store, kind: str):
        self.store = store
        self.kind = kind
        self._stamps = type(store).stamp is not Store.stamp
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[object, dict[str, Any]]] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        """The record's data as stored now (not to be changed), or None when absent."""
        if not self._stamps:
            rec = self.store.get(self.kind, key)
            return rec.data if rec else None
        stamp = self.store.stamp(self.kind, key)
        if stamp is None:
            return None  # absent: one failed stat, no open, nothing to parse
        hit = self._seen.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        rec, stamp = self.store.get_stamped(self.kind, key)
        if rec is None:
            return None
        if stamp is not None:
            with self._lock:
                if len(self._seen) >= MAX_CACHED:
                    self._seen.clear()
                self._seen[key] = (stamp, rec.data)
        return rec.data
