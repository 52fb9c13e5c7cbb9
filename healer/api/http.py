"""Helpers every route uses: JSON bodies validated against schemas/, errors with reasons.

A route that declares its contract with ``route(...)`` is documented in ``/openapi.json``
from the same JSON Schemas that validate its requests.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from healer.core.schemas import errors as schema_errors
from healer.errors import UnsafeNameError

Handler = Callable[[Request], Awaitable[Response]]


class HTTPError(Exception):
    """Raised by handlers; becomes ``{"status": "error", "error": reason}`` with ``code``."""

    def __init__(self, code: int, reason: str, **extra: Any):
        self.code = code
        self.reason = reason
        self.extra = extra
        super().__init__(reason)


def error_response(code: int, reason: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"status": "error", "error": reason, **extra}, status_code=code)


def ok(data: Any, code: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=code)


async def json_body(request: Request, schema: str | None = None) -> Any:
    """The request body as JSON, validated against ``schemas/<schema>.schema.json``."""
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip()
    if ctype not in ("application/json", "") and not ctype.endswith("+json"):
        raise HTTPError(415, f"expected a JSON body (Content-Type: application/json), got {ctype}")
    raw = await request.body()
    if not raw.strip():
        raise HTTPError(400, "empty body: expected a JSON object")
    try:
        data = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise HTTPError(400, "body is not UTF-8") from exc
    except json.JSONDecodeError as exc:
        raise HTTPError(400, f"body is not valid JSON: {exc.msg} at line {exc.lineno} "
                             f"column {exc.colno}") from exc
    except RecursionError as exc:
        raise HTTPError(400, "body is nested too deeply") from exc
    if schema:
        problems = schema_errors(schema, data)
        if problems:
            key, message = problems[0]
            raise HTTPError(400, f"{key}: {message}" if key else message)
    return data


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
    tag: str = "healer",
) -> Route:
    """A Starlette route carrying its OpenAPI description."""
    r = Route(path, handler, methods=list(methods))
    r.openapi = {  # type: ignore[attr-defined]
        "summary": summary,
        "request_schema": request_schema,
        "responses": responses or {200: "OK"},
        "query": query or {},
        "tag": tag,
    }
    return r
