"""Serving the API inside the loop (or alone, for `healer serve`) with uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from typing import Any

import uvicorn

from healer.api.app import ApiContext, create_app
from healer.api.protocol import protocol_class
from healer.config import Settings
from healer.core.asgi import Server
from healer.core.store import Store

log = logging.getLogger(__name__)
BACKLOG = 2048


class PortInUseError(OSError):
    """The API's address is taken (another healer, or another program)."""


def bind(host: str, port: int, *, backlog: int) -> socket.socket:
    """A listening socket, bound here so a taken port is one clear error, not uvicorn's
    traceback and ``sys.exit``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(
                exc.errno, f"{where} is already in use: stop the other process (another "
                f"healer?) or choose another port (--port, HEALER_PORT or api.port)") from None
        raise OSError(exc.errno, f"cannot listen on {where}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


class ApiService:
    name = "api"

    def __init__(self, settings: Settings, store: Store, *, services: dict[str, Any] | None = None,
                 metrics: Any = None):
        self.ctx = ApiContext(settings=settings, store=store)
        if metrics is not None:
            self.ctx.metrics = metrics
        self.ctx.services.update(services or {})
        self.app = create_app(self.ctx)
        self._server: Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.url = ""

    async def start(self) -> None:
        s = self.ctx.settings.api
        sock = bind(s.host, s.port, backlog=BACKLOG)
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False,
                                server_header=False, timeout_graceful_shutdown=5,
                                http=protocol_class(s.header_timeout_s),
                                timeout_keep_alive=s.keepalive_s,  # type: ignore[arg-type]
                                limit_concurrency=s.max_connections, backlog=BACKLOG,
                                # X-Forwarded-* only from api.trusted_proxies: otherwise any
                                # local client could pick the address it is throttled as.
                                proxy_headers=bool(s.trusted_proxies),
                                forwarded_allow_ips=[p.strip() for p in s.trusted_proxies])
        self._server = Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                exc = self._task.exception()
                sock.close()
                raise OSError(f"HTTP API could not start on {s.host}:{s.port}: {exc}")
            await asyncio.sleep(0.01)
        host, port = sock.getsockname()[:2]
        # Everything this process writes for people builds its address from the settings
        # (healer.core.address): `api.port: 0` must read as the port really bound.
        s.port = port
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        log.info("HTTP API on %s", self.url)

    async def stop(self) -> None:
        for close in self.ctx.closing:
            try:
                close()
            except Exception:
                log.exception("closing %s failed", close)
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def create_service(healer: Any) -> ApiService | None:
    """Loop factory: serve the API unless ``api.enabled`` is false."""
    settings: Settings = healer.settings
    if not settings.api.enabled:
        return None
    services = healer.extras.setdefault("api_services", {})
    services.setdefault("loop", healer)  # the dashboard's live numbers (status(), the bus)
    svc = ApiService(settings, healer.store, services=services,
                     metrics=healer.extras.get("metrics"))
    healer.extras["api"] = svc
    return svc
