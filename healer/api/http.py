"""Helpers every route uses: JSON bodies validated against schemas/, errors with reasons.

A route that declares its contract with ``route(...)`` is documented in ``/openapi.json``
from the same JSON Schemas that validate its requests.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from healer.core.schemas import errors as schema_errors
from healer.core.strict_json import loads_strict
from healer.core.trust import ANONYMOUS, TRUSTED
from healer.errors import UnsafeNameError

# Deeper than any request healer defines; a bomb of brackets is refused before it is parsed.
MAX_JSON_DEPTH = 32


def json_depth(request: Request) -> int:
    """``api.max_json_depth`` of the app serving ``request``."""
    ctx = getattr(request.app.state, "ctx", None)
    return ctx.settings.api.max_json_depth if ctx is not None else MAX_JSON_DEPTH

Handler = Callable[[Request], Awaitable[Response]]

API_CALLER = "api token"  # who an approval over the API is recorded as (one token, no names)


def has_token(request: Request) -> bool:
    """Whether the request carries ``Authorization: Bearer <api.token>`` (constant-time);
    never true when no token is configured."""
    ctx = getattr(request.app.state, "ctx", None)
    settings = ctx.settings if ctx is not None else getattr(request.app.state, "settings", None)
    token = settings.api.token if settings is not None else ""
    if not token:
        return False
    scheme, _, value = request.headers.get("authorization", "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        value.strip().encode("utf-8", "replace"), token.encode())


def caller_trust(request: Request) -> str:
    """``trusted`` for a token-authenticated call, else ``anonymous`` (no token configured,
    or none presented: the guard lets the latter through only when none is configured)."""
    return TRUSTED if has_token(request) else ANONYMOUS


class HTTPError(Exception):
    """Raised by handlers; becomes ``{"status": "error", "error": reason}`` with ``code``."""

    def __init__(self, code: int, reason: str, **extra: Any):
        self.code = code
        self.reason = reason
        self.extra = extra
        super().__init__(reason)


def error_response(code: int, reason: str, *, headers: dict[str, str] | None = None,
                   **extra: Any) -> JSONResponse:
    return JSONResponse({"status": "error", "error": reason, **extra}, status_code=code,
                        headers=headers)


def ok(data: Any, code: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=code)


def parse_json(raw: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``raw`` as strict JSON, or HTTPError 400 with the reason.

    Strict means what a Python ``json.loads`` lets through and healer must not store: invalid
    UTF-8, lone surrogates, NaN/Infinity and numbers that overflow, integers past Python's
    digit limit, nesting deeper than ``max_depth``.
    """
    if not raw.strip():
        raise HTTPError(400, "empty body: expected a JSON object")
    try:
        return loads_strict(raw, max_depth=max_depth)
    except ValueError as exc:
        raise HTTPError(400, f"body is not acceptable JSON: {exc}") from exc


async def json_body(request: Request, schema: str | None = None) -> Any:
    """The request body as strict JSON, validated against ``schemas/<schema>.schema.json``.

    The guard has already refused non-JSON content types on mutating routes."""
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if ctype != "application/json" and not ctype.endswith("+json"):
        raise HTTPError(415, f"expected a JSON body (Content-Type: application/json), got {ctype}")
    data = parse_json(await request.body(), max_depth=json_depth(request))
    if schema:
        problems = schema_errors(schema, data)
        if problems:
            key, message = problems[0]
            raise HTTPError(400, f"{key}: {message}" if key else message)
    return data


def int_query(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    """An integer query parameter within [lo, hi] (400 with the reason otherwise)."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise HTTPError(400, f"query parameter {name} must be an integer") from exc
    if not lo <= value <= hi:
        raise HTTPError(400, f"query parameter {name} must be between {lo} and {hi}")
    return value


def path_name(request: Request, param: str, check: Callable[[str, str], str]) -> str:
    """A path parameter validated as a safe name (400 with the reason otherwise)."""
    value = request.path_params[param]
    try:
        return check(value, param)
    except UnsafeNameError as exc:
        raise HTTPError(400, str(exc)) from exc


def route(
    path: str,
    handler: Handler,
    *,
    methods: tuple[str, ...] = ("GET",),
    summary: str,
    request_schema: str | None = None,
    responses: dict[int, str] | None = None,
    query: dict[str, dict[str, Any]] | None = None,
    params: dict[str, dict[str, Any]] | None = None,
    body_required: bool = True,
    tag: str = "healer",
) -> Route:
    """A Starlette route carrying its OpenAPI description. ``params``: schemas of path
    parameters (default: a safe name); ``body_required``: whether the body may be left out."""
    r = Route(path, handler, methods=list(methods))
    r.openapi = {  # type: ignore[attr-defined]
        "summary": summary,
        "request_schema": request_schema,
        "responses": responses or {200: "OK"},
        "query": query or {},
        "params": params or {},
        "body_required": body_required,
        "tag": tag,
    }
    return r
