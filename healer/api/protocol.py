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
        # When the connection began waiting for a request's headers (None: not waiting).
        # One timer per connection checks it and re-arms itself while it waits, so a
        # request costs two attribute writes rather than a timer scheduled and cancelled.
        _head_since: float | None = None
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            _no_delay(transport)
            self._arm()

        def on_headers_complete(self) -> None:
            self._head_since = None
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # A pipelined request already has its headers; it gets its deadline after it.
            if not self.transport.is_closing() and not self.pipeline:
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_since = None
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._head_since = self.loop.time()
            if self._head_timer is None:
                self._head_timer = self.loop.call_at(self._head_since + header_timeout_s,
                                                     self._head_check)

        def _head_check(self) -> None:
            self._head_timer = None
            since = self._head_since
            if since is None or self.transport.is_closing():
                return  # headers arrived; the next wait arms a timer again
            due = since + header_timeout_s
            if self.loop.time() >= due:
                self.transport.close()
            else:  # an earlier wait ended in time; this one started later
                self._head_timer = self.loop.call_at(due, self._head_check)

    return HeaderDeadlineProtocol


def _no_delay(transport: asyncio.BaseTransport) -> None:
    """TCP_NODELAY on the connection. uvicorn writes a response's head and body separately;
    with Nagle's algorithm on, the body waits for the client's delayed ACK — about 40 ms on
    every request over loopback (measured: every API call took 44 ms, /health included)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

