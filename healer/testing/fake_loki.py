"""A fake Loki on 127.0.0.1 that speaks the real wire format (Loki HTTP API v1).

Shipped in healer.testing (it began as tests/detect/fake_loki.py) so every test area and
healer's users can start one.

``GET /loki/api/v1/query_range`` (start inclusive, end exclusive, ``limit`` default 100 and
capped at 5000 like Loki's max_entries_limit_per_query, ``direction`` default backward) and
``/loki/api/v1/tail`` over WebSocket (entries since ``start``, then every ``push``). Selectors:
``{label="value", other!="x"}`` with an optional ``|= "text"`` line filter.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

MAX_LIMIT = 5000
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _selector(query: str) -> tuple[list[tuple[str, str, str]], list[str]]:
    m = re.match(r"\s*\{(.*?)\}(.*)$", query)
    if not m:
        raise ValueError(f"parse error: {query!r}")
    matchers = [(k, op, v) for k, op, v in _MATCHER.findall(m.group(1))]
    filters = re.findall(r'\|=\s*"((?:[^"\\]|\\.)*)"', m.group(2))
    return matchers, filters


def _matches(labels: dict[str, str], line: str, query: str) -> bool:
    matchers, filters = _selector(query)
    for key, op, value in matchers:
        if (labels.get(key) == value) != (op == "="):
            return False
    return all(f in line for f in filters)


class FakeLoki:
    """Holds entries; serves them; ``push`` also sends them to open tails."""

    def __init__(self) -> None:
        self.entries: list[tuple[dict[str, str], int, str]] = []
        self.requests: list[dict[str, str]] = []
        self._tails: list[tuple[asyncio.Queue[Any], str]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.app = Starlette(routes=[
            Route("/loki/api/v1/query_range", self._query_range),
            WebSocketRoute("/loki/api/v1/tail", self._tail),
        ])
        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning",
                                lifespan="off", timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self.url = ""

    def __enter__(self) -> FakeLoki:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake Loki did not start")
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)

    def push(self, labels: dict[str, str], ts_ns: int, line: str, *, dropped: int = 0) -> None:
        """Store an entry and send it to open tails (with ``dropped`` made-up dropped ones)."""
        self.entries.append((dict(labels), ts_ns, line))
        if self._loop is None:
            return
        for queue, query in list(self._tails):
            if _matches(labels, line, query):
                msg = {"streams": [{"stream": labels, "values": [[str(ts_ns), line]]}],
                       "dropped_entries": [{"labels": labels, "timestamp": str(ts_ns)}
                                           for _ in range(dropped)] or None}
                self._loop.call_soon_threadsafe(queue.put_nowait, msg)

    async def _query_range(self, request: Request) -> JSONResponse:
        q = dict(request.query_params)
        self.requests.append(q)
        try:
            query = q["query"]
            _selector(query)
            limit = int(q.get("limit", 100))
            start = int(q.get("start", 0))
            end = int(q.get("end", time.time_ns()))
        except (KeyError, ValueError) as exc:
            return JSONResponse({"status": "error", "error": str(exc)}, status_code=400)
        if limit > MAX_LIMIT:
            return JSONResponse({"status": "error", "error": f"max entries limit per query "
                                 f"exceeded, limit > max_entries_limit ({limit} > {MAX_LIMIT})"},
                                status_code=400)
        forward = q.get("direction", "backward") == "forward"
        found = sorted((e for e in self.entries
                        if start <= e[1] < end and _matches(e[0], e[2], query)),
                       key=lambda e: e[1], reverse=not forward)[:limit]
        streams: dict[tuple[tuple[str, str], ...], list[list[str]]] = {}
        for labels, ts, line in found:
            streams.setdefault(tuple(sorted(labels.items())), []).append([str(ts), line])
        result = [{"stream": dict(k), "values": v} for k, v in streams.items()]
        return JSONResponse({"status": "success",
                             "data": {"resultType": "streams", "result": result, "stats": {}}})

    async def _tail(self, ws: WebSocket) -> None:
        self._loop = asyncio.get_running_loop()
        query = ws.query_params.get("query", "")
        start = int(ws.query_params.get("start", time.time_ns() - 3600 * 10**9))
        await ws.accept()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._tails.append((queue, query))
        try:
            backlog = [e for e in self.entries if e[1] >= start and _matches(e[0], e[2], query)]
            if backlog:
                await ws.send_json({"streams": [{"stream": lab, "values": [[str(ts), line]]}
                                                for lab, ts, line in sorted(
                                                    backlog, key=lambda e: e[1])],
                                    "dropped_entries": None})
            while True:
                msg = await queue.get()
                await ws.send_json(msg)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            self._tails.remove((queue, query))
