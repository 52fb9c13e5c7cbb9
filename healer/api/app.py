"""The ASGI app: routes from every capability, auth, body limits, JSON errors.

Capabilities contribute routes through ``ROUTE_PROVIDERS`` ("module:function" taking the
``ApiContext`` and returning Starlette routes); a module that is not installed is skipped.
Mutating routes (anything but GET/HEAD/OPTIONS) need ``Authorization: Bearer <api.token>``
when a token is configured, except webhooks, which carry their own signatures.
"""

from __future__ import annotations

import hmac
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from healer import __version__
from healer.api import openapi
from healer.api.http import HTTPError, error_response, ok, route
from healer.api.metrics import Metrics
from healer.config import Settings
from healer.core.store import Store
from healer.resources import optional

log = logging.getLogger(__name__)

ROUTE_PROVIDERS = [
    "healer.play.http:routes",
    "healer.selfheal.http:routes",
    "healer.context.http:routes",
    "healer.fleet.http:routes",
]
WEBHOOK_PREFIX = "/api/v1/webhooks/"


@dataclass
class ApiContext:
    """What handlers reach through ``request.app.state.ctx``."""

    settings: Settings
    store: Store
    metrics: Metrics = field(default_factory=Metrics)
    started_at: float = field(default_factory=time.time)
    services: dict[str, Any] = field(default_factory=dict)


class GuardMiddleware:
    """Body size limit and bearer auth, before any handler runs (pure ASGI, so cheap)."""

    def __init__(self, app: ASGIApp, *, max_body: int, token: str):
        self.app = app
        self.max_body = max_body
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        headers = dict(scope["headers"])
        if method not in ("GET", "HEAD", "OPTIONS"):
            path: str = scope["path"]
            if self.token and not path.startswith(WEBHOOK_PREFIX):
                given = headers.get(b"authorization", b"")
                if not hmac.compare_digest(given, b"Bearer " + self.token):
                    await error_response(401, "missing or wrong bearer token")(scope, receive, send)
                    return
            length = headers.get(b"content-length")
            if length is not None:
                try:
                    too_big = int(length) > self.max_body
                except ValueError:
                    await error_response(400, "bad Content-Length")(scope, receive, send)
                    return
                if too_big:
                    await error_response(413, f"body larger than {self.max_body} bytes")(
                        scope, receive, send)
                    return
            receive = self._limited(receive)
        await self.app(scope, receive, send)

    def _limited(self, receive: Receive) -> Receive:
        seen = 0
        limit = self.max_body

        async def wrapped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise HTTPError(413, f"body larger than {limit} bytes")
            return message

        return wrapped


async def _health(request: Request) -> Response:
    ctx: ApiContext = request.app.state.ctx
    return ok({"status": "healthy", "version": __version__, "service": "healer",
               "node": ctx.settings.node, "uptime_s": round(time.time() - ctx.started_at, 1)})


async def _metrics(request: Request) -> Response:
    ctx: ApiContext = request.app.state.ctx
    body, content_type = ctx.metrics.render(ctx)
    return Response(body, media_type=content_type)


async def _openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPError)
    return error_response(exc.code, exc.reason, **exc.extra)


async def _starlette_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    reason = {404: "no such route", 405: "method not allowed"}.get(exc.status_code, exc.detail)
    return error_response(exc.status_code, str(reason))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal error (logged)")


def collect_routes(ctx: ApiContext) -> list[BaseRoute]:
    routes: list[BaseRoute] = [
        route("/health", _health, summary="Liveness and version"),
        route("/metrics", _metrics, summary="Prometheus metrics"),
        route("/openapi.json", _openapi, summary="This description"),
    ]
    for spec in ROUTE_PROVIDERS:
        provider = optional(spec)
        if provider is not None:
            routes.extend(provider(ctx) if callable(provider) else provider)
    return routes


def create_app(ctx: ApiContext) -> Starlette:
    routes = collect_routes(ctx)
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPError: _http_error, HTTPException: _starlette_error,
                            Exception: _unexpected},
    )
    app.state.ctx = ctx
    app.state.openapi = openapi.build(routes, bearer=bool(ctx.settings.api.token))
    app.add_middleware(GuardMiddleware, max_body=ctx.settings.api.max_body_bytes,
                       token=ctx.settings.api.token)
    return app
