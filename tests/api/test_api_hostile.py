"""Hostile input through a real `healer serve`: what a web page, a rebinding attack, a broken
client or a flood can send. Every answer is a 4xx with a reason (never a 5xx), nothing is
stored, and the server is healthy afterwards."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from healer.testing.api import ServeProcess, stored_records
from healer.testing.loop import healer_env
from healer.testing.wait import wait_for

pytestmark = pytest.mark.e2e

AM_TOKEN = "am-token-0123456789abcdef"
PLAY = "play-hostile-1"
START = {"play_id": PLAY, "repository": "5dlabs/cto",
         "cto_config": {"agents": {"rex": {"tools": {"remote": ["brave_search"]}}}}}
REPORT = {"error_type": "KeyError", "error_message": "'user_id'",
          "call_site": "src/app/tools.py:lookup"}
LOGS = {"agent": "rex", "lines": ["ERROR Tool inventory MISMATCH: missing: brave_search"]}
INVENTORY = {"agent": "rex", "tools": ["brave_search"]}
AM_ALERT = {"version": "4", "status": "firing", "receiver": "healer", "groupKey": "g",
            "alerts": [{"status": "firing", "labels": {"alertname": "X"}, "annotations": {}}]}

# Every mutating route with a body that would be accepted, and headers it needs.
ROUTES: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    ("/api/v1/session/start", {**START, "play_id": "play-hostile-2"}, {}),
    (f"/api/v1/session/{PLAY}/logs", LOGS, {}),
    (f"/api/v1/session/{PLAY}/inventory", INVENTORY, {}),
    (f"/api/v1/session/{PLAY}/finish", {"status": "completed"}, {}),
    ("/api/v1/errors", REPORT, {}),
    ("/api/v1/webhooks/alertmanager", AM_ALERT, {"authorization": f"Bearer {AM_TOKEN}"}),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("hostile")
    env = healer_env(root / "state", root / "results", root / "fleet",
                     HEALER_EXECUTOR="playbook",
                     HEALER__SELFHEAL__ENABLED="false",  # gate, store, but start no agents
                     HEALER__CONTEXT__ENABLED="false",
                     HEALER__API__ALLOWED_ORIGINS="https://ops.example.com",
                     HEALER__API__ALLOWED_HOSTS="healer.internal",
                     HEALER__API__HEADER_TIMEOUT_S="1",
                     HEALER__API__BODY_TIMEOUT_S="1",
                     HEALER__WEBHOOKS__ALERTMANAGER_TOKEN=AM_TOKEN)
    s = ServeProcess(env)
    s.state = root / "state"  # type: ignore[attr-defined]
    assert s.http.post("/api/v1/session/start", json=START).status_code == 200
    yield s
    s.close()


def records(server: ServeProcess) -> dict[str, int]:
    return stored_records(server.state)  # type: ignore[attr-defined]


def ledger_written(server: ServeProcess, *, reports: int) -> bool:
    """Every report so far is in the stored incidents' counts, and the counters exist."""
    root = server.state / "records"  # type: ignore[attr-defined]
    counted = sum(json.loads(p.read_text())["data"].get("count", 0)
                  for p in (root / "incidents").glob("*.json"))
    return counted == reports and (root / "incident-stats" / "all.json").exists() \
        and (root / "incident-index" / "recent.json").exists()


def post(server: ServeProcess, path: str, content: bytes, headers: dict[str, str]
         ) -> httpx.Response:
    return server.http.post(path, content=content, headers=headers)


def assert_refused(r: httpx.Response, code: int) -> None:
    assert r.status_code == code, (r.status_code, r.text)
    body = r.json()
    assert body["status"] == "error" and body["error"], body


def port_of(server: ServeProcess) -> int:
    return int(server.url.rsplit(":", 1)[1])


