"""healer's side of the sandbox's network bridges: one Unix socket per allowed endpoint.

Each socket lives in the run's network folder (bind-mounted read-only into the sandbox, where
``healer.agents.sandbox.bridge`` connects to it for every connection the agent opens to that
endpoint). A connection accepted here is forwarded to the real ``host:port`` — resolved and
connected by healer, with healer's network — and the bytes are copied both ways untouched
(TLS passes end to end). Nothing else is reachable: the sandbox has no other route out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Connect = Callable[[str, int], Awaitable[Streams]]
CONNECT_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 64  # at once, per run
_CHUNK = 65536


async def open_tcp(host: str, port: int) -> Streams:
    """The default way out: a TCP connection from healer's own network."""
    return await asyncio.open_connection(host, port)


@dataclass(frozen=True)
class Route:
    """One bridged endpoint: the socket's file name in the folder → the real host and port."""

    socket: str
    host: str
    port: int


class Relay:
    """Serves one run's bridges while the run lasts (``start`` before it, ``close`` after)."""

    def __init__(self, folder: Path, routes: Sequence[Route], *,
                 connect: Connect = open_tcp) -> None:
        self.folder = folder
        self.routes = tuple(routes)
        self.connect = connect
        self.connections = 0  # forwarded so far
        self.refused = 0  # upstream unreachable, or over MAX_CONNECTIONS
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)

    async def start(self) -> None:
        for route in self.routes:
            async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             route: Route = route) -> None:
                await self._forward(route, reader, writer)

            server = await asyncio.start_unix_server(handle, str(self.folder / route.socket))
            self._servers.append(server)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)
        self._servers.clear()

    async def _forward(self, route: Route, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            if self._slots.locked():
                self.refused += 1
                return
            async with self._slots:
                try:
                    up_reader, up_writer = await asyncio.wait_for(
                        self.connect(route.host, route.port), CONNECT_TIMEOUT_S)
                except (OSError, TimeoutError) as exc:
                    self.refused += 1
                    log.info("sandbox bridge to %s:%s failed: %s", route.host, route.port, exc)
                    return
                self.connections += 1
                try:
                    await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
                finally:
                    _close(up_writer)
        finally:
            _close(writer)
            if task is not None:
                self._tasks.discard(task)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        pass


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()
