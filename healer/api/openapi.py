"""``GET /openapi.json``: every JSON route, with request bodies from the schemas/ files.

Routes made with ``include_in_schema=False`` (the HTML dashboard, ``healer.api.dashboard``)
are left out: they answer HTML to a logged-in browser, not JSON to a client."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from starlette.routing import BaseRoute, Route

from healer import __version__
from healer.core.schemas import schema

_PARAM = re.compile(r"{([^}:]+)(?::[^}]+)?}")
_ERROR = {
    "type": "object",
    "required": ["status", "error"],
    "properties": {"status": {"const": "error"}, "error": {"type": "string"}},
}


def _strip(s: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in s.items() if k not in ("$schema", "$id")}


# Answers any operation may give before its handler runs (healer.api.guard).
_GUARD = {"403": "cross-origin request refused", "421": "Host header not served here"}
_BODY = {"400": "malformed body or parameters", "408": "body arrived too slowly",
         "413": "body too large", "415": "not a JSON body"}
# healer.core.names.safe_name as a schema: letters, digits, . _ -, no "..".
_NAME = {"type": "string", "pattern": "^(?!.*\\.\\.)[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"}


def _error(text: str) -> dict[str, Any]:
    return {"description": text, "content": {"application/json": {"schema": _ERROR}}}


def build(routes: list[BaseRoute], *, bearer: bool,
          public: Callable[[str, str], bool] = lambda method, path: False) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes``. ``public(method, path)``: needs no token."""
    paths: dict[str, Any] = {}
    for r in routes:
        if not isinstance(r, Route) or not r.include_in_schema:
            continue  # the HTML dashboard is a page for people, not part of the JSON API
        meta = getattr(r, "openapi", None) or {"summary": r.name, "responses": {200: "OK"},
                                               "request_schema": None, "query": {},
                                               "tag": "healer"}
        path = _PARAM.sub(r"{\1}", r.path)
        names = _PARAM.findall(r.path)
        params = [{"name": name, "in": "path", "required": True,
                   "schema": meta.get("params", {}).get(name, _NAME)} for name in names]
        params += [{"name": n, "in": "query", "required": False, "schema": s}
                   for n, s in meta["query"].items()]
        for method in sorted((r.methods or set()) - {"HEAD"}):
            op_id = method.lower() + re.sub(r"\W+", "_", path).rstrip("_")
            op: dict[str, Any] = {"summary": meta["summary"], "tags": [meta["tag"]],
                                  "operationId": op_id, "responses": {}}
            if params:
                op["parameters"] = params
            if meta["request_schema"]:
                op["requestBody"] = {"required": meta.get("body_required", True), "content": {
                    "application/json": {"schema": _strip(schema(meta["request_schema"]))}}}
            for code, text in meta["responses"].items():
                op["responses"][str(code)] = (_error(text) if code >= 400
                                              else {"description": text})
            extra = dict(_GUARD)
            if params:
                extra["400"] = "bad parameters"
            if names:
                extra["404"] = "not found"
            if method != "GET":
                extra.update(_BODY)
            if bearer and not public(method, r.path):
                op["security"] = [{"bearer": []}]
                extra["401"] = "missing or wrong token"
            for code, text in extra.items():
                op["responses"].setdefault(code, _error(text))
            paths.setdefault(path, {})[method.lower()] = op
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "healer", "version": __version__,
                 "description": "Self-healing for fleets of AI coding agents."},
        "paths": paths,
    }
    if bearer:
        doc["components"] = {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
    return doc