class TestContentTypes:
    @pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded",
                                       "multipart/form-data; boundary=x", "text/json", None])
    def test_non_json_bodies_are_415_and_store_nothing(self, server: ServeProcess,
                                                       ctype: str | None) -> None:
        """The content types a cross-site form or fetch sends without a preflight, and none
        at all, are refused on every mutating route that is not signed."""
        before = records(server)
        for path, body, extra in ROUTES:
            if "webhooks" in path:
                continue
            headers = dict(extra)
            content = json.dumps(body).encode()
            if ctype:
                headers["content-type"] = ctype
            r = server.http.build_request("POST", path, content=content, headers=headers)
            if ctype is None:
                r.headers.pop("content-type", None)
            assert_refused(server.http.send(r), 415)
        assert records(server) == before

    def test_json_with_charset_and_plus_json_are_accepted(self, server: ServeProcess) -> None:
        for ctype in ("application/json; charset=utf-8", "application/vnd.healer+json"):
            r = post(server, "/api/v1/errors", json.dumps(REPORT).encode(),
                     {"content-type": ctype})
            assert r.status_code == 200, r.text  # refused by the disabled gate, but parsed
        # The ledger writes a repeat's count and its counters within a second, after the
        # answer: the later tests' "nothing stored" must not see these writes land.
        wait_for(lambda: ledger_written(server, reports=2))

    def test_signed_webhook_keeps_its_own_content_type(self, server: ServeProcess) -> None:
        """Slack posts a form: the route checks its signature, not the content type."""
        r = post(server, "/api/v1/webhooks/slack", b"text=hi",
                 {"content-type": "application/x-www-form-urlencoded"})
        assert_refused(r, 401)


class TestOrigins:
    @pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1:1",
                                        "https://ops.example.com.evil.example"])
    def test_foreign_origin_is_403_on_reads_and_writes(self, server: ServeProcess,
                                                       origin: str) -> None:
        before = records(server)
        for path, body, extra in ROUTES:
            r = post(server, path, json.dumps(body).encode(),
                     {**extra, "content-type": "application/json", "origin": origin})
            assert_refused(r, 403)
        assert_refused(server.http.get("/api/v1/sessions", headers={"origin": origin}), 403)
        assert records(server) == before

    def test_cross_site_fetch_metadata_without_origin_is_403(self, server: ServeProcess
                                                             ) -> None:
        r = post(server, "/api/v1/errors", json.dumps(REPORT).encode(),
                 {"content-type": "application/json", "sec-fetch-site": "cross-site"})
        assert_refused(r, 403)

    def test_own_and_configured_origins_pass(self, server: ServeProcess) -> None:
        for origin in (server.url, f"http://localhost:{port_of(server)}",
                       "https://ops.example.com"):
            host = origin.split("://", 1)[1] if "localhost" in origin else None
            headers = {"origin": origin, **({"host": host} if host else {})}
            assert server.http.get("/api/v1/sessions", headers=headers).status_code == 200


class TestHosts:
    @pytest.mark.parametrize("host", ["evil.example", "evil.example:8083", "127.0.0.1.evil.io",
                                      "localhost.evil.example", "[::1", "a b", "x@127.0.0.1"])
    def test_rebinding_host_is_refused_for_reads_and_writes(self, server: ServeProcess,
                                                            host: str) -> None:
        before = records(server)
        r = server.http.get("/api/v1/sessions", headers={"host": host})
        assert r.status_code in (400, 421), r.text
        r = post(server, "/api/v1/errors", json.dumps(REPORT).encode(),
                 {"content-type": "application/json", "host": host})
        assert r.status_code in (400, 421), r.text
        assert records(server) == before

    @pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST:1", "[::1]:80",
                                      "127.8.9.10", "healer.internal", "app.localhost"])
    def test_loopback_and_configured_hosts_pass(self, server: ServeProcess, host: str) -> None:
        assert server.http.get("/api/v1/sessions", headers={"host": host}).status_code == 200

    def test_missing_host_is_400(self, server: ServeProcess) -> None:
        with socket.create_connection(("127.0.0.1", port_of(server)), timeout=10) as sock:
            sock.sendall(b"GET /api/v1/sessions HTTP/1.0\r\n\r\n")
            reply = sock.makefile("rb").read()
        assert reply.startswith(b"HTTP/1.1 400"), reply[:200]


# Bodies that Python's json module would accept but healer must not store, and plain bad ones.
BAD_BODIES: dict[str, bytes] = {
    "lone surrogate": b'{"x": "\\ud800"}',
    "lone surrogate key": b'{"\\udfff": 1}',
    "NaN": b'{"x": NaN}',
    "Infinity": b'{"x": -Infinity}',
    "1e400": b'{"x": 1e400}',
    "huge integer": b'{"x": ' + b"9" * 5000 + b"}",
    "deep nesting": b'{"x": ' + b"[" * 1000 + b"]" * 1000 + b"}",
    "invalid UTF-8": b'{"x": "\xff\xfe"}',
    "truncated": b'{"x": ',
    "not an object": b"[1, 2, 3",
    "empty": b"",
}


