"""uvicorn's HTTP protocol with a deadline on request headers (slow-client protection).

uvicorn times out idle keep-alive connections, but a client that connects and then sends its
headers one byte at a time (or nothing at all) holds a connection for ever: any byte cancels
the keep-alive timer. Here a connection must deliver a request's complete headers within
``header_timeout_s`` of connecting or of its previous response, or it is closed. The body's
deadline is the API guard's (``api.body_timeout_s``), where a 408 can still be answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is part of uvicorn[standard]; without it uvicorn picks h11
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


def protocol_class(header_timeout_s: float) -> Any:
    """The protocol class for ``uvicorn.Config(http=...)``, or ``"auto"`` without httptools."""
    if HttpToolsProtocol is None:
        return "auto"

    class HeaderDeadlineProtocol(HttpToolsProtocol):  # type: ignore[misc,valid-type]
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            _no_delay(transport)
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # A pipelined request already has its headers; it gets its deadline after it.
            if not self.transport.is_closing() and not self.pipeline:
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(header_timeout_s, self._head_timeout)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timeout(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadlineProtocol


def _no_delay(transport: asyncio.BaseTransport) -> None:
    """TCP_NODELAY on the connection. uvicorn writes a response's head and body separately;
    with Nagle's algorithm on, the body waits for the client's delayed ACK — about 40 ms on
    every request over loopback (measured: every API call took 44 ms, /health included)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

