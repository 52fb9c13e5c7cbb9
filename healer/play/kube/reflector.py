"""List + watch for one resource, as client-go's reflector does it.

``run`` lists the resource (paged: ``limit``/``continue``), hands the whole set to
``on_sync`` (which works out what was added, changed or deleted while nobody watched), then
watches from the list's resourceVersion with bookmarks, handing each change to ``on_event``.
A watch the server ended normally (its ``timeoutSeconds``) resumes from the last
resourceVersion seen — bookmarks keep that fresh on a quiet resource. 410 Gone (the version
was compacted away, in a watch or a continue token) means list again. An unreachable or
failing server means back-off (0.5 s doubling to ``backoff_max_s``, with jitter), then resume
the watch; if the resume is refused with 410, list again. Nothing is missed and nothing is
reported twice: every event carries its object's resourceVersion, and ``on_sync`` compares
whole sets.

At most ``max_objects`` objects are tracked; more are counted in ``dropped`` and ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from healer.errors import KubeError, KubeGoneError
from healer.play.kube.client import Kind, KubeClient

log = logging.getLogger(__name__)

Sync = Callable[[list[dict[str, Any]]], None]
OnEvent = Callable[[str, dict[str, Any]], None]


@dataclass
class ReflectorStats:
    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    gone: int = 0
    errors: int = 0
    dropped: int = 0
    last_error: str = ""
    synced: bool = False
    resource_version: str = ""
    connected: bool = False
    history: list[str] = field(default_factory=list)  # the last few transitions, for doctor


class Reflector:
    def __init__(self, client: KubeClient, kind: Kind, *, namespace: str, selector: str = "",
                 on_sync: Sync, on_event: OnEvent, page_size: int = 500,
                 watch_timeout_s: int = 300, backoff_max_s: float = 30.0,
                 max_objects: int = 5000):
        self.client = client
        self.kind = kind
        self.namespace = namespace
        self.selector = selector
        self.on_sync = on_sync
        self.on_event = on_event
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.backoff_max_s = backoff_max_s
        self.max_objects = max_objects
        self.stats = ReflectorStats()
        self._known: set[tuple[str, str]] = set()
        self._rv = ""  # the last resourceVersion seen: where a watch resumes
        self._last_logged = ""

    def _note(self, what: str) -> None:
        self.stats.history = [*self.stats.history, what][-10:]

    async def run(self, stopping: asyncio.Event) -> None:
        """List and watch until ``stopping`` is set."""
        delay = 0.5
        while not stopping.is_set():
            try:
                if not self._rv:
                    self._rv = await self._list()
                await self._watch(stopping)
                delay, self._last_logged = 0.5, ""
            except KubeGoneError as exc:
                self.stats.gone += 1
                self._note(f"410 Gone at {self._rv}: relist")
                log.info("watch of %s expired (%s): listing again", self.kind.plural, exc)
                self._rv = ""  # list again, at once: the server is there, the version is not
            except KubeError as exc:
                self.stats.errors += 1
                self.stats.connected = False
                self.stats.last_error = str(exc)[:300]
                self._note(f"error: {exc.reason or exc.status}")
                again = str(exc)[:300] == self._last_logged
                self._last_logged = str(exc)[:300]
                # Said once; the same failure again (a CRD that is not installed, a server
                # still down) only at debug level, so the log is not flooded every 30 s.
                (log.debug if again else log.warning)(
                    "%s: %s; retrying in %.1f s", self.kind.plural, exc, delay)
                await _sleep(stopping, delay * (0.5 + random.random()))  # noqa: S311 - jitter
                delay = min(self.backoff_max_s, delay * 2)

    async def _list(self) -> str:
        items: list[dict[str, Any]] = []
        cont, rv = "", ""
        while True:
            page = await self.client.list(self.kind, namespace=self.namespace,
                                          selector=self.selector, limit=self.page_size,
                                          cont=cont)
            meta = page.get("metadata") or {}
            rv = rv or str(meta.get("resourceVersion", ""))
            for obj in page.get("items") or []:
                if len(items) >= self.max_objects:
                    self.stats.dropped += 1
                    continue
                items.append(obj)
            cont = str(meta.get("continue") or "")
            if not cont:
                break
        self.stats.lists += 1
        self.stats.connected = True
        self.stats.synced = True
        self.stats.resource_version = rv
        self._known = {_ref(o) for o in items}
        self._note(f"listed {len(items)} at {rv}")
        self.on_sync(items)
        return rv

    async def _watch(self, stopping: asyncio.Event) -> None:
        """One watch request, from (and moving) the last resourceVersion seen."""
        self.stats.watches += 1
        async with self.client.watch(self.kind, resource_version=self._rv,
                                     namespace=self.namespace,
                                     selector=self.selector,
                                     timeout_s=self.watch_timeout_s) as events:
            self.stats.connected = True
            stop = asyncio.ensure_future(stopping.wait())
            try:
                it = events.__aiter__()
                while True:
                    nxt = asyncio.ensure_future(it.__anext__())
                    nxt.add_done_callback(_retrieved)
                    done, _ = await asyncio.wait({nxt, stop},
                                                 return_when=asyncio.FIRST_COMPLETED)
                    if nxt not in done:
                        nxt.cancel()
                        return
                    try:
                        event = nxt.result()
                    except StopAsyncIteration:
                        return  # the server's timeout: resume where we are
                    self._apply(event)
            finally:
                stop.cancel()

    def _apply(self, event: dict[str, Any]) -> None:
        kind = str(event.get("type", ""))
        obj = event.get("object") or {}
        new_rv = str((obj.get("metadata") or {}).get("resourceVersion") or self._rv)
        if kind == "BOOKMARK":
            self.stats.bookmarks += 1
            self._rv = self.stats.resource_version = new_rv
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        self._rv = self.stats.resource_version = new_rv
        ref = _ref(obj)
        if kind == "DELETED":
            self._known.discard(ref)
        elif ref not in self._known:
            if len(self._known) >= self.max_objects:
                self.stats.dropped += 1
                return
            self._known.add(ref)
        self.stats.events += 1
        self.on_event(kind, obj)


def _ref(obj: dict[str, Any]) -> tuple[str, str]:
    md = obj.get("metadata") or {}
    return str(md.get("namespace", "")), str(md.get("name", ""))


async def _sleep(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)


def _retrieved(fut: asyncio.Future[Any]) -> None:
    """A read abandoned at stop may still fail as its connection closes: that is expected."""
    if not fut.cancelled():
        fut.exception()
