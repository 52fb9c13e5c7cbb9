"""HTTP routes of the play healer (shapes as the CTO platform's healer on port 8083)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from healer.api.http import HTTPError, int_query, json_body, ok, path_name, route
from healer.core.names import safe_name
from healer.errors import HostNotAllowedError, NotFoundError
from healer.play.sessions import AlreadyActive, SessionRegistry, summary


def _play(request: Request) -> Any:
    """The PlayService (registry + pre-flight + remediation) of this app."""
    ctx = request.app.state.ctx
    svc = ctx.services.get("play")
    if svc is None:
        from healer.play.service import PlayService

        svc = ctx.services["play"] = PlayService(ctx.settings, ctx.store, metrics=ctx.metrics)
    return svc


def _registry(request: Request) -> SessionRegistry:
    return _play(request).registry  # type: ignore[no-any-return]


async def start(request: Request) -> Response:
    body = await json_body(request, "session-start")
    svc = _play(request)
    try:
        if svc.registry.store.writes_wait:
            # Waiting for the disk (or the network) releases the GIL: in threads,
            # concurrent starts wait together (one group commit).
            data = await asyncio.to_thread(svc.start_session, body)
        else:
            data = svc.start_session(body)  # visible at once, synced in the background
    except AlreadyActive as exc:
        raise HTTPError(409, str(exc)) from exc
    except HostNotAllowedError as exc:
        raise HTTPError(400, str(exc), setting=exc.setting) from exc
    if data.get("tools_server"):
        svc.track(svc.check_tools_server(data["play_id"]))
    return ok({"status": "ok", "session_id": data["session_id"],
               "message": f"Session started for play {data['play_id']} with "
                          f"{len(data['expected_tools'])} agent(s) and "
                          f"{len(data['tasks'])} task(s)"})


async def get_session(request: Request) -> Response:
    play_id = path_name(request, "play_id", safe_name)
    data = _registry(request).get(play_id)
    if data is None:
        raise HTTPError(404, f"no session for play {play_id}")
    return ok({"status": "ok", "session": data})


async def list_sessions(request: Request) -> Response:
    limit = int_query(request, "limit", 100, 1, 1000)
    offset = int_query(request, "offset", 0, 0, 10_000_000)
    status = request.query_params.get("status")
    if status is not None and status not in ("active", "completed", "failed", "cancelled"):
        raise HTTPError(400, "status must be active, completed, failed or cancelled")
    total, page = _registry(request).list_all(limit=limit, offset=offset, status=status)
    return ok({"status": "ok", "count": len(page), "total": total, "sessions": page})


# The encoded answer for the registry's current list object (list_active returns the same
# object until a session changes). Holding the list itself, not its id, rules out a new list
# that happens to reuse a freed one's id.
_ACTIVE_BODY: tuple[list[dict[str, Any]] | None, bytes] = (None, b"")


async def list_active(request: Request) -> Response:
    global _ACTIVE_BODY
    sessions = _registry(request).list_active()
    if _ACTIVE_BODY[0] is not sessions:
        body = json.dumps({"status": "ok", "count": len(sessions), "sessions": sessions},
                          separators=(",", ":")).encode()
        _ACTIVE_BODY = (sessions, body)
    return Response(_ACTIVE_BODY[1], media_type="application/json")


async def finish(request: Request) -> Response:
    play_id = path_name(request, "play_id", safe_name)
    raw = await request.body()
    body = await json_body(request, "session-finish") if raw.strip() else {}
    try:
        data = await asyncio.to_thread(_play(request).finish_session, play_id,
                                       body.get("status", "completed"), body.get("reason", ""))
    except NotFoundError as exc:
        raise HTTPError(404, f"no session for play {play_id}") from exc
    return ok({"status": "ok", "session": summary(data),
               "message": f"Session {play_id} {data['status']}"})


async def inventory(request: Request) -> Response:
    play_id = path_name(request, "play_id", safe_name)
    body = await json_body(request, "tool-inventory")
    try:
        verdict = await _play(request).record_inventory(play_id, body)
    except NotFoundError as exc:
        raise HTTPError(404, f"no session for play {play_id}") from exc
    return ok({"status": "ok", **verdict})


async def logs(request: Request) -> Response:
    play_id = path_name(request, "play_id", safe_name)
    body = await json_body(request, "agent-logs")
    try:
        verdict = await _play(request).ingest_logs(play_id, body["agent"], body["lines"],
                                                   task_id=body.get("task_id"))
    except NotFoundError as exc:
        raise HTTPError(404, f"no session for play {play_id}") from exc
    return ok({"status": "ok", **verdict})


def routes(ctx: Any) -> list[BaseRoute]:
    tag = "play sessions"
    return [
        route("/api/v1/session/start", start, methods=("POST",), tag=tag,
              summary="Register a play and the tools each agent must have",
              request_schema="session-start",
              responses={200: "session started", 400: "invalid body, or a tools_server host "
                         "outside play.tools_server_hosts", 409: "already active"}),
        route("/api/v1/session/{play_id}", get_session, tag=tag, summary="One session",
              responses={200: "the session", 400: "unsafe play id", 404: "unknown play"}),
        route("/api/v1/sessions", list_sessions, tag=tag, summary="All sessions (paged)",
              query={"limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                     "offset": {"type": "integer", "minimum": 0, "maximum": 10_000_000},
                     "status": {"enum": ["active", "completed", "failed", "cancelled"]}},
              responses={200: "sessions", 400: "bad query"}),
        route("/api/v1/sessions/active", list_active, tag=tag, summary="Active sessions"),
        route("/api/v1/session/{play_id}/finish", finish, methods=("POST",), tag=tag,
              summary="Mark a play completed, failed or cancelled",
              request_schema="session-finish", body_required=False,
              responses={200: "finished", 400: "invalid", 404: "unknown play"}),
        route("/api/v1/session/{play_id}/inventory", inventory, methods=("POST",), tag=tag,
              summary="An agent reports the tools it can see (pre-flight)",
              request_schema="tool-inventory",
              responses={200: "pre-flight verdict", 400: "invalid", 404: "unknown play"}),
        route("/api/v1/session/{play_id}/logs", logs, methods=("POST",), tag=tag,
              summary="Agent log lines, scanned for failure patterns",
              request_schema="agent-logs",
              responses={200: "alerts found", 400: "invalid", 404: "unknown play"}),
    ]
