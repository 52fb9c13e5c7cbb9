"""report_error and get_healing_status over HTTP: Starlette routes the API app mounts.

::

    POST /api/v1/errors               body: the report_error arguments (JSON)
                                      → 202 accepted / 200 joined or rejected / 400 bad input
    GET  /api/v1/healing[?limit=N]    → the latest attempts
    GET  /api/v1/healing/{fp}         → the attempts of one fingerprint (or a ≥4-digit prefix)

The routes find the service at ``request.app.state.selfheal`` (a ``SelfHealService``), or in
healer's API app at ``app.state.ctx.services["selfheal"]`` (the loop registers it; ``healer
serve`` alone makes one on first use). The API's guard has checked the token, the content
type and the body size before a handler runs. A body may carry ``"healing_run": true`` (a
healing agent reporting): it is refused by the recursion gate. Response bodies are exactly
what the MCP tools return.

A call with the configured bearer token is trusted; without a token configured it is
anonymous (``healer.core.trust``): its new incidents count against the flood limits of the
``api`` origin, and it never starts an agent by itself — the answer is 200 with reason
``awaiting_approval`` until a person approves (``healer approve``).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from healer.api.http import HTTPError, caller_trust, json_depth, parse_json, route
from healer.errors import UsageError


def _service(request: Request) -> Any:
    """``app.state.selfheal``, else the API context's ``services["selfheal"]`` (made from its
    settings and store on first use, with start-up recovery, when the loop did not)."""
    state = request.app.state
    service = getattr(state, "selfheal", None)
    if service is not None:
        return service
    ctx = getattr(state, "ctx", None)
    if ctx is None:
        raise RuntimeError("set app.state.selfheal (or app.state.ctx) to mount these routes")
    return _service_of(ctx)


def _service_of(ctx: Any) -> Any:
    """The API context's report_error service, made (with recovery) on first use."""
    service = ctx.services.get("selfheal")
    if service is None:
        from healer.selfheal.service import SelfHealService

        service = SelfHealService(ctx.settings, ctx.store)
        service.recover()
        ctx.services["selfheal"] = service
    return service


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"status": "error", "error": message}, status_code=status)


async def report_error(request: Request) -> JSONResponse:
    service = _service(request)
    try:
        body = parse_json(await request.body(), max_depth=json_depth(request))
    except HTTPError as exc:
        return _error(exc.code, exc.reason)
    trust = caller_trust(request)
    try:
        result = service.report(body, trust=trust, origin="api" if trust == "anonymous" else "")
    except UsageError as exc:
        return _error(400, str(exc))
    return JSONResponse(result, status_code=202 if result["accepted"] else 200)


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit", "20")
    if not raw.isdigit() or not 1 <= int(raw) <= 200:
        raise UsageError("limit must be an integer 1-200")
    return int(raw)


async def healing_list(request: Request) -> JSONResponse:
    try:
        return JSONResponse(_service(request).status(None, _limit(request)))
    except UsageError as exc:
        return _error(400, str(exc))


async def healing_one(request: Request) -> JSONResponse:
    try:
        data = _service(request).status(request.path_params["fingerprint"], _limit(request))
    except UsageError as exc:
        return _error(400, str(exc))
    if not data["attempts"]:
        return JSONResponse({"status": "error", "error": "no healing attempts for this "
                             "fingerprint", **data}, status_code=404)
    return JSONResponse(data)


def _route(path: str, endpoint: Any, method: str, name: str, summary: str,
           responses: dict[int, str], query: dict[str, Any] | None = None,
           schema: str | None = None) -> Route:
    r = route(path, endpoint, methods=(method,), summary=summary, request_schema=schema,
              responses=responses, query=query, params=_PARAMS, tag="self-healing")
    r.name = name
    return r


_PARAMS = {"fingerprint": {"type": "string", "pattern": "^[0-9A-Fa-f]{4,64}$"}}
_LIMIT = {"limit": {"type": "integer", "minimum": 1, "maximum": 200}}

routes = [
    _route("/api/v1/errors", report_error, "POST", "report_error",
           "report_error: gate a reported error and dispatch a healing agent",
           {202: "accepted", 200: "joined an attempt, refused by a gate, waiting for a "
            "person's approval (anonymous caller) or over a flood limit", 400: "bad report",
            401: "token required", 413: "body too large", 415: "not JSON"},
           schema="report-error"),
    _route("/api/v1/healing", healing_list, "GET", "healing_list",
           "get_healing_status: the latest attempts", {200: "attempts", 400: "bad limit"},
           _LIMIT),
    _route("/api/v1/healing/{fingerprint}", healing_one, "GET", "healing_one",
           "get_healing_status: the attempts of one fingerprint (or a 4+ hex prefix)",
           {200: "attempts", 400: "not a fingerprint", 404: "no attempts"}, _LIMIT),
]

__all__ = ["routes"]
