"""``healer scan --k8s 'namespace=cto,selector=app=coderun'``: pod logs as a detection source.

The spec is ``key=value`` pairs separated by commas: ``namespace`` (default: ``kube.namespace``),
``selector`` (a label selector; commas inside it are fine: ``selector=app=coderun,agent=rex``
— a part that does not start with a known key continues the selector), ``context``,
``kubeconfig`` and ``container`` (only that container of each pod). The pods are watched
(new ones are picked up as they start) and each container's log is followed through the API;
every line becomes an ``entry`` event whose source is ``pod/<ns>/<name>/<container>``, so the
engine keeps one stream — and one pre-flight window — per container, as for files.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import queue
import re
import threading
from collections.abc import Iterator
from typing import Any

from healer.detect.sources import Event
from healer.errors import KubeError, UsageError
from healer.play.kube.client import PODS, KubeClient
from healer.play.kube.logs import LogHub
from healer.play.kube.reflector import Reflector

KEYS = ("namespace", "selector", "context", "kubeconfig", "container")
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SELECTOR = re.compile(r"[A-Za-z0-9_./!=,()\s-]*")
QUEUE = 10_000  # lines waiting for the engine; a full queue slows the followers down


@dataclasses.dataclass(frozen=True)
class Spec:
    namespace: str
    selector: str = ""
    context: str = ""
    kubeconfig: str = ""
    container: str = ""


def parse_spec(text: str, default_namespace: str = "cto") -> Spec:
    """The ``--k8s`` spec, checked; ``UsageError`` says what is wrong."""
    values: dict[str, str] = {}
    last = ""
    for part in [p for p in text.split(",") if p.strip()]:
        key, eq, value = part.partition("=")
        key = key.strip()
        if eq and key in KEYS:
            if key in values:
                raise UsageError(f"--k8s: {key} given twice")
            values[key], last = value.strip(), key
        elif last == "selector":
            values["selector"] += "," + part.strip()
        else:
            raise UsageError(f"--k8s: unknown part {part!r} (expected "
                             f"{', '.join(k + '=' for k in KEYS)})")
    ns = values.get("namespace") or default_namespace
    if not _NAMESPACE.fullmatch(ns):
        raise UsageError(f"--k8s: {ns!r} is not a namespace name")
    selector = values.get("selector", "")
    if not _SELECTOR.fullmatch(selector):
        raise UsageError(f"--k8s: {selector!r} is not a label selector")
    container = values.get("container", "")
    if container and not _NAMESPACE.fullmatch(container):
        raise UsageError(f"--k8s: {container!r} is not a container name")
    return Spec(ns, selector, values.get("context", ""), values.get("kubeconfig", ""),
                container)


class PodLogSource:
    """Events for ``healer.detect.sources.Follower``; see the module docstring."""

    def __init__(self, spec: Spec, kube: Any, *, since: str = ""):
        self.spec = spec
        self.kube = dataclasses.replace(
            kube, namespace=spec.namespace, context=spec.context or kube.context,
            kubeconfig=spec.kubeconfig or kube.kubeconfig)
        self.since = since
        self.name = f"k8s:{spec.namespace}/{spec.selector or '*'}"

    def events(self, stop: threading.Event) -> Iterator[Event]:
        q: queue.Queue[Event | BaseException | None] = queue.Queue(maxsize=QUEUE)
        thread = threading.Thread(target=lambda: asyncio.run(self._pump(q, stop)),
                                  daemon=True, name="healer-k8s-logs")
        thread.start()
        try:
            while True:
                try:
                    item = q.get(timeout=0.2)
                except queue.Empty:
                    if stop.is_set() or not thread.is_alive():
                        return
                    continue
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join(timeout=5)

    async def _pump(self, q: queue.Queue[Event | BaseException | None],
                    stop: threading.Event) -> None:
        try:
            client = await KubeClient.connect(self.kube)
        except KubeError as exc:
            q.put(exc)
            return
        stopping = asyncio.Event()

        def line(source: str, ts: float, text: str) -> None:
            if self.spec.container and not source.endswith("/" + self.spec.container):
                return
            ev = Event("entry", source, text.encode("utf-8", "surrogateescape"),
                       ts=ts or None)
            while not stop.is_set():
                try:
                    q.put(ev, timeout=0.2)
                    return
                except queue.Full:
                    continue

        hub = LogHub(client, line, max_streams=self.kube.max_log_streams,
                     backoff_max_s=self.kube.backoff_max_s, since=self.since)
        reflector = Reflector(client, PODS, namespace=self.spec.namespace,
                              selector=self.spec.selector, on_sync=hub.sync, on_event=hub.event,
                              page_size=self.kube.page_size,
                              watch_timeout_s=self.kube.watch_timeout_s,
                              backoff_max_s=self.kube.backoff_max_s,
                              max_objects=self.kube.max_objects)
        task = asyncio.ensure_future(reflector.run(stopping))
        try:
            while not stop.is_set():
                await asyncio.sleep(0.1)
        finally:
            stopping.set()
            await hub.stop()
            task.cancel()
            await asyncio.wait([task], timeout=5)
            await client.close()
            with contextlib.suppress(queue.Full):
                q.put_nowait(None)
