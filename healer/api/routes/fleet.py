"""``GET /api/v1/fleet``: every peer × every channel, heartbeats, watchdog states, healing.

Served live from the loop's fleet service; an API running without the loop (``healer serve``
on the same state dir) answers with the last picture the loop recorded.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from healer.api.http import ok, route


def routes(ctx: Any) -> list[Any]:
    async def fleet(request: Request) -> Response:
        svc = ctx.services.get("fleet")
        if svc is not None:
            return ok({"status": "live", **svc.status()})
        from healer.fleet.service import STATUS

        rec = ctx.store.get(STATUS, "latest")
        if rec is None:
            return ok({"status": "unknown", "peers": {},
                       "detail": "no fleet status recorded yet (is the loop running with a "
                                 "fleet config?)"})
        return ok({"status": "recorded", "recorded_at": rec.updated_at, **rec.data})

    return [route("/api/v1/fleet", fleet, summary="Fleet status: peers × channels, heartbeats, "
                  "healing episodes", tag="fleet")]
