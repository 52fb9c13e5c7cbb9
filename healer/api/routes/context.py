"""Webhook intake and incident views over HTTP.

::

    POST /api/v1/webhooks/sentry        Sentry-Hook-Signature (HMAC-SHA256 of the raw body)
    POST /api/v1/webhooks/alertmanager  Authorization: Bearer <webhooks.alertmanager_token>
    POST /api/v1/webhooks/slack         X-Slack-Signature v0 + X-Slack-Request-Timestamp
    GET  /api/v1/context/incidents[?status=open]
    GET  /api/v1/context/incidents/{key}   the record and its audit trail

Webhooks are exempt from the API's bearer token: each carries its own authentication, and an
unconfigured secret refuses everything (401). They answer at once — 202 with what became of
each signal — and heal in the background. Every delivery is counted in
``healer_webhooks{source, result}``.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from healer.api.http import HTTPError, json_depth, ok, parse_json, path_name, route
from healer.context import ingest
from healer.context.incidents import STATUSES
from healer.context.sentry import RESOURCES, from_sentry
from healer.context.service import ContextService, service_for
from healer.core.names import safe_name
from healer.errors import UsageError

MAX_FORM_FIELDS = 50


def _svc(request: Request) -> ContextService:
    return service_for(request.app.state.ctx)


def _count(request: Request, source: str, result: str) -> None:
    request.app.state.ctx.metrics.webhooks.labels(source=source, result=result).inc()


def _json(raw: bytes, source: str, request: Request) -> Any:
    try:
        return parse_json(raw, max_depth=json_depth(request))
    except HTTPError:
        _count(request, source, "invalid")
        raise


def _accepted(request: Request, source: str, receipts: list[Any]) -> Response:
    _count(request, source, "accepted" if receipts else "ignored")
    return ok({"status": "accepted" if receipts else "ignored",
               "incidents": [r.as_dict() for r in receipts]}, 202 if receipts else 200)


async def sentry(request: Request) -> Response:
    svc = _svc(request)
    raw = await request.body()
    if not ingest.verify_sentry(svc.settings.webhooks.sentry_client_secret, raw,
                                request.headers.get("sentry-hook-signature")):
        _count(request, "sentry", "unauthorized")
        why = ("no Sentry client secret is configured (webhooks.sentry_client_secret)"
               if not svc.settings.webhooks.sentry_client_secret else
               "missing or wrong Sentry-Hook-Signature")
        raise HTTPError(401, why)
    resource = request.headers.get("sentry-hook-resource", "")
    body = _json(raw, "sentry", request)
    if resource not in RESOURCES:
        _count(request, "sentry", "ignored")
        return ok({"status": "ignored", "reason": f"resource {resource or '(none)'!r} is not "
                   f"handled ({', '.join(RESOURCES)})"})
    try:
        signals = from_sentry(resource, body, svc.root)
    except UsageError as exc:
        _count(request, "sentry", "invalid")
        raise HTTPError(400, str(exc)) from exc
    if svc.book.replayed("sentry", raw):
        _count(request, "sentry", "duplicate")
        return ok({"status": "duplicate", "reason": "this delivery was already received"})
    return _accepted(request, "sentry", await svc.ingest(signals))


async def alertmanager(request: Request) -> Response:
    svc = _svc(request)
    token = svc.settings.webhooks.alertmanager_token
    if not ingest.verify_bearer(token, request.headers.get("authorization")):
        _count(request, "alertmanager", "unauthorized")
        why = ("no Alertmanager token is configured (webhooks.alertmanager_token)" if not token
               else "missing or wrong bearer token")
        return JSONResponse({"status": "error", "error": why}, status_code=401,
                            headers={"WWW-Authenticate": "Bearer"})
    body = _json(await request.body(), "alertmanager", request)
    try:
        signals = ingest.from_alertmanager(body, svc.root)
    except UsageError as exc:
        _count(request, "alertmanager", "invalid")
        raise HTTPError(400, str(exc)) from exc
    return _accepted(request, "alertmanager", await svc.ingest(signals))


def _slack_reply(text: str) -> Response:
    return ok({"response_type": "ephemeral", "text": text})


async def slack(request: Request) -> Response:
    svc = _svc(request)
    hooks = svc.settings.webhooks
    raw = await request.body()
    why = ingest.verify_slack(hooks.slack_signing_secret,
                              request.headers.get("x-slack-request-timestamp"), raw,
                              request.headers.get("x-slack-signature"), now=time.time(),
                              max_age_s=hooks.slack_max_age_s)
    if why:
        _count(request, "slack", "unauthorized")
        raise HTTPError(401, why)
    try:
        fields = parse_qs(raw.decode("utf-8"), keep_blank_values=True,
                          max_num_fields=MAX_FORM_FIELDS)
    except (UnicodeDecodeError, ValueError) as exc:
        _count(request, "slack", "invalid")
        raise HTTPError(400, "body is not a Slack form post") from exc
    form = {k: v[0] for k, v in fields.items()}
    try:
        signal = ingest.from_slack(form, svc.root)
    except UsageError as exc:
        _count(request, "slack", "invalid")
        return _slack_reply(str(exc))  # Slack shows a 200's text to the person who typed it
    if svc.book.replayed("slack", raw):
        _count(request, "slack", "duplicate")
        return _slack_reply("healer already received this report.")
    (receipt,) = await svc.ingest([signal])
    _count(request, "slack", "accepted")
    where = signal.error.file if signal.error and signal.error.file else "no file named"
    if receipt.heal:
        text = (f"healer opened incident `{receipt.key}` ({where}) and started a healing run "
                f"(attempt `{receipt.attempt_id}`).")
    elif receipt.action == "duplicate":
        text = f"healer already tracks this as incident `{receipt.key}`."
    else:
        text = (f"healer recorded incident `{receipt.key}` ({where}); not healing now: "
                f"{receipt.message or receipt.action}")
    return _slack_reply(text)


async def incidents(request: Request) -> Response:
    status = request.query_params.get("status")
    if status is not None and status not in STATUSES:
        raise HTTPError(400, f"status must be one of {', '.join(STATUSES)}")
    found = _svc(request).book.all(status)
    return ok({"status": "ok", "count": len(found), "incidents": found})


async def incident(request: Request) -> Response:
    key = path_name(request, "key", safe_name)
    svc = _svc(request)
    data = svc.book.get(key)
    if data is None:
        raise HTTPError(404, f"no incident {key}")
    return ok({"status": "ok", "incident": data, "audit": svc.book.audit.read(key)[-200:]})


def routes(ctx: Any) -> list[BaseRoute]:
    webhook = {202: "Accepted: what became of each signal", 200: "Ignored or duplicate",
               400: "Malformed payload", 401: "Authentication failed or not configured"}
    return [
        route("/api/v1/webhooks/sentry", sentry, methods=("POST",), tag="context",
              summary="Sentry integration webhook (event_alert, issue, error, metric_alert)",
              responses=webhook),
        route("/api/v1/webhooks/alertmanager", alertmanager, methods=("POST",), tag="context",
              summary="Alertmanager webhook v4 (bearer token)", responses=webhook),
        route("/api/v1/webhooks/slack", slack, methods=("POST",), tag="context",
              summary="Slack slash command / message action: report an error by hand",
              responses={200: "A message for the person who reported", 401: "Bad signature"}),
        route("/api/v1/context/incidents", incidents, tag="context",
              summary="Living-context incidents, newest first",
              query={"status": {"type": "string", "enum": list(STATUSES)}},
              responses={200: "OK", 400: "unknown status"}),
        route("/api/v1/context/incidents/{key}", incident, tag="context",
              summary="One living-context incident and its audit trail",
              responses={200: "OK", 404: "No such incident"}),
    ]
