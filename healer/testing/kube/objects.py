"""The fake API server's state: objects with resourceVersions, the change history watches
replay, label selectors, pod logs and the permissions reviews answer with.

Thread-safe: tests change objects from their own thread while the server's event loop serves
lists and watches; every change is pushed to open watches with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import copy
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    singular: str
    namespaced: bool = True
    short: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ("get", "list", "watch", "create", "update", "patch", "delete")

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES = (
    Resource("", "v1", "pods", "Pod", "pod", short=("po",)),
    Resource("", "v1", "events", "Event", "event", short=("ev",)),
    Resource("", "v1", "namespaces", "Namespace", "namespace", namespaced=False, short=("ns",)),
    Resource("agents.platform", "v1", "coderuns", "CodeRun", "coderun", short=("cr",)),
    Resource("argoproj.io", "v1alpha1", "workflows", "Workflow", "workflow", short=("wf",)),
)
BY_PLURAL = {r.plural: r for r in RESOURCES}
HISTORY = 2000  # changes kept for watches that resume from a resourceVersion


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_nano(ts: float) -> str:
    ns = round(ts * 1e9)
    whole = datetime.fromtimestamp(ns // 10**9, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{ns % 10**9:09d}Z"


# --- label selectors (the API server's syntax) ----------------------------------------------

_REQ = re.compile(r"\s*(!?)([A-Za-z0-9_./-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9_.-]*)|\s+(in|notin)\s*"
                  r"\(([^)]*)\))?\s*")


def parse_selector(text: str) -> list[tuple[str, str, set[str]]]:
    """``a=b,c!=d,e,!f,g in (x,y)`` → requirements; ValueError on bad syntax."""
    out: list[tuple[str, str, set[str]]] = []
    parts = re.findall(r"(?:[^,(]|\([^)]*\))+", text or "")
    for part in parts:
        m = _REQ.fullmatch(part)
        if not m:
            raise ValueError(f"unable to parse requirement: {part!r}")
        neg, key, op, value, setop, values = m.groups()
        if op:
            out.append((key, "!=" if op == "!=" else "=", {value}))
        elif setop:
            out.append((key, setop, {v.strip() for v in values.split(",") if v.strip()}))
        else:
            out.append((key, "!exists" if neg else "exists", set()))
    return out


def selects(reqs: list[tuple[str, str, set[str]]], labels: dict[str, str]) -> bool:
    for key, op, values in reqs:
        have = key in labels
        if op == "=" and labels.get(key) not in values:
            return False
        if op == "!=" and have and labels[key] in values:
            return False
        if op == "in" and labels.get(key) not in values:
            return False
        if op == "notin" and have and labels[key] in values:
            return False
        if op == "exists" and not have:
            return False
        if op == "!exists" and have:
            return False
    return True


# --- the store --------------------------------------------------------------------------------

@dataclass
class Watch:
    plural: str
    namespace: str
    selector: list[tuple[str, str, set[str]]]
    queue: asyncio.Queue[Any]
    loop: asyncio.AbstractEventLoop

    def wants(self, plural: str, obj: dict[str, Any]) -> bool:
        md = obj.get("metadata") or {}
        return (plural == self.plural and (not self.namespace or md.get("namespace") ==
                                           self.namespace)
                and selects(self.selector, md.get("labels") or {}))

    def send(self, item: Any) -> None:
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


@dataclass
class LogStream:
    lines: list[tuple[float, str]] = field(default_factory=list)
    previous: list[tuple[float, str]] = field(default_factory=list)
    followers: list[tuple[asyncio.Queue[Any], asyncio.AbstractEventLoop]] = field(
        default_factory=list)


class ClusterObjects:
    """Every object of the fake cluster, by (plural, namespace, name)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.RLock()
        self.rv = 100
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []
        self.oldest_rv = self.rv  # a watch from before this gets 410 Gone
        self.watches: list[Watch] = []
        self.logs: dict[tuple[str, str, str], LogStream] = {}
        self.denied: set[tuple[str, str, str]] = set()  # (verb, group, resource[/sub])

    # -- changes -----------------------------------------------------------------------------

    def _record(self, plural: str, kind: str, obj: dict[str, Any]) -> None:
        self.history.append((self.rv, plural, kind, copy.deepcopy(obj)))
        if len(self.history) > HISTORY:
            drop = self.history[: len(self.history) - HISTORY]
            self.history = self.history[len(drop):]
            self.oldest_rv = drop[-1][0]
        for w in list(self.watches):
            if w.wants(plural, obj):
                w.send({"type": kind, "object": copy.deepcopy(obj)})

    def create(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        res = BY_PLURAL[plural]
        with self._lock:
            obj = copy.deepcopy(obj)
            md = obj.setdefault("metadata", {})
            if res.namespaced:
                md.setdefault("namespace", "default")
            key = (plural, md.get("namespace", ""), md["name"])
            if key in self.objects:
                raise KeyError(f"{plural} {md['name']} already exists")
            self.rv += 1
            obj.setdefault("apiVersion", res.group_version)
            obj.setdefault("kind", res.kind)
            md.update(resourceVersion=str(self.rv), uid=md.get("uid") or str(uuid.uuid4()))
            md.setdefault("creationTimestamp", rfc3339(self.clock()))
            md.setdefault("labels", {})
            self.objects[key] = obj
            self._record(plural, "ADDED", obj)
            return copy.deepcopy(obj)

    def patch(self, plural: str, namespace: str, name: str,
              fn: Callable[[dict[str, Any]], None] | dict[str, Any]) -> dict[str, Any]:
        """Change an object: ``fn(obj)`` in place, or a merge patch (a dict)."""
        with self._lock:
            obj = self.objects[(plural, namespace, name)]
            if callable(fn):
                fn(obj)
            else:
                _merge(obj, fn)
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self._record(plural, "MODIFIED", obj)
            return copy.deepcopy(obj)

    def delete(self, plural: str, namespace: str, name: str) -> None:
        with self._lock:
            obj = self.objects.pop((plural, namespace, name))
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self._record(plural, "DELETED", obj)
            for (ns, pod, _c), stream in self.logs.items():
                if plural == "pods" and (ns, pod) == (namespace, name):
                    _close_followers(stream)

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self.objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj else None

    def compact(self) -> None:
        """Forget the history (etcd compaction): a watch or continue token from an older
        resourceVersion gets 410 Gone."""
        with self._lock:
            self.history.clear()
            self.oldest_rv = self.rv

    def expire_watches(self) -> int:
        """Compact, then end every open watch with an ERROR event (Status 410 Gone), as the
        API server does when a watch's resourceVersion falls out of its window."""
        with self._lock:
            self.compact()
            watches = list(self.watches)
        for w in watches:
            w.send({"type": "ERROR", "object": status(410, "Expired", "too old resource "
                                                                     "version")})
            w.send(None)
        return len(watches)

    def bookmark(self) -> None:
        with self._lock:
            for w in list(self.watches):
                w.send("BOOKMARK")

    # -- reads -------------------------------------------------------------------------------

    def select(self, plural: str, namespace: str, selector: str
               ) -> tuple[int, list[dict[str, Any]]]:
        reqs = parse_selector(selector)
        with self._lock:
            items = [copy.deepcopy(o) for (p, ns, _n), o in sorted(self.objects.items())
                     if p == plural and (not namespace or ns == namespace)
                     and selects(reqs, o["metadata"].get("labels") or {})]
            return self.rv, items

    def since(self, rv: int, watch: Watch) -> list[dict[str, Any]] | None:
        """The changes after ``rv`` that ``watch`` wants, or None when ``rv`` is too old."""
        with self._lock:
            if rv < self.oldest_rv:
                return None
            return [{"type": kind, "object": copy.deepcopy(obj)}
                    for at, plural, kind, obj in self.history
                    if at > rv and watch.wants(plural, obj)]

    # -- logs ----------------------------------------------------------------------------------

    def stream(self, namespace: str, pod: str, container: str) -> LogStream:
        return self.logs.setdefault((namespace, pod, container), LogStream())

    def log(self, namespace: str, pod: str, container: str, line: str,
            ts: float | None = None) -> None:
        with self._lock:
            s = self.stream(namespace, pod, container)
            at = self.clock() if ts is None else ts
            s.lines.append((at, line))
            for q, loop in list(s.followers):
                if not loop.is_closed():
                    loop.call_soon_threadsafe(q.put_nowait, (at, line))

    def restart_container(self, namespace: str, pod: str, container: str) -> None:
        """The container restarts: its log starts anew; open follows end."""
        with self._lock:
            s = self.stream(namespace, pod, container)
            s.previous, s.lines = s.lines, []
            _close_followers(s)

    def drop_log_streams(self, namespace: str, pod: str, container: str) -> None:
        """Open follows end (a kubelet log rotation, a dropped connection); the log stays."""
        with self._lock:
            _close_followers(self.stream(namespace, pod, container))


def _close_followers(stream: LogStream) -> None:
    for q, loop in list(stream.followers):
        if not loop.is_closed():
            loop.call_soon_threadsafe(q.put_nowait, None)
    stream.followers.clear()


def _merge(obj: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if v is None:
            obj.pop(k, None)
        elif isinstance(v, dict) and isinstance(obj.get(k), dict):
            _merge(obj[k], v)
        else:
            obj[k] = copy.deepcopy(v)


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
