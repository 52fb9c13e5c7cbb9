"""A probe's timeout is the peer's: setting up the way there (a one-shot CLI's first connect to
its local NATS server) has a budget of its own, so a slow start is not reported as a broken
channel."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import urlsplit

import pytest

from healer.fleet.channels import FleetContext, probe_peer

pytestmark = pytest.mark.e2e


class SlowStart:
    """A loopback TCP relay that holds every new connection ``delay`` seconds before it lets
    a byte through: a NATS server that is slow to greet (a busy machine)."""

    def __init__(self, target: tuple[str, int], delay: float):
        self.target, self.delay = target, delay
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"nats://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        await asyncio.sleep(self.delay)
        ur, uw = await asyncio.open_connection(*self.target)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(pipe(r, uw), pipe(ur, w))


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
