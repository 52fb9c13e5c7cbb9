"""Serving the API inside the loop (or alone, for `healer serve`) with uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import uvicorn

from healer.api.app import ApiContext, create_app
from healer.config import Settings
from healer.core.store import Store

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the loop owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def install_signal_handlers(self) -> None:  # older uvicorn
        return None


class ApiService:
    name = "api"

    def __init__(self, settings: Settings, store: Store, *, services: dict[str, Any] | None = None,
                 metrics: Any = None):
        self.ctx = ApiContext(settings=settings, store=store)
        if metrics is not None:
            self.ctx.metrics = metrics
        self.ctx.services.update(services or {})
        self.app = create_app(self.ctx)
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.url = ""

    async def start(self) -> None:
        s = self.ctx.settings.api
        config = uvicorn.Config(self.app, host=s.host, port=s.port, log_level="warning",
                                lifespan="off", access_log=False, server_header=False,
                                timeout_graceful_shutdown=5)
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                exc = self._task.exception()
                raise OSError(f"HTTP API could not start on {s.host}:{s.port}: {exc}")
            await asyncio.sleep(0.01)
        sock = self._server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        log.info("HTTP API on %s", self.url)

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def create_service(healer: Any) -> ApiService | None:
    """Loop factory: serve the API unless ``api.enabled`` is false."""
    settings: Settings = healer.settings
    if not settings.api.enabled:
        return None
    svc = ApiService(settings, healer.store, services=healer.extras.setdefault("api_services", {}),
                     metrics=healer.extras.get("metrics"))
    healer.extras["api"] = svc
    return svc
