"""The HTTP routes, mounted in a small Starlette app served by a real uvicorn on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import uvicorn
from selfheal_helpers import FIXABLE_REPORT, SEED_REPORT, serve

from healer.api.app import ApiContext, create_app
from healer.core.store import FileStore
from healer.selfheal.service import SelfHealService

pytestmark = pytest.mark.e2e


@pytest.fixture
def http_service(make_settings: Callable[..., Any]) -> Callable[..., SelfHealService]:
    def make(agent: str = "fix", token: str = "", **selfheal: Any) -> SelfHealService:
        settings = make_settings(agent, worker="task", **selfheal)
        settings.api.token = token
        settings.api.max_body_bytes = 64 * 1024
        return SelfHealService(settings, FileStore(settings.state_path), env={})

    return make


class TestRoutes:
    async def test_report_to_pr_over_http(self, http_service: Any) -> None:
        """POST accepted (202) → duplicate joins (200) → GET shows the attempt reach pr_open."""
        svc = http_service()
        async with serve(svc) as c:
            first = await c.post("/api/v1/errors", json=FIXABLE_REPORT)
            assert first.status_code == 202
            body = first.json()
            assert body["accepted"] is True and body["message"] == "Healing agent dispatched"
            dup = await c.post("/api/v1/errors", json=FIXABLE_REPORT)
            assert dup.status_code == 200
            assert dup.json()["reason"] == "already_investigating"
            assert dup.json()["attempt_id"] == body["attempt_id"]
            await svc.drain(60)
            one = await c.get(f"/api/v1/healing/{body['fingerprint']}")
            assert one.status_code == 200
            assert one.json()["attempts"][0]["status"] == "pr_open"
            listed = (await c.get("/api/v1/healing", params={"limit": 5})).json()
            assert listed["count"] == 1

    async def test_bad_requests(self, http_service: Any) -> None:
        """Not JSON, missing fields, bad limits and bad fingerprints are 400; big bodies 413."""
        async with serve(http_service()) as c:
            json_type = {"content-type": "application/json"}
            assert (await c.post("/api/v1/errors", content=b"{nope",
                                 headers=json_type)).status_code == 400
            assert (await c.post("/api/v1/errors", content=b"{}")).status_code == 415
            missing = await c.post("/api/v1/errors", json={"error_type": "KeyError"})
            assert missing.status_code == 400 and "error_message" in missing.json()["error"]
            assert (await c.post("/api/v1/errors", json=[1])).status_code == 400
            huge = {"error_type": "E", "error_message": "x" * 100_000}
            assert (await c.post("/api/v1/errors", json=huge)).status_code == 413
            assert (await c.get("/api/v1/healing?limit=0")).status_code == 400
            assert (await c.get("/api/v1/healing/not-hex")).status_code == 400
            assert (await c.get("/api/v1/healing/" + "a" * 64)).status_code == 404

    async def test_token_is_required_when_set(self, http_service: Any) -> None:
        """With api.token set, POST and GET need the bearer token (scheme in any case)."""
        async with serve(http_service(token="s3cret-token")) as c:
            denied = await c.post("/api/v1/errors", json=SEED_REPORT)
            assert denied.status_code == 401
            wrong = await c.post("/api/v1/errors", json=SEED_REPORT,
                                 headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            ok = await c.post("/api/v1/errors", json=SEED_REPORT,
                              headers={"Authorization": "Bearer s3cret-token"})
            assert ok.status_code == 202
            assert (await c.get("/api/v1/healing")).status_code == 401
            assert (await c.get("/api/v1/healing", headers={
                "Authorization": "bearer s3cret-token"})).status_code == 200

    async def test_healing_run_flag_is_refused(self, http_service: Any) -> None:
        """A body marked as coming from a healing run gets the recursion refusal."""
        async with serve(http_service()) as c:
            out = await c.post("/api/v1/errors", json={**SEED_REPORT, "healing_run": True})
            assert out.status_code == 200 and out.json()["reason"] == "recursion"


class TestMounting:
    async def test_routes_find_the_service_in_the_api_context(self, make_settings: Any) -> None:
        """In healer's API app the service comes from ctx.services, made on first use."""
        settings = make_settings("fix")
        ctx = ApiContext(settings=settings, store=FileStore(settings.state_path))
        app = create_app(ctx)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                               log_level="warning", lifespan="off"))
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
                listed = await c.get("/api/v1/healing")
                assert listed.status_code == 200 and listed.json()["count"] == 0
                assert isinstance(ctx.services["selfheal"], SelfHealService)
                first = ctx.services["selfheal"]
                await c.get("/api/v1/healing")
                assert ctx.services["selfheal"] is first
        finally:
            server.should_exit = True
            await task
