"""A fake GitHub REST API on 127.0.0.1: issues, comments, labels and pull requests.

Speaks the real wire format for the calls healer makes (``POST /repos/{o}/{r}/issues``,
``…/issues/{n}/comments``, ``…/issues/{n}/labels``, ``POST/GET …/pulls[/{n}]``), checks the
bearer token, and records everything, so forge code is tested without the network.
Set ``merged`` on a PR to simulate a merge.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ROUTE = re.compile(r"^/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/(?P<rest>.+)$")


class FakeGitHub:
    def __init__(self, token: str = "ghp_test_token"):  # noqa: S107 - a test double
        self.token = token
        self.issues: dict[int, dict[str, Any]] = {}
        self.pulls: dict[int, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self._next = 1
        self._lock = threading.Lock()
        gh = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, body: Any) -> None:
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                gh.requests.append((method, self.path, body))
                if self.headers.get("authorization") != f"Bearer {gh.token}":
                    self._send(401, {"message": "Bad credentials"})
                    return
                m = _ROUTE.match(self.path)
                if not m:
                    self._send(404, {"message": "Not Found"})
                    return
                code, out = gh.route(method, m["owner"], m["repo"], m["rest"], body)
                self._send(code, out)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

            def log_message(self, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _number(self) -> int:
        with self._lock:
            n = self._next
            self._next += 1
            return n

    def route(self, method: str, owner: str, repo: str, rest: str,
              body: Any) -> tuple[int, Any]:
        base = f"https://github.com/{owner}/{repo}"
        parts = rest.split("/")
        if method == "POST" and parts == ["issues"]:
            if not isinstance(body, dict) or not body.get("title"):
                return 422, {"message": "Validation Failed"}
            n = self._number()
            self.issues[n] = {"number": n, "title": body["title"], "body": body.get("body", ""),
                              "labels": [{"name": x} for x in body.get("labels", [])],
                              "comments": [], "html_url": f"{base}/issues/{n}",
                              "state": "open"}
            return 201, self.issues[n]
        if method == "POST" and len(parts) == 3 and parts[0] == "issues" and parts[2] in (
                "comments", "labels"):
            n = int(parts[1])
            target = self.issues.get(n) or self.pulls.get(n)
            if target is None:
                return 404, {"message": "Not Found"}
            if parts[2] == "comments":
                target.setdefault("comments", []).append(body.get("body", ""))
                return 201, {"id": len(target["comments"]), "body": body.get("body", "")}
            target.setdefault("labels", []).extend({"name": x} for x in body.get("labels", []))
            return 200, target["labels"]
        if method == "POST" and parts == ["pulls"]:
            n = self._number()
            self.pulls[n] = {"number": n, "title": body.get("title", ""),
                             "body": body.get("body", ""), "head": {"ref": body.get("head")},
                             "base": {"ref": body.get("base")}, "state": "open",
                             "merged": False, "draft": bool(body.get("draft")),
                             "html_url": f"{base}/pull/{n}", "labels": [], "comments": []}
            return 201, self.pulls[n]
        if method == "GET" and len(parts) == 2 and parts[0] in ("pulls", "issues"):
            store = self.pulls if parts[0] == "pulls" else self.issues
            item = store.get(int(parts[1])) if parts[1].isdigit() else None
            return (200, item) if item else (404, {"message": "Not Found"})
        return 404, {"message": "Not Found"}

    def __enter__(self) -> FakeGitHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
