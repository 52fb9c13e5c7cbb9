"""``POST /api/v1/webhooks/github``: GitHub's webhook for the play PR watcher.

Public like the other webhooks (no API token: GitHub cannot send one), authenticated by its
signature: ``X-Hub-Signature-256`` must be ``sha256=`` and the HMAC-SHA256 of the raw body
under ``github.webhook_secret``. In order, before anything is stored:

* no secret configured → 404 (the route is not set up; nothing unsigned is ever accepted);
* a body over ``github.max_body_bytes`` → 413;
* a missing, forged or non-``sha256`` signature → 401;
* no usable ``X-GitHub-Delivery`` or ``X-GitHub-Event`` → 400; a body that is not strict JSON
  or not the shape GitHub sends for that event → 400;
* a delivery id seen before (within ``github.delivery_ttl_s``) → 200 ``duplicate``;
* an event healer does not handle → 200 ``ignored``; ``ping`` → 200;
* otherwise → 202 with the PRs it touched (200 ``ignored`` when it concerns no tracked PR of an
  active play).

Counted in ``healer_webhooks{source="github", result}``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from healer.api.http import HTTPError, json_depth, ok, parse_json, route
from healer.core.names import is_safe_name
from healer.errors import UsageError
from healer.play.alerts import AlertSink
from healer.play.github import webhook
from healer.play.github.watcher import GitHubWatcher

MAX_DELIVERY_ID = 100


def _count(request: Request, result: str) -> None:
    request.app.state.ctx.metrics.webhooks.labels(source="github", result=result).inc()


def _refuse(request: Request, code: int, result: str, reason: str) -> HTTPError:
    _count(request, result)
    return HTTPError(code, reason)


def watcher_for(ctx: Any) -> GitHubWatcher:
    """The loop's watcher, or (an app without the loop) one made for this app."""
    watcher: GitHubWatcher | None = ctx.services.get("github")
    if watcher is None:
        play = ctx.services.get("play")
        if play is None:
            from healer.play.service import PlayService

            play = ctx.services["play"] = PlayService(ctx.settings, ctx.store,
                                                      metrics=ctx.metrics)
        sink = AlertSink.for_play(play)
        watcher = ctx.services["github"] = GitHubWatcher(ctx.settings, ctx.store,
                                                         sink=lambda: sink)
    return watcher


async def github(request: Request) -> Response:
    ctx = request.app.state.ctx
    gh = ctx.settings.github
    if not gh.webhook_secret:
        raise _refuse(request, 404, "unconfigured", "the GitHub webhook is not configured "
                      "(set github.webhook_secret / HEALER_GITHUB_WEBHOOK_SECRET)")
    raw = await request.body()
    if len(raw) > gh.max_body_bytes:
        raise _refuse(request, 413, "invalid", f"body larger than {gh.max_body_bytes} bytes")
    why = webhook.verify_signature(gh.webhook_secret, raw,
                                   request.headers.get("x-hub-signature-256"))
    if why:
        raise _refuse(request, 401, "unauthorized", why)
    delivery = request.headers.get("x-github-delivery", "").strip()
    event = request.headers.get("x-github-event", "").strip()
    if not delivery or len(delivery) > MAX_DELIVERY_ID or not is_safe_name(delivery):
        raise _refuse(request, 400, "invalid", "missing or unusable X-GitHub-Delivery")
    if not event or not is_safe_name(event):
        raise _refuse(request, 400, "invalid", "missing or unusable X-GitHub-Event")
    try:
        payload = parse_json(raw, max_depth=json_depth(request))
    except HTTPError:
        _count(request, "invalid")
        raise
    try:
        ev = webhook.parse(event, payload)
    except UsageError as exc:
        raise _refuse(request, 400, "invalid", f"{event}: {exc}") from exc
    if ev is None:
        _count(request, "ignored")
        return ok({"status": "ignored", "reason": f"event {event!r} is not handled "
                   f"({', '.join(webhook.EVENTS)})"})
    watcher = watcher_for(ctx)
    if not await asyncio.to_thread(watcher.first_delivery, delivery):
        _count(request, "duplicate")
        return ok({"status": "duplicate", "reason": "this delivery was already received"})
    result = await asyncio.to_thread(webhook.apply, watcher, ev)
    accepted = result["status"] == "accepted"
    _count(request, "accepted" if accepted else "ignored")
    return ok(result, 202 if accepted else 200)


def routes(ctx: Any) -> list[BaseRoute]:
    return [route(
        "/api/v1/webhooks/github", github, methods=("POST",), tag="play sessions",
        summary="GitHub webhook (pull_request, pull_request_review, issue_comment, "
                "check_run, check_suite, status, push, ping), signed X-Hub-Signature-256",
        responses={202: "Accepted: the PRs it touched", 200: "Ping, ignored or duplicate",
                   400: "Malformed delivery", 401: "Missing or wrong signature",
                   404: "Not configured (no webhook secret)", 413: "Body too large"})]
