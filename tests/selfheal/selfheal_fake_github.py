"""A fake GitHub REST API on 127.0.0.1, speaking the real wire format (v2022-11-28).

Enough of it for the github forge: create a pull request (the head branch must exist in the
bare repository that stands in for GitHub's git side, as on GitHub), add labels, read a pull
request's state, create an issue. Requests are recorded; ``merge(n)`` / ``close(n)`` act as a
maintainer would. Bad credentials → 401, an unknown head → 422 "Validation Failed".
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DOCS = "https://docs.github.com/rest"


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeGitHub:
    owner: str
    repo: str
    token: str
    bare: Path  # the git side: pushed branches land here
    requests: list[Request] = field(default_factory=list)
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)
    fail_next: tuple[int, str] | None = None
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                fake.requests.append(Request(self.command, self.path, dict(self.headers), body))
                status, doc = fake.route(self.command, self.path, dict(self.headers), body)
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json; charset=utf-8")
                self.send_header("x-github-api-version-selected", "2022-11-28")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    # --- what a maintainer does -------------------------------------------------------------

    def merge(self, number: int) -> None:
        self.pulls[number].update(state="closed", merged=True,
                                  merged_at="2024-05-01T10:00:00Z")

    def close(self, number: int) -> None:
        self.pulls[number].update(state="closed", merged=False, merged_at=None)

    # --- the API ----------------------------------------------------------------------------

    def _error(self, status: int, message: str, **extra: Any) -> tuple[int, dict[str, Any]]:
        return status, {"message": message, "documentation_url": DOCS, **extra}

    def route(self, method: str, path: str, headers: dict[str, str], body: Any
              ) -> tuple[int, Any]:
        if headers.get("Authorization") != f"Bearer {self.token}":
            return self._error(401, "Bad credentials")
        if self.fail_next:
            status, message = self.fail_next
            self.fail_next = None
            return self._error(status, message)
        base = f"/repos/{self.owner}/{self.repo}"
        if not path.startswith(base + "/"):
            return self._error(404, "Not Found")
        rest = path[len(base):]
        if method == "POST" and rest == "/pulls":
            return self._create_pull(body)
        m = re.fullmatch(r"/pulls/(\d+)", rest)
        if method == "GET" and m:
            pr = self.pulls.get(int(m.group(1)))
            return (200, pr) if pr else self._error(404, "Not Found")
        m = re.fullmatch(r"/issues/(\d+)/labels", rest)
        if method == "POST" and m:
            n = int(m.group(1))
            target = self.pulls.get(n) or self.issues.get(n)
            if target is None:
                return self._error(404, "Not Found")
            target["labels"] = [{"id": i, "name": name, "color": "ededed"}
                                for i, name in enumerate(body["labels"], 1)]
            return 200, target["labels"]
        if method == "POST" and rest == "/issues":
            n = len(self.pulls) + len(self.issues) + 1
            issue = {"id": 1000 + n, "number": n, "title": body["title"], "body": body["body"],
                     "state": "open", "html_url": f"{self.url}/{self.owner}/{self.repo}/"
                                                  f"issues/{n}",
                     "labels": [{"name": x} for x in body.get("labels", [])]}
            self.issues[n] = issue
            return 201, issue
        return self._error(404, "Not Found")

    def _create_pull(self, body: dict[str, Any]) -> tuple[int, Any]:
        missing = [k for k in ("title", "head", "base") if not body.get(k)]
        exists = subprocess.run(["git", "-C", str(self.bare), "rev-parse", "--verify", "--quiet",
                                 f"refs/heads/{body.get('head', '')}"], capture_output=True)
        if missing or exists.returncode != 0:
            return self._error(422, "Validation Failed", errors=[
                {"resource": "PullRequest", "field": missing[0] if missing else "head",
                 "code": "missing_field" if missing else "invalid"}])
        n = len(self.pulls) + len(self.issues) + 1
        pr = {"id": 5000 + n, "number": n, "state": "open", "title": body["title"],
              "body": body.get("body"), "draft": bool(body.get("draft")), "merged": False,
              "merged_at": None,
              "head": {"ref": body["head"]}, "base": {"ref": body["base"]}, "labels": [],
              "html_url": f"{self.url}/{self.owner}/{self.repo}/pull/{n}",
              "url": f"{self.url}/repos/{self.owner}/{self.repo}/pulls/{n}"}
        self.pulls[n] = pr
        return 201, pr
