"""Live updates: one watcher per server, fanned out to every open page over Server-Sent Events.

Browsers never poll. One task looks at cheap change marks of each view's sources — the audit
trail's size, the incident counters' and sessions' record stamps, the human inbox's file names,
the fleet picture, the loop's status file and the bus's counters — and, when a view's mark
changes, sends that view's event name (``incidents``, ``human``, ``fleet``, ``plays``,
``healer``) to every subscriber; the page then fetches its own fresh HTML. The pipeline also
wakes the watcher at once: results landing on the bus and the fleet service's episode events.
The task runs only while someone is subscribed.

A stream starts with ``retry:`` (the browser reconnects by itself after a drop) and sends a
comment every ``KEEPALIVE_S`` so proxies keep it open; subscribers are capped, and a slow one
loses events rather than holding memory (the next event refreshes it anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

log = logging.getLogger(__name__)

TOPICS = ("incidents", "human", "fleet", "plays", "healer")
INTERVAL_S = 1.0
KEEPALIVE_S = 15.0
RETRY_MS = 2000
MAX_SUBSCRIBERS = 64
QUEUE = 32

Marks = Callable[[], dict[str, str]]


class Broadcaster:
    def __init__(self, marks: Marks, *, interval_s: float = INTERVAL_S):
        self.marks = marks
        self.interval_s = interval_s
        self._subscribers: set[asyncio.Queue[str | None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def full(self) -> bool:
        return len(self._subscribers) >= MAX_SUBSCRIBERS

    def wake(self, *_: Any) -> None:
        """Look now (from any thread): something in the pipeline just happened."""
        loop, event = self._loop, self._wake
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    def close(self) -> None:
        """End every stream (the server is stopping: open streams must not hold it)."""
        self._closed = True
        for q in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(None)
        if self._task is not None:
            self._task.cancel()

    async def stream(self, is_disconnected: Callable[[], Any]) -> AsyncIterator[bytes]:
        """One subscriber's event stream, as SSE bytes."""
        q: asyncio.Queue[str | None] = asyncio.Queue(QUEUE)
        self._subscribers.add(q)
        self._ensure_running()
        try:
            yield f"retry: {RETRY_MS}\n: healer dashboard live updates\n\n".encode()
            yield b"event: hello\ndata: {}\n\n"
            while not self._closed:
                try:
                    topic = await asyncio.wait_for(q.get(), KEEPALIVE_S)
                except TimeoutError:
                    if await is_disconnected():
                        return
                    yield b": keepalive\n\n"
                    continue
                if topic is None:
                    return
                yield f"event: {topic}\ndata: {json.dumps({'topic': topic})}\n\n".encode()
        finally:
            self._subscribers.discard(q)

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._loop = asyncio.get_running_loop()
            self._wake = asyncio.Event()
            self._task = asyncio.create_task(self._watch(), name="dashboard-live")

    async def _watch(self) -> None:
        # On the event loop, not in a thread: the marks are a few stat calls, and the live
        # fleet picture is the fleet service's in-memory state, which its own loop mutates.
        last = self._safe_marks()
        while self._subscribers and not self._closed:
            assert self._wake is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()
            now = self._safe_marks()
            for topic in TOPICS:
                if now.get(topic) != last.get(topic):
                    self._publish(topic)
            last = now

    def _safe_marks(self) -> dict[str, str]:
        try:
            return self.marks()
        except Exception:
            log.exception("dashboard: could not read the change marks")
            return {}

    def _publish(self, topic: str) -> None:
        for q in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(topic)


def digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str, sort_keys=True).encode()).hexdigest()


def file_mark(path: os.PathLike[str] | str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0)
    return (st.st_size, st.st_mtime_ns)


def names_mark(folder: os.PathLike[str] | str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []
