"""A fake Kubernetes API server on 127.0.0.1 that speaks the real wire format.

Enough of the API for kubectl and for healer's watcher: discovery (``/api``, ``/api/v1``,
``/apis``, ``/apis/<group>/<version>``, ``/version``), list with ``resourceVersion`` and
``limit``/``continue`` chunking, watches (``?watch=1``: newline-delimited ``ADDED``,
``MODIFIED``, ``DELETED``, ``BOOKMARK`` with ``allowWatchBookmarks``, ``ERROR`` with a Status
410 Gone), label and name field selectors, pod logs with ``follow``, ``timestamps``,
``sinceTime``, ``previous``, ``SelfSubjectAccessReview`` and ``SelfSubjectReview``, the
``meta.k8s.io/v1`` Table kubectl asks for, and bearer-token auth. Plain HTTP (kubectl accepts
``server: http://127.0.0.1:PORT``).

Resources: pods, events, namespaces, CodeRuns (``agents.platform/v1``) and Argo Workflows
(``argoproj.io/v1alpha1``)::

    with FakeKube(tokens={"t0ken": "system:serviceaccount:cto:healer"}) as kube:
        kube.write_kubeconfig(tmp / "config", token="t0ken")
        kube.objects.create("pods", pod("play-task-4-x", labels={...}))
        kube.objects.patch("pods", "cto", "play-task-4-x", crash_loop())
        kube.objects.expire_watches()      # every open watch ends with 410 Gone
        kube.restart()                     # same port, same objects; connections drop
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from healer.testing.kube.builders import (
    coderun,
    container_status,
    crash_loop,
    pod,
    ready,
    terminated,
    workflow,
)
from healer.testing.kube.objects import ClusterObjects, rfc3339
from healer.testing.kube.server import Handler

__all__ = ["ClusterObjects", "FakeKube", "coderun", "container_status", "crash_loop", "pod",
           "ready", "rfc3339", "terminated", "workflow"]


class FakeKube:
    def __init__(self, *, tokens: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.time, bookmark_every_s: float = 1.0):
        self.tokens = dict(tokens or {})
        self.objects = ClusterObjects(clock)
        self.bookmark_every_s = bookmark_every_s
        self.requests: list[str] = []
        self.lists: list[str] = []
        self.watches_opened: list[str] = []
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeKube:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        handler = Handler(self)

        async def endpoint(request: Request) -> Response:
            return await handler(request)

        app = Starlette(routes=[Route("/{path:path}", endpoint, methods=["GET", "POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="off", timeout_graceful_shutdown=1)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True, name="fake-kube")
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("fake Kubernetes API server did not start")
            time.sleep(0.01)
        self.port = server.servers[0].sockets[0].getsockname()[1]
        self._server, self._thread = server, thread

    def stop(self) -> None:
        """Stop serving; open watches and log follows end (as when an API server goes)."""
        with self.objects._lock:
            for w in list(self.objects.watches):
                w.send(None)
            for stream in self.objects.logs.values():
                for q, loop in list(stream.followers):
                    if not loop.is_closed():
                        loop.call_soon_threadsafe(q.put_nowait, None)
                stream.followers.clear()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def restart(self, *, down_s: float = 0.0) -> None:
        """Stop and start again on the same port with the same objects (a restarted API
        server behind the same address; etcd kept everything)."""
        self.stop()
        if down_s:
            time.sleep(down_s)  # the outage itself is what is being tested
        self.start()

    def write_kubeconfig(self, path: Path, *, token: str = "", namespace: str = "cto",
                         context: str = "fake") -> Path:
        """A kubeconfig that points kubectl (or healer) at this server."""
        import yaml

        user: dict[str, Any] = {"token": token} if token else {}
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": context,
               "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
               "users": [{"name": "healer", "user": user}],
               "contexts": [{"name": context, "context": {"cluster": "fake", "user": "healer",
                                                          "namespace": namespace}}]}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        return path
