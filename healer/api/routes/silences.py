"""Silences and acknowledgements over HTTP (``healer.core.silences``, ``Ledger.acknowledge``).

::

    GET    /api/v1/silences[?expired=1]   the silences (active and pending; with expired=1
                                          also those that ended)
    POST   /api/v1/silences               {"matchers": ["kind=code", {"name", "op", "value"}],
                                           "duration"?: "2h" | "ends_at"?: epoch,
                                           "starts_at"?: epoch, "by"?, "comment"?}  → 201
    DELETE /api/v1/silences/{id}          expire it now
    POST   /api/v1/incidents/{id}/ack     {"by"?}  a person takes the incident

Like approving, every change needs the API token even on loopback (403 naming ``api.token``
without one configured): a silence stops agents and notifications, an acknowledgement tells
PagerDuty someone is on it — neither may come from an anonymous caller. The author is
recorded as ``<by> (api token)``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from healer.api.http import API_CALLER, HTTPError, has_token, json_body, ok, path_name, route
from healer.core.audit import Audit
from healer.core.incidents import Ledger, public_view
from healer.core.names import safe_name
from healer.core.silences import Matcher, Silences, parse_duration
from healer.errors import NotFoundError, UsageError

DEFAULT_DURATION = "2h"
EXPIRED_FLAGS = ("0", "1", "true", "false")


def _need_token(request: Request, what: str) -> None:
    if not request.app.state.ctx.settings.api.token:
        raise HTTPError(403, f"{what} need the API token: set api.token (HEALER_TOKEN), "
                             "restart healer and send Authorization: Bearer <token>; or use "
                             "the healer command on the machine")
    if not has_token(request):  # the guard refused these already; never act on less
        raise HTTPError(401, "missing or wrong bearer token")


def _who(body: dict[str, Any]) -> str:
    by = " ".join(str(body.get("by") or "").split())[:80]
    return f"{by} ({API_CALLER})" if by else API_CALLER


def _book(request: Request) -> tuple[Silences, Ledger]:
    ctx = request.app.state.ctx
    audit = Audit(ctx.settings.state_path)
    return Silences(ctx.store, audit=audit), Ledger(ctx.store, audit=audit)


async def list_silences(request: Request) -> Response:
    book, _ = _book(request)
    flag = request.query_params.get("expired", "0")
    if flag not in EXPIRED_FLAGS:
        raise HTTPError(400, f"expired must be one of {', '.join(EXPIRED_FLAGS)}")
    expired = flag in ("1", "true")
    items = book.list(include_expired=expired)
    return ok({"status": "ok", "count": len(items), "silences": items})


async def add_silence(request: Request) -> Response:
    _need_token(request, "silences")
    body = await json_body(request, "silence")
    book, ledger = _book(request)
    try:
        matchers = [Matcher.of(m) for m in body.get("matchers") or ()]
        now = book.clock()
        starts = float(body["starts_at"]) if body.get("starts_at") is not None else None
        if body.get("ends_at") is not None:
            ends = float(body["ends_at"])
        else:
            ends = (starts or now) + parse_duration(str(body.get("duration") or
                                                        DEFAULT_DURATION))
        made = book.add(matchers, starts_at=starts, ends_at=ends, author=_who(body),
                        comment=str(body.get("comment") or ""))
    except UsageError as exc:
        raise HTTPError(400, str(exc)) from None
    book.reconcile(ledger)
    return ok({"status": "ok", "silence": made}, 201)


async def expire_silence(request: Request) -> Response:
    _need_token(request, "silences")
    book, ledger = _book(request)
    try:
        gone = book.expire(request.path_params["id"], by=API_CALLER)
    except UsageError as exc:
        raise HTTPError(400, str(exc)) from None
    except NotFoundError:
        raise HTTPError(404, f"no silence {request.path_params['id']}") from None
    book.reconcile(ledger)
    return ok({"status": "ok", "silence": gone})


async def ack(request: Request) -> Response:
    _need_token(request, "acknowledgements")
    iid = path_name(request, "id", safe_name)
    raw = await request.body()
    body = await json_body(request, "approval") if raw.strip() else {}
    _, ledger = _book(request)
    try:
        data = ledger.acknowledge(iid, by=_who(body), via="api")
    except NotFoundError:
        raise HTTPError(404, f"no incident {iid}") from None
    except UsageError as exc:
        raise HTTPError(409, str(exc)) from None
    return ok({"status": "ok", "incident": public_view(data)})


async def _silences(request: Request) -> Response:
    return await (add_silence if request.method == "POST" else list_silences)(request)


def routes(ctx: Any) -> list[BaseRoute]:
    change = {401: "Missing or wrong bearer token",
              403: "No api.token configured: changes over the API are off"}
    # One route serves both methods (so a 405 lists both in Allow); the two after it only
    # describe them in /openapi.json and are never reached.
    both = Route("/api/v1/silences", _silences, methods=["GET", "POST"],
                 include_in_schema=False)
    return [
        both,
        route("/api/v1/silences", list_silences, tag="silences",
              summary="Silences: active and pending (expired=1: also those that ended)",
              query={"expired": {"type": "string", "enum": list(EXPIRED_FLAGS)}},
              responses={200: "OK", 400: "expired is not 0, 1, true or false"}),
        route("/api/v1/silences", add_silence, methods=("POST",), tag="silences",
              summary="Silence what matches: recorded and counted, no agent, no "
                      "notification, until it ends; needs the API token",
              request_schema="silence",
              responses={201: "Created", 400: "Bad matcher, time or duration", **change}),
        route("/api/v1/silences/{id}", expire_silence, methods=("DELETE",), tag="silences",
              summary="Expire a silence now; needs the API token",
              params={"id": {"type": "string", "pattern": "^s-[0-9a-f]{12}$"}},
              responses={200: "Expired (or it had ended already)", 400: "Not a silence id",
                         404: "No such silence", **change}),
        route("/api/v1/incidents/{id}/ack", ack, methods=("POST",), tag="incidents",
              summary="A person acknowledges an incident (PagerDuty and the chat message are "
                      "told); needs the API token",
              request_schema="approval", body_required=False,
              responses={200: "Acknowledged", 400: "Bad id or body", 404: "No such incident",
                         409: "Resolved, or acknowledged already", **change}),
    ]
