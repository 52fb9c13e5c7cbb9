"""When a play last made progress: a commit, a PR comment, a log line of one of its pods.

Stale progress (alert A3) fires when ``now - last(store, play)`` passes
``kube.stale_progress_s`` for a play that still has running work. Everything that sees a play
move calls ``note``: the Kubernetes log follower for each line of a play's pod, the GitHub
watcher for commits and comments.

Writes are coalesced: a play's record (``play-progress/<play_id>``) is written at most once
per ``COALESCE_S`` by one process; the newer times in between are kept in memory, and
``last`` returns the newest of the two, so a reader in the same process never sees a stale
value and a reader in another process sees one at most ``COALESCE_S`` old. A record keeps the
latest time per source kind (``log``, ``commit``, ``comment`` …, the part of ``source`` before
the first ``:``) for ``healer status``.

Both functions are synchronous and cheap (no I/O for a coalesced note); call them from a
thread or from the asyncio loop alike.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from healer.core.names import safe_name
from healer.core.store import Store

KIND = "play-progress"
COALESCE_S = 5.0
MAX_TRACKED = 10_000  # plays held in memory per process (least recently noted evicted)
MAX_SOURCES = 16  # source kinds kept in a record

_lock = threading.Lock()
# (id(store), play_id) → [newest time noted, when it was last written (monotonic), source]
_pending: OrderedDict[tuple[int, str], list[Any]] = OrderedDict()


def _source_kind(source: str) -> str:
    head = (source or "other").split(":", 1)[0].strip()[:32]
    return head or "other"


def note(store: Store, play_id: str, source: str, at: float) -> None:
    """``play_id`` made progress at ``at`` (epoch seconds), seen by ``source`` (``log:pod/cto/x``,
    ``commit:owner/repo@sha`` …). Older than what is known: nothing happens."""
    safe_name(play_id, "play_id")
    key = (id(store), play_id)
    now = time.monotonic()
    with _lock:
        entry = _pending.get(key)
        if entry is None:
            entry = [0.0, float("-inf"), ""]
            _pending[key] = entry
            while len(_pending) > MAX_TRACKED:
                _pending.popitem(last=False)
        _pending.move_to_end(key)
        if at <= entry[0]:
            return
        entry[0], entry[2] = float(at), source
        if now - entry[1] < COALESCE_S:
            return  # written recently: memory holds the newer time until the next write
        entry[1] = now
        newest, src = entry[0], entry[2]
    _write(store, play_id, newest, src)


def flush(store: Store) -> None:
    """Write every coalesced time of ``store`` (on stop, and in tests)."""
    with _lock:
        due = [(pid, e[0], e[2]) for (sid, pid), e in _pending.items() if sid == id(store)]
        for (sid, _pid), e in _pending.items():
            if sid == id(store):
                e[1] = time.monotonic()
    for play_id, at, src in due:
        if at > 0:
            _write(store, play_id, at, src)


def _write(store: Store, play_id: str, at: float, source: str) -> None:
    def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
        cur = cur or {"play_id": play_id, "at": 0.0, "sources": {}}
        if at <= float(cur.get("at", 0.0)):
            return None
        kinds = dict(cur.get("sources") or {})
        kinds[_source_kind(source)] = at
        if len(kinds) > MAX_SOURCES:
            kinds = dict(sorted(kinds.items(), key=lambda kv: kv[1])[-MAX_SOURCES:])
        return {"play_id": play_id, "at": at, "source": source[:300], "sources": kinds}

    store.update(KIND, play_id, fn, durable=False)  # a lost second of progress is harmless


def last(store: Store, play_id: str) -> float | None:
    """The last time ``play_id`` made progress, or None if nothing was ever noted."""
    safe_name(play_id, "play_id")
    rec = store.get(KIND, play_id)
    stored = float(rec.data.get("at", 0.0)) if rec else 0.0
    with _lock:
        entry = _pending.get((id(store), play_id))
        mem = entry[0] if entry else 0.0
    newest = max(stored, mem)
    return newest if newest > 0 else None


def sources(store: Store, play_id: str) -> dict[str, float]:
    """The latest progress time per source kind (``log``, ``commit`` …), as stored."""
    rec = store.get(KIND, play_id)
    return dict(rec.data.get("sources") or {}) if rec else {}
