"""Incidents of every kind over HTTP — the same records ``healer status`` reads.

::

    GET /api/v1/incidents[?kind=play|code|fleet][&status=open|healing|fixed|escalated|resolved]
                         [&limit=20][&offset=0]
    GET /api/v1/incidents/{id}       the record and its audit trail (newest 200 events)

The list is the active incidents first (most recently seen first), then the finished ones,
most recently changed first; ``next_offset`` pages on. A page costs the active set plus the
page, not every incident ever recorded.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from healer.api.http import HTTPError, int_query, ok, path_name, route
from healer.core.audit import Audit
from healer.core.incidents import KINDS, STATUSES, Ledger, public_view
from healer.core.names import safe_name
from healer.errors import UsageError

MAX_LIMIT = 500


def _ledger(request: Request) -> Ledger:
    return Ledger(request.app.state.ctx.store)


async def incidents(request: Request) -> Response:
    kind = request.query_params.get("kind")
    status = request.query_params.get("status")
    limit = int_query(request, "limit", 20, 1, MAX_LIMIT)
    offset = int_query(request, "offset", 0, 0, 10_000_000)
    try:
        page = _ledger(request).list(kind=kind, status=status, limit=limit, offset=offset)
    except UsageError as exc:
        raise HTTPError(400, str(exc)) from None
    return ok({"status": "ok", "total": page.total, "count": len(page.items),
               "offset": page.offset, "limit": page.limit, "next_offset": page.next_offset,
               "incidents": [public_view(i) for i in page.items]})


async def incident(request: Request) -> Response:
    iid = path_name(request, "id", safe_name)
    data = _ledger(request).get(iid)
    if data is None:
        raise HTTPError(404, f"no incident {iid}")
    audit = Audit(request.app.state.ctx.settings.state_path).read(iid, limit=200)
    return ok({"status": "ok", "incident": {**public_view(data), "history": data.get(
        "history", [])}, "audit": audit})


def routes(ctx: Any) -> list[BaseRoute]:
    return [
        route("/api/v1/incidents", incidents, tag="incidents",
              summary="Incidents of every kind: active first, then the most recent, paged",
              query={"kind": {"type": "string", "enum": list(KINDS)},
                     "status": {"type": "string", "enum": list(STATUSES)},
                     "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                     "offset": {"type": "integer", "minimum": 0, "maximum": 10_000_000}},
              responses={200: "OK", 400: "unknown kind or status, bad limit or offset"}),
        route("/api/v1/incidents/{id}", incident, tag="incidents",
              summary="One incident, its history and its audit trail",
              responses={200: "OK", 400: "Not a valid incident id", 404: "No such incident"}),
    ]
