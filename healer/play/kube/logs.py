"""Pod logs through the API (``/api/v1/namespaces/{ns}/pods/{name}/log?follow=true&
timestamps=true``), without kubectl.

``follow_container`` reads one container's log and keeps reading: when the stream ends (the
kubelet rotated the file, the container restarted, the connection dropped) it asks again with
``sinceTime`` = the last line's timestamp and skips what it already had (``sinceTime`` has
one-second precision, so the lines of that second come again); it stops when the pod is gone
or finished (``alive`` says). ``LogHub`` runs one follower per container of every pod a
reflector reports, up to ``max_streams`` at once, and hands each line to ``on_line(source,
ts, text)`` with ``source`` = ``pod/<ns>/<name>/<container>`` — one source per container, so
per-source detection windows (pre-flight) work as for files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from healer.errors import KubeError
from healer.play.kube.client import KubeClient
from healer.play.kube.objects import parse_time

log = logging.getLogger(__name__)

OnLine = Callable[[str, float, str], None]
MAX_LINE_CHARS = 16_384  # a line longer than this is cut (the engine cuts alert lines further)


def split_stamp(raw: bytes) -> tuple[float | None, str, str]:
    """``b"2024-05-01T10:00:00.123456789Z text"`` → (epoch, stamp text, text)."""
    text = raw.decode("utf-8", "replace").rstrip("\r")
    stamp, _, rest = text.partition(" ")
    ts = parse_time(stamp)
    if ts is None:
        return None, "", text[:MAX_LINE_CHARS]
    return ts, stamp, rest[:MAX_LINE_CHARS]


def since_param(stamp: str) -> str:
    """RFC 3339 at one-second precision, as ``sinceTime`` takes it."""
    head = stamp.split(".")[0].rstrip("Z")
    return head + "Z"


async def follow_container(client: KubeClient, namespace: str, pod: str, container: str,
                           on_line: OnLine, *, alive: Callable[[], bool],
                           stopping: asyncio.Event, backoff_max_s: float = 30.0,
                           since: str = "") -> None:
    source = f"pod/{namespace}/{pod}/{container}"
    last_ts, last_stamp = 0.0, ""
    seen_at_last: set[str] = set()  # lines already read with the last timestamp
    delay = 0.5
    while not stopping.is_set():
        ended_ok = False
        try:
            async with client.logs(namespace, pod, container,
                                   since_time=since_param(last_stamp) if last_stamp else since
                                   ) as lines:
                delay = 0.5
                async for raw in lines:
                    ts, stamp, text = split_stamp(raw)
                    if ts is not None:
                        # Times, not strings: kubelets trim trailing zeros of the fraction.
                        if ts < last_ts - 1e-6 or (abs(ts - last_ts) <= 1e-6
                                                   and text in seen_at_last):
                            continue  # read before the reconnect (sinceTime is per second)
                        if abs(ts - last_ts) > 1e-6:
                            last_ts, last_stamp, seen_at_last = ts, stamp, set()
                        if len(seen_at_last) < 10_000:
                            seen_at_last.add(text)
                    on_line(source, ts if ts is not None else 0.0, text)
                    if stopping.is_set():
                        return
                ended_ok = True
        except KubeError as exc:
            if exc.status in (400, 404) and not alive():
                return
            log.debug("log of %s: %s", source, exc)
        if not alive():
            return
        # A clean end of a live container is a rotation or a restart: ask again at once
        # (with a short pause so a container that is not up yet is not hammered).
        wait = 0.2 if ended_ok else delay
        if not ended_ok:
            delay = min(backoff_max_s, delay * 2)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=wait)


class LogHub:
    """One log follower per container of the pods it is told about."""

    def __init__(self, client: KubeClient, on_line: OnLine, *, max_streams: int = 50,
                 backoff_max_s: float = 30.0, since: str = ""):
        self.client = client
        self.on_line = on_line
        self.max_streams = max_streams
        self.backoff_max_s = backoff_max_s
        self.since = since
        self.stopping = asyncio.Event()
        self._tasks: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.skipped = 0

    def _alive(self, ns: str, name: str) -> bool:
        pod = self._pods.get((ns, name))
        return pod is not None and (pod.get("status") or {}).get("phase") not in (
            "Succeeded", "Failed")

    def sync(self, items: list[dict[str, Any]]) -> None:
        fresh = {((o.get("metadata") or {}).get("namespace", ""),
                  (o.get("metadata") or {}).get("name", "")) for o in items}
        for key in [k for k in self._pods if k not in fresh]:
            self._pods.pop(key, None)
        for obj in items:
            self.event("ADDED", obj)

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        md = obj.get("metadata") or {}
        key = (str(md.get("namespace", "")), str(md.get("name", "")))
        if kind == "DELETED":
            self._pods.pop(key, None)
            return  # its followers see it is gone and stop
        self._pods[key] = {"status": {"phase": (obj.get("status") or {}).get("phase", "")}}
        running = {c.get("name") for c in (obj.get("status") or {}).get(
            "containerStatuses") or [] if "running" in (c.get("state") or {})
            or "terminated" in (c.get("state") or {})}
        for c in (obj.get("spec") or {}).get("containers") or []:
            name = str(c.get("name", ""))
            tkey = (*key, name)
            task = self._tasks.get(tkey)
            if task is not None and not task.done():
                continue
            if name not in running or not self._alive(*key):
                continue  # not started yet: a later MODIFIED starts it
            if sum(1 for t in self._tasks.values() if not t.done()) >= self.max_streams:
                self.skipped += 1
                continue
            self._tasks[tkey] = asyncio.ensure_future(follow_container(
                self.client, key[0], key[1], name, self.on_line,
                alive=lambda k=key: self._alive(*k), stopping=self.stopping,
                backoff_max_s=self.backoff_max_s, since=self.since))
        for k in [k for k, t in self._tasks.items() if t.done()]:
            self._tasks.pop(k, None)

    @property
    def streams(self) -> int:
        return sum(1 for t in self._tasks.values() if not t.done())

    async def stop(self) -> None:
        self.stopping.set()
        tasks = [t for t in self._tasks.values() if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
