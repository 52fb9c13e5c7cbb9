"""The Sentry-compatible ingest: point any Sentry SDK's DSN at healer.

::

    POST    /api/{project_id}/envelope/   an envelope (event items filed, others skipped)
    POST    /api/{project_id}/store/      one event as JSON (older SDKs)
    OPTIONS both                          CORS preflight for ``ingest.cors_origins``

Authentication is what the SDKs send: ``X-Sentry-Auth: Sentry sentry_key=…`` (or
``Authorization: Sentry …``), ``?sentry_key=`` (browsers), or the ``dsn`` in the envelope
header. No key (or none set up) is 401, a wrong one or one bound to another project 403, and
nothing of the request is kept. Bodies may be gzip, deflate or br
encoded. Over ``ingest.rate_per_s`` the answer is 429 with ``Retry-After`` and
``X-Sentry-Rate-Limits``, which the SDKs honour by holding back. A good request's events are
queued and filed in batches by a background worker (``healer.context.sentry_intake``); when
it is answered ``200 {"id": <event id>}`` depends on ``ingest.answer``:

==========  ===================================================================================
``filed``   once the batch holding its events is in the store: an event answered 200 survives
            the replica dying right after (several replicas on a shared store). Not filed
            within ``ingest.answer_timeout_s`` (10 s), or dropped (the store kept failing):
            ``503`` with ``Retry-After``. Past the bound the events stay queued and may
            still be filed, so a sender that resends may be counted twice, never lost.
``queued``  as soon as it is parsed and queued in memory (one replica, on the file store).
``auto``    ``filed`` unless ``store.backend`` is ``file``; the default.
==========  ===================================================================================

Every request is counted in ``healer_webhooks{source="sentry_sdk", result}`` (``accepted``
once answered 200; ``not_filed`` for the 503).

The key is public (it ships in every browser bundle), so everything filed here is
**anonymous** (``healer.core.trust``): it opens incidents only within the key's flood limits
(``code.new_incidents_per_hour`` per key, ``code.max_open_anonymous``; what they refuse is
counted in ``healer_incidents_dropped`` — the SDK is answered 200, as the protocol wants,
so it does not resend), and no code agent starts for it until a person approves
(``healer approve``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from healer.api.http import route
from healer.context import envelope as env
from healer.context.ingest import Signal
from healer.context.sentry_intake import (
    LINGER_S,
    EventQueue,
    KeyRing,
    RateLimiter,
    answer_mode,
)
from healer.context.service import service_for
from healer.core.trust import dsn_origin
from healer.errors import UsageError

SOURCE = "sentry_sdk"
STATE = "sentry-ingest"
EXPOSED = "X-Sentry-Rate-Limits, Retry-After"
NOT_FILED_RETRY_S = 5  # Retry-After of a 503: the store's failovers take a few seconds


@dataclass
class _Ingest:
    keys: KeyRing
    rate: RateLimiter
    queue: EventQueue
    limits: env.Limits
    answer: Literal["filed", "queued"]  # healer.context.sentry_intake.answer_mode
    answer_timeout_s: float


def _state(request: Request) -> _Ingest:
    ctx = request.app.state.ctx
    st = ctx.services.get(STATE)
    if st is None:
        s = ctx.settings.ingest
        svc = service_for(ctx)
        answer = answer_mode(ctx.settings)
        # Requests that wait for their batch need no linger to become one: what arrives
        # while a batch is being written is the next batch (a group commit).
        linger = 0.0 if answer == "filed" else LINGER_S
        st = ctx.services[STATE] = _Ingest(KeyRing(ctx.settings),
                                           RateLimiter(s.rate_per_s, s.rate_burst),
                                           EventQueue(svc.ingest, s.queue_size, linger),
                                           env.Limits.from_settings(s), answer,
                                           s.answer_timeout_s)
    return st  # type: ignore[no-any-return]


def _count(request: Request, result: str) -> None:
    request.app.state.ctx.metrics.webhooks.labels(source=SOURCE, result=result).inc()


def _cors(request: Request) -> dict[str, str]:
    """CORS headers for a browser page the guard let through (its Origin is allowed)."""
    origin = request.headers.get("origin")
    if not origin:
        return {}
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin",
            "Access-Control-Expose-Headers": EXPOSED}


def _reply(request: Request, code: int, body: dict[str, Any],
           headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(body, status_code=code, headers={**_cors(request), **(headers or {})})


def _refuse(request: Request, code: int, reason: str, result: str,
            headers: dict[str, str] | None = None) -> Response:
    _count(request, result)
    return _reply(request, code, {"status": "error", "error": reason, "detail": reason},
                  headers)


def _given_key(request: Request) -> str:
    pairs = env.auth_pairs(request.headers.get("x-sentry-auth"))
    if not pairs:
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "sentry ":
            pairs = env.auth_pairs(auth)
    return pairs.get("sentry_key") or request.query_params.get("sentry_key", "")


async def _body(request: Request, st: _Ingest) -> bytes:
    raw = await request.body()
    return env.decode_body(raw, request.headers.get("content-encoding"),
                           st.limits.max_decompressed)


async def _file(request: Request, st: _Ingest, key: str, project: str,
                events: list[Any], event_id: str) -> Response:
    status = st.keys.check(key, project)
    if status == 401:
        why = ("no Sentry key is set up (ingest.sentry_keys, HEALER_SENTRY_KEY or `healer "
               "sentry dsn`)" if not st.keys.keys else "missing sentry_key (X-Sentry-Auth, "
               "?sentry_key= or the envelope's dsn)")
        return _refuse(request, 401, why, "unauthorized")
    if status == 403:
        return _refuse(request, 403, "unknown sentry_key, or not one for this project",
                       "forbidden")
    if not events:
        _count(request, "ignored")
        return _reply(request, 200, {"id": event_id} if event_id else {})
    wait = st.rate.take(key, len(events))
    if wait:
        return _refuse(request, 429, f"over ingest.rate_per_s for this key; retry in {wait} s",
                       "rate_limited", {"Retry-After": str(wait),
                                        "X-Sentry-Rate-Limits":
                                        f"{wait}:error;default;security:key:healer_rate"})
    svc = service_for(request.app.state.ctx)
    origin = dsn_origin(project, key)  # the key's own flood-limit bucket
    try:
        signals: list[Signal] = [replace(env.signal_of(e, project, svc.root), origin=origin)
                                 for e in events]
    except (UsageError, ValueError, TypeError) as exc:
        return _refuse(request, 400, f"event not usable: {exc}", "invalid")
    filed = st.queue.offer(signals)
    if filed is None:
        return _refuse(request, 429, "healer's ingest queue is full; retry shortly",
                       "queue_full", {"Retry-After": "1",
                                      "X-Sentry-Rate-Limits": "1:error;default;security:key"})
    if st.answer == "filed":
        why = await _not_filed(filed, st.answer_timeout_s)
        if why:
            # No X-Sentry-Rate-Limits: the SDKs would drop what they send meanwhile.
            return _refuse(request, 503, why, "not_filed",
                           {"Retry-After": str(NOT_FILED_RETRY_S)})
    _count(request, "accepted")
    first = str(events[0].get("event_id") or event_id or "")[:64]
    return _reply(request, 200, {"id": first})


async def _not_filed(filed: asyncio.Future[bool], timeout_s: float) -> str:
    """Wait for the batch holding a request's events: '' once filed, else why not.

    On the bound the future is cancelled, which only stops this wait: the worker files the
    events all the same (``healer.context.sentry_intake``, "Answer")."""
    try:
        async with asyncio.timeout(timeout_s):
            if await filed:
                return ""
    except TimeoutError:
        return (f"not filed within {timeout_s:g} s: the store is slow or unavailable; "
                "retry")
    return "not filed: the store is unavailable; retry"


def _gate(request: Request) -> tuple[_Ingest, str] | Response:
    if not request.app.state.ctx.settings.ingest.enabled:
        return _refuse(request, 404, "the Sentry ingest is disabled (ingest.enabled)",
                       "disabled")
    return _state(request), str(request.path_params["project_id"])


async def envelope(request: Request) -> Response:
    got = _gate(request)
    if isinstance(got, Response):
        return got
    st, project = got
    key = _given_key(request)
    if not key and not st.keys.keys:
        return await _file(request, st, "", project, [], "")  # 401 before reading the body
    try:
        parsed = env.parse_envelope(await _body(request, st), st.limits)
    except env.EnvelopeError as exc:
        return _refuse(request, exc.status, exc.reason, "invalid")
    if not key:
        key, dsn_project = env.dsn_key(parsed.header.get("dsn"))
        if key and dsn_project != project:
            return _refuse(request, 403, "the envelope's dsn names another project",
                           "forbidden")
    event_id = str(parsed.header.get("event_id") or "")
    return await _file(request, st, key, project, parsed.events, event_id)


async def store(request: Request) -> Response:
    got = _gate(request)
    if isinstance(got, Response):
        return got
    st, project = got
    key = _given_key(request)
    if st.keys.check(key, project) != 200:
        return await _file(request, st, key, project, [], "")
    try:
        event = env.parse_store(await _body(request, st), st.limits)
    except env.EnvelopeError as exc:
        return _refuse(request, exc.status, exc.reason, "invalid")
    return await _file(request, st, key, project, [event], "")


async def preflight(request: Request) -> Response:
    """CORS preflight; the guard already refused origins not in ``ingest.cors_origins``."""
    if not request.headers.get("origin"):
        # Not a browser's preflight: a plain OPTIONS, answered with the methods and no CORS.
        return Response(status_code=204, headers={"Allow": "POST, OPTIONS"})
    return Response(status_code=204, headers={
        **_cors(request), "Access-Control-Allow-Methods": "POST, OPTIONS",
        "Access-Control-Allow-Headers": "Content-Type, Content-Encoding, X-Sentry-Auth, "
                                        "Authorization, sentry-trace, baggage",
        "Access-Control-Max-Age": "3600"})


async def close(ctx: Any) -> None:
    st = ctx.services.get(STATE)
    if st is not None:
        await asyncio.shield(st.queue.close())


def routes(ctx: Any) -> list[BaseRoute]:
    answers = {200: "Accepted ({id}); with ingest.answer `filed` once filed, else queued",
               400: "Malformed",
               401: "No key", 403: "Wrong key", 413: "Too large", 415: "Unsupported encoding",
               404: "The ingest is disabled",
               429: "Over the rate (Retry-After, X-Sentry-Rate-Limits)",
               503: "Not filed in time: the store is unavailable (Retry-After)"}
    params = {"project_id": {"type": "integer", "minimum": 0}}
    out: list[BaseRoute] = []
    for name, handler, summary in (
            ("envelope", envelope, "Sentry SDK envelope ingest (event items become incidents)"),
            ("store", store, "Sentry SDK legacy store ingest (one event)")):
        out.append(route(f"/api/{{project_id:int}}/{name}/", handler, methods=("POST",),
                         tag="sentry", summary=summary, responses=answers, params=params,
                         body_required=False))
        out.append(route(f"/api/{{project_id:int}}/{name}/", preflight, methods=("OPTIONS",),
                         tag="sentry", summary="CORS preflight for browser SDKs",
                         params=params, responses={204: "Allowed (CORS headers for an "
                                                   "allowed Origin)", 403: "Origin not allowed"}))
    return out