class TestBadInput:
    @pytest.mark.parametrize("kind", sorted(BAD_BODIES))
    def test_every_route_answers_400_with_a_reason(self, server: ServeProcess, kind: str
                                                   ) -> None:
        before = records(server)
        for path, _, extra in ROUTES:
            if kind == "empty" and path.endswith("/finish"):
                continue  # the one route whose body is optional
            r = post(server, path, BAD_BODIES[kind], {**extra,
                                                       "content-type": "application/json"})
            assert_refused(r, 400)
        assert records(server) == before

    def test_values_python_would_take_inside_valid_shapes(self, server: ServeProcess) -> None:
        """Well-formed requests carrying one poisoned value: still 400, still nothing."""
        before = records(server)
        poisoned = [
            ("/api/v1/session/start", json.dumps({**START, "play_id": "play-x\n"})),
            ("/api/v1/session/start", json.dumps(START).replace('"5dlabs/cto"',
                                                               '"5dlabs/\\ud83d"')),
            (f"/api/v1/session/{PLAY}/logs", '{"agent": "rex", "lines": ["\\udc00"]}'),
            (f"/api/v1/session/{PLAY}/logs", '{"agent": "rex", "lines": [], "task_id": 1e400}'),
            ("/api/v1/errors", '{"error_type": "E", "error_message": "m", "context": NaN}'),
            ("/api/v1/errors", '{"error_type": "E\\ud800", "error_message": "m"}'),
        ]
        for path, body in poisoned:
            r = post(server, path, body.encode(), {"content-type": "application/json"})
            assert_refused(r, 400)
        assert records(server) == before

    def test_path_names_with_newlines_or_dots(self, server: ServeProcess) -> None:
        for name in ("play%0A", "..", "a%2F..%2Fb", "%ED%A0%80", "x" * 200):
            r = server.http.get(f"/api/v1/session/{name}")
            assert r.status_code in (400, 404), r.text

    def test_oversized_body_is_413(self, server: ServeProcess) -> None:
        r = post(server, "/api/v1/errors", b" " * (2 << 20), {"content-type": "application/json"})
        assert_refused(r, 413)

    def test_unsupported_method_says_what_is_allowed(self, server: ServeProcess) -> None:
        r = server.http.delete("/api/v1/errors")
        assert r.status_code == 405 and "POST" in r.headers["allow"]


class TestSlowAndManyClients:
    def test_slow_headers_are_disconnected(self, server: ServeProcess) -> None:
        """A client that never finishes its headers is closed after api.header_timeout_s."""
        with socket.create_connection(("127.0.0.1", port_of(server)), timeout=15) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            started = time.monotonic()
            data = sock.recv(1024)  # b"" once the server closes
            assert data == b"" and time.monotonic() - started < 14

    def test_idle_connection_is_disconnected(self, server: ServeProcess) -> None:
        with socket.create_connection(("127.0.0.1", port_of(server)), timeout=15) as sock:
            assert sock.recv(1024) == b""

    def test_slow_body_gets_408(self, server: ServeProcess) -> None:
        before = records(server)
        with socket.create_connection(("127.0.0.1", port_of(server)), timeout=15) as sock:
            sock.sendall(b"POST /api/v1/errors HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"e")
            reply = sock.makefile("rb").readline()
        assert reply.startswith(b"HTTP/1.1 408"), reply
        assert records(server) == before

    def test_a_thousand_concurrent_connections(self, tmp_path: Path) -> None:
        """1,000 connections at once, each a request: no 5xx, every one answered, and the
        server still healthy after. (Its own server, with the default header deadline: the
        shared one's 1 s is shorter than a loaded machine may take to accept them all.)"""
        server = ServeProcess(healer_env(tmp_path / "state", tmp_path / "results",
                                         tmp_path / "fleet", HEALER__SELFHEAL__ENABLED="false"))
        try:
            self._flood(server)
        finally:
            server.close()

    def _flood(self, server: ServeProcess) -> None:
        port = port_of(server)

        async def one(i: int) -> int:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                path = "/health" if i % 2 else "/api/v1/sessions/active"
                writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             "Connection: close\r\n\r\n".encode())
                await writer.drain()
                status = await reader.readline()
                return int(status.split()[1])
            finally:
                writer.close()

        async def flood() -> list[int]:
            return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(1000))), 120)

        codes = asyncio.run(flood())
        assert len(codes) == 1000
        assert [c for c in codes if c >= 500] == []
        assert set(codes) == {200}
        assert server.http.get("/health").status_code == 200
