"""One NATS connection that keeps itself up: connect in the background, retry, resubscribe.

nats-py reconnects a connection it once had; a first connection that fails raises. A node or a
healer must come up even when its NATS server is down (that is a fault to heal, not a reason
not to start), so ``NatsLink`` keeps trying in the background and re-applies its subscriptions
to every new connection. ``reconnect()`` drops the connection and starts a fresh one — what a
daemon does when told its NATS link is stale.

Credentials (``healer.core.nats_auth.NatsAuth``: user and password, a token, or a ``.creds``
file; subject permissions are the server's) come from ``fleet.nats_*``.

Subjects::

    fleet.<node>.message     request: a fleet message → reply {"status": "delivered"}
    fleet.<node>.ping        request: {"from"} → reply {"nodeId", "ts"}
    fleet.<node>.heartbeat   published every heartbeat_s: {"nodeId", "host", "port", …}
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from healer.core.nats_auth import NatsAuth

log = logging.getLogger(__name__)

Handler = Callable[[Any], Awaitable[None]]


def subject(node: str, what: str) -> str:
    return f"fleet.{node}.{what}"


HEARTBEATS = "fleet.*.heartbeat"


class LinkDown(Exception):
    """No NATS connection right now."""


class NatsLink:
    """A self-healing NATS client connection."""

    def __init__(self, url: str, *, name: str = "healer", connect_timeout: float = 2.0,
                 reconnect_wait: float = 0.5, auth: NatsAuth | None = None):
        self.url = url
        self.auth = auth or NatsAuth()
        self.name = name
        self.connect_timeout = connect_timeout
        self.reconnect_wait = reconnect_wait
        self.nc: Any = None
        self.last_error = ""
        self.connects = 0  # fresh connections made (not nats-py's own reconnects)
        self._subs: list[tuple[str, Handler]] = []
        self._task: asyncio.Task[None] | None = None
        self._up = asyncio.Event()
        self._closing = False

    @property
    def connected(self) -> bool:
        return self.nc is not None and self.nc.is_connected

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._closing = False
            self._task = asyncio.create_task(self._keep(), name=f"nats-link-{self.name}")

    async def _connect_once(self) -> Any:
        import nats

        async def on_error(exc: Exception) -> None:
            self.last_error = f"{type(exc).__name__}: {exc}"[:300]

        async def on_disconnect() -> None:
            self._up.clear()

        async def on_reconnect() -> None:
            self._up.set()

        return await nats.connect(
            servers=[self.url], name=self.name, connect_timeout=self.connect_timeout,
            allow_reconnect=True, max_reconnect_attempts=-1,
            reconnect_time_wait=self.reconnect_wait, ping_interval=5, max_outstanding_pings=2,
            error_cb=on_error, disconnected_cb=on_disconnect, reconnected_cb=on_reconnect,
            **self.auth.options())

    async def _keep(self) -> None:
        while not self._closing:
            if self.nc is None or self.nc.is_closed:
                try:
                    nc = await self._connect_once()
                except Exception as exc:  # no server yet: a fault to report, not a crash
                    self.last_error = f"{type(exc).__name__}: {exc}"[:300] or "no server"
                    await asyncio.sleep(self.reconnect_wait * 2)
                    continue
                for subj, handler in list(self._subs):
                    await nc.subscribe(subj, cb=handler)
                self.nc = nc
                self.connects += 1
                self._up.set()
                log.debug("nats link %s connected to %s", self.name, self.url)
            await asyncio.sleep(self.reconnect_wait)

    async def wait_connected(self, timeout: float) -> bool:
        self.start()
        if self.connected:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._up.wait(), timeout)
        return self.connected

    async def subscribe(self, subj: str, handler: Handler) -> None:
        """Call ``handler(msg)`` for every message on ``subj``, across reconnections."""
        self._subs.append((subj, handler))
        if self.nc is not None and not self.nc.is_closed:
            await self.nc.subscribe(subj, cb=handler)

    async def request(self, subj: str, data: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Request/reply with a JSON body; raises LinkDown, nats errors or TimeoutError."""
        if not self.connected:
            raise LinkDown(f"not connected to {self.url}" + (f" ({self.last_error})"
                                                             if self.last_error else ""))
        msg = await self.nc.request(subj, json.dumps(data).encode(), timeout=timeout)
        reply = json.loads(msg.data or b"{}")
        if not isinstance(reply, dict):
            raise ValueError("reply is not a JSON object")
        return reply

    async def publish(self, subj: str, data: dict[str, Any]) -> bool:
        if not self.connected:
            return False
        await self.nc.publish(subj, json.dumps(data).encode())
        return True

    async def reconnect(self) -> None:
        """Drop the connection; the keeper makes a fresh one (with every subscription)."""
        nc, self.nc = self.nc, None
        self._up.clear()
        if nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), 2)
        self.start()

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        nc, self.nc = self.nc, None
        if nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), 2)
