"""Local stand-ins that speak real wire formats: a webhook receiver (Discord, Slack, ...)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WebhookReceiver:
    """An HTTP server on ``host`` (127.0.0.1; any loopback address works) that records every
    POST (path, headers, JSON body) in ``posts`` and every request of any method (method,
    path) in ``requests``. With ``answer``, a GET is answered 200 with ``answer(path)`` as
    JSON (an impostor of a node daemon, say)."""

    def __init__(self, status: int = 204, *, host: str = "127.0.0.1",
                 answer: Callable[[str], Any] | None = None):
        self.posts: list[dict[str, Any]] = []
        self.requests: list[dict[str, str]] = []
        self.status = status
        self.answer = answer
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                receiver.requests.append({"method": "GET", "path": self.path})
                if receiver.answer is not None:
                    raw = json.dumps(receiver.answer(self.path)).encode()
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                self.send_response(receiver.status)
                self.end_headers()

            def do_POST(self) -> None:
                receiver.requests.append({"method": "POST", "path": self.path})
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                receiver.posts.append({"path": self.path, "headers": dict(self.headers),
                                       "body": body})
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
