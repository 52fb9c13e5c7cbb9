"""``GET /openapi.json``: every route, with request bodies from the schemas/ files."""

from __future__ import annotations

import re
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


def build(routes: list[BaseRoute], *, bearer: bool) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for r in routes:
        if not isinstance(r, Route):
            continue
        meta = getattr(r, "openapi", None) or {"summary": r.name, "responses": {200: "OK"},
                                               "request_schema": None, "query": {},
                                               "tag": "healer"}
        path = _PARAM.sub(r"{\1}", r.path)
        params = [
            {"name": name, "in": "path", "required": True,
             "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"}}
            for name in _PARAM.findall(r.path)
        ]
        params += [{"name": n, "in": "query", "required": False, "schema": s}
                   for n, s in meta["query"].items()]
        for method in sorted((r.methods or set()) - {"HEAD"}):
            op_id = method.lower() + re.sub(r"\W+", "_", path).rstrip("_")
            op: dict[str, Any] = {"summary": meta["summary"], "tags": [meta["tag"]],
                                  "operationId": op_id, "responses": {}}
            if params:
                op["parameters"] = params
            if meta["request_schema"]:
                op["requestBody"] = {"required": True, "content": {
                    "application/json": {"schema": _strip(schema(meta["request_schema"]))}}}
            for code, text in meta["responses"].items():
                body = {"application/json": {"schema": _ERROR}} if code >= 400 else None
                op["responses"][str(code)] = {"description": text, **(
                    {"content": body} if body else {})}
            if method not in ("GET", "HEAD") and bearer:
                op["security"] = [{"bearer": []}]
                op["responses"].setdefault("401", {"description": "missing or wrong token"})
            if method != "GET":
                op["responses"].setdefault(
                    "413", {"description": "body too large",
                            "content": {"application/json": {"schema": _ERROR}}})
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
