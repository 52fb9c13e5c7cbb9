"""Incidents of every kind over HTTP — the same records ``healer status`` reads.

::

    GET /api/v1/incidents[?kind=play|code|fleet][&status=open|healing|fixed|escalated|resolved]
                         [&limit=20][&offset=0]
    GET /api/v1/incidents/{id}       the record and its audit trail (newest 200 events)
    GET /api/v1/approvals            what waits for a person's approval (run or publish)
    POST /api/v1/incidents/{id}/approve   body (optional): {"by"?, "comment"?, "stage"?}
    POST /api/v1/incidents/{id}/deny      the same; the incident is resolved

Approving and denying need the API token even on loopback: the caller must be someone the
operator gave the token to. Without ``api.token`` configured they are refused (403, naming
the setting) — an anonymous caller must never approve what anonymous input asked for. The
verdict is recorded as by ``api token`` (or ``<by> (api token)``), via ``api``. An approved
run is admitted through the one gate and started in this server; an approved publication
opens the PR. 409: nothing of that incident waits for a verdict of that stage.

The list is the active incidents first (most recently seen first), then the finished ones,
most recently changed first; ``next_offset`` pages on. A page costs the active set plus the
page, not every incident ever recorded.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from healer.api.http import (
    API_CALLER,
    HTTPError,
    has_token,
    int_query,
    json_body,
    ok,
    path_name,
    route,
)
from healer.core.audit import Audit
from healer.core.incidents import KINDS, STATUSES, Ledger, public_view
from healer.core.names import safe_name
from healer.errors import ApprovalError, NotFoundError, UsageError

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


async def approvals(request: Request) -> Response:
    from healer.selfheal import approvals as ap

    ctx = request.app.state.ctx
    return ok({"status": "ok", **ap.waiting(ctx.settings, ctx.store)})


def _services(ctx: Any) -> tuple[Any, Any]:
    """This server's report_error and living-context services (made on first use)."""
    from healer.api.routes.errors import _service_of
    from healer.context.service import service_for

    return _service_of(ctx), service_for(ctx)


async def _verdict(request: Request, approve: bool) -> Response:
    from healer.selfheal import approvals as ap

    ctx = request.app.state.ctx
    if not ctx.settings.api.token:
        raise HTTPError(403, "approving and denying need the API token: set api.token "
                             "(HEALER_TOKEN), restart healer and send Authorization: Bearer "
                             "<token>; or use `healer approve` on the machine")
    if not has_token(request):  # the guard refused these already; never act on less
        raise HTTPError(401, "missing or wrong bearer token")
    iid = path_name(request, "id", safe_name)
    raw = await request.body()
    body = await json_body(request, "approval") if raw.strip() else {}
    by = " ".join(str(body.get("by") or "").split())[:80]
    who = f"{by} ({API_CALLER})" if by else API_CALLER
    kw = {"by": who, "via": "api", "comment": str(body.get("comment") or ""),
          "stage": str(body.get("stage") or "")}
    try:
        if approve:
            selfheal, context = _services(ctx)
            out = ap.approve(ctx.settings, ctx.store, iid, selfheal=selfheal, context=context,
                             **kw)
        else:
            out = ap.deny(ctx.settings, ctx.store, iid, **kw)
    except NotFoundError:
        raise HTTPError(404, f"no code incident {iid}") from None
    except ApprovalError as exc:
        raise HTTPError(409, str(exc)) from None
    except UsageError as exc:
        raise HTTPError(400, str(exc)) from None
    data = Ledger(ctx.store).get(out.incident) or {}
    return ok({"status": "ok", **out.as_dict(), "incident": public_view(data)})


async def approve(request: Request) -> Response:
    return await _verdict(request, True)


async def deny(request: Request) -> Response:
    return await _verdict(request, False)


def routes(ctx: Any) -> list[BaseRoute]:
    verdict = {200: "Recorded; what followed it (the gate's decision, the PR)",
               400: "Bad id or body", 401: "Missing or wrong bearer token",
               403: "No api.token configured: approvals over the API are off",
               404: "No such code incident",
               409: "Nothing of this incident waits for a verdict (of that stage)"}
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
        route("/api/v1/approvals", approvals, tag="incidents",
              summary="What waits for a person's approval: code agents to start, held fixes "
                      "to publish", responses={200: "OK"}),
        route("/api/v1/incidents/{id}/approve", approve, methods=("POST",), tag="incidents",
              summary="A person approves what waits on a code incident (run: the agent "
                      "starts; publish: the held fix's PR opens); needs the API token",
              request_schema="approval", body_required=False, responses=verdict),
        route("/api/v1/incidents/{id}/deny", deny, methods=("POST",), tag="incidents",
              summary="A person denies what waits on a code incident (it is resolved; a held "
                      "fix is not published); needs the API token",
              request_schema="approval", body_required=False, responses=verdict),
    ]
