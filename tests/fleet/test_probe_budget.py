"""A probe's timeout is the peer's: setting up the way there (a one-shot CLI's first connect to
its local NATS server) has a budget of its own, so a slow start is not reported as a broken
channel."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlsplit

import pytest
from fleet_helpers import SlowStart

from healer.fleet.channels import FleetContext, probe_peer

pytestmark = pytest.mark.e2e


async def test_a_slow_first_connect_is_not_a_broken_nats_channel(fleet: Any,
                                                                 tmp_path: Any) -> None:
    """The local NATS server greets after 1.5 s of a 2 s timeout: the connect fits its own
    budget and the ping to the peer gets the whole of another, so NATS reports ok (with
    two thirds of one timeout for both, as before, it was "unreachable")."""
    real = urlsplit(fleet.node("n1").nats_url)
    async with SlowStart((real.hostname, real.port), delay=1.5) as url:
        ctx = FleetContext.open(fleet.settings(
            state_dir=str(tmp_path / "state"), results_dir=str(tmp_path / "results"),
            **{"fleet.nats_url": url, "fleet.channels": "nats",
               "fleet.timeouts": json.dumps({"nats": 2.0})}))
        try:
            found = await probe_peer(ctx, ctx.view.peer("n2"))
        finally:
            await ctx.aclose()
    out = found.channels["nats"]
    assert out.ok, out.detail
    assert out.detail == "pong from n2"
    # The latency shown is the peer's answer, not the wait for the local server.
    assert out.latency_ms is not None and out.latency_ms < 1500


async def test_a_slow_http_client_set_up_is_not_on_a_probe_s_clock(
        fleet: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Making the HTTP client (httpx's import, in a one-shot CLI) takes 1.5 s, longer than the
    tunnel's whole timeout: it is done before the probes start, so a killed tunnel reads
    "connection refused", not "timed out"."""
    made = FleetContext.http

    def slow(self: FleetContext) -> Any:
        if self._http is None:
            time.sleep(1.5)
        return made.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(FleetContext, "http", property(slow))
    fleet.kill_tunnel("n3")
    ctx = FleetContext.open(fleet.settings(
        state_dir=str(tmp_path / "state"), results_dir=str(tmp_path / "results"),
        **{"fleet.channels": "tunnel", "fleet.timeouts": json.dumps({"tunnel": 1.0})}))
    try:
        found = await probe_peer(ctx, ctx.view.peer("n3"))
    finally:
        await ctx.aclose()
    out = found.channels["tunnel"]
    assert not out.ok and "refused" in out.detail, out.detail
