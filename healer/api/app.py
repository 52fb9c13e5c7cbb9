"""The ASGI app: routes from every capability, auth, body limits, JSON errors.

Each capability's routes live in ``healer.api.routes`` and are listed in ``ROUTE_PROVIDERS``
("module:function" taking the ``ApiContext`` and returning Starlette routes; a module that is
not installed is skipped), so capabilities never import the API.
Every request first passes ``healer.api.guard`` (Host, Origin, token, content type, body size
and time); handlers parse bodies with ``healer.api.http.json_body`` (strict JSON).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from healer import __version__
from healer.api import openapi
from healer.api.guard import GuardMiddleware, GuardPolicy
from healer.api.http import HTTPError, error_response, ok, route
from healer.api.metrics import Metrics
from healer.api.throttle import Throttles
from healer.config import Settings
from healer.core.store import Store
from healer.resources import optional

log = logging.getLogger(__name__)

ROUTE_PROVIDERS = [
    "healer.api.routes.play:routes",
    "healer.api.routes.errors:routes",
    "healer.api.routes.context:routes",
    "healer.api.routes.fleet:routes",
    "healer.api.routes.incidents:routes",
    "healer.api.routes.silences:routes",
    "healer.api.routes.slack_actions:routes",
    "healer.api.routes.sentry_ingest:routes",
    "healer.api.routes.github_webhook:routes",
    "healer.api.dashboard.routes:routes",  # HTML for people at / and /ui/ (not in OpenAPI)
]


@dataclass
class ApiContext:
    """What handlers reach through ``request.app.state.ctx``."""

    settings: Settings
    store: Store
    metrics: Metrics = field(default_factory=Metrics)
    started_at: float = field(default_factory=time.time)
    services: dict[str, Any] = field(default_factory=dict)
    # Per-client delays after wrong tokens and logins; ``create_app`` sets them from settings.
    throttles: Throttles = field(default_factory=Throttles)
    # Called when the server stops, before it waits for open connections (live streams).
    closing: list[Callable[[], None]] = field(default_factory=list)


READY_TIMEOUT_S = 2.0


def _leaders(ctx: ApiContext) -> list[dict[str, Any]]:
    loop = ctx.services.get("loop")
    duties = getattr(loop, "duties", None)
    if duties is not None:
        return duties.leaders()  # type: ignore[no-any-return]
    from healer.core.duties import read_leaders

    return read_leaders(ctx.store)


async def _health(request: Request) -> Response:
    """Liveness: answers while the process serves, whatever the store does; who leads which
    duty when the store answers in time (``duties``), else ``duties_error``."""
    ctx: ApiContext = request.app.state.ctx
    body: dict[str, Any] = {"status": "healthy", "version": __version__, "service": "healer",
                            "node": ctx.settings.node,
                            "uptime_s": round(time.time() - ctx.started_at, 1)}
    loop = ctx.services.get("loop")
    if getattr(loop, "duties", None) is not None:
        body["owner"] = loop.duties.owner  # type: ignore[union-attr]
    try:
        body["duties"] = await asyncio.wait_for(asyncio.to_thread(_leaders, ctx),
                                                READY_TIMEOUT_S)
    except Exception as exc:  # liveness must not fail because the store is away
        body["duties_error"] = f"the store did not answer: {type(exc).__name__} {exc}".strip()
    return ok(body)


async def _ready(request: Request) -> Response:
    """Readiness: 200 when the store answers a read within 2 s, else 503 with the reason."""
    ctx: ApiContext = request.app.state.ctx
    try:
        await asyncio.wait_for(asyncio.to_thread(ctx.store.get, "leases", "ready-probe"),
                               READY_TIMEOUT_S)
    except TimeoutError:
        return ok({"status": "not_ready", "reason": f"the store did not answer within "
                   f"{READY_TIMEOUT_S:.0f} s"}, 503)
    except Exception as exc:
        return ok({"status": "not_ready",
                   "reason": f"the store failed: {type(exc).__name__}: {exc}"}, 503)
    return ok({"status": "ready", "node": ctx.settings.node})


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
    # 405 carries Allow (RFC 9110 §15.5.6): Starlette puts it in the exception's headers.
    return error_response(exc.status_code, str(reason), headers=dict(exc.headers or {}))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal error (logged)")


def collect_routes(ctx: ApiContext) -> list[BaseRoute]:
    routes: list[BaseRoute] = [
        route("/health", _health, summary="Liveness, version and who leads which duty"),
        route("/ready", _ready, summary="Readiness: the store answers",
              responses={200: "the store answers", 503: "the store does not answer"}),
        route("/metrics", _metrics, summary="Prometheus metrics"),
        route("/openapi.json", _openapi, summary="This description"),
    ]
    for spec in ROUTE_PROVIDERS:
        provider = optional(spec)
        if provider is not None:
            routes.extend(provider(ctx) if callable(provider) else provider)
    return routes


def create_app(ctx: ApiContext) -> Starlette:
    ctx.throttles = Throttles.from_settings(ctx.settings.api)
    routes = collect_routes(ctx)
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPError: _http_error, HTTPException: _starlette_error,
                            Exception: _unexpected},
    )
    app.state.ctx = ctx
    policy = GuardPolicy.from_settings(ctx.settings.api, ctx.settings.ingest)
    app.state.openapi = openapi.build(routes, bearer=bool(ctx.settings.api.token),
                                      public=policy.public)
    app.add_middleware(GuardMiddleware, policy=policy, throttle=ctx.throttles.bearer)
    return app
