"""Every API connection has TCP_NODELAY: uvicorn writes a response's head and body apart, and
with Nagle's algorithm on the body waited for the client's delayed ACK — ~40 ms on every
request over loopback, /health included (found by the Sentry ingest benchmark)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from healer.api.service import ApiService
from healer.config import load_settings
from healer.core.store import FileStore


async def test_accepted_connections_do_not_wait_for_delayed_acks(tmp_path: Path) -> None:
    settings = load_settings(env={}, overrides={
        "state_dir": str(tmp_path / "state"), "results_dir": str(tmp_path / "results"),
        "fleet_dir": str(tmp_path / "fleet"), "api": {"host": "127.0.0.1", "port": 0}})
    api = ApiService(settings, FileStore(tmp_path / "state"))
    await api.start()
    try:
        host, port = api.url.rsplit("/", 1)[-1].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        assert api._server is not None
        conns = list(api._server.server_state.connections)
        assert conns, "the server holds no connection"
        for proto in conns:
            sock = proto.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        writer.close()
    finally:
        await api.stop()
