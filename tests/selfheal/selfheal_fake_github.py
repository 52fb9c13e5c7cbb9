"""A fake GitHub REST API on 127.0.0.1, speaking the real wire format (v2022-11-28).

Enough of it for the github forge: create a pull request (the head branch must exist in the
bare repository that stands in for GitHub's git side, as on GitHub), add labels, read a pull
request's state, create an issue. Requests are recorded; ``merge(n)`` / ``close(n)`` act as a
maintainer would. Bad credentials → 401, an unknown head → 422 "Validation Failed". The git
side also answers over smart HTTP at ``/<owner>/<repo>.git`` (``git http-backend`` on the bare
repository) for HTTP Basic ``x-access-token:<token>`` only, as github.com does; those requests
are in ``git_requests``.
"""

from __future__ import annotations

import base64
import json
import os
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
    git_requests: list[Request] = field(default_factory=list)
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

            def _read(self) -> bytes:
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    out = b""
                    while size := int(self.rfile.readline().strip() or b"0", 16):
                        out += self.rfile.read(size)
                        self.rfile.readline()
                    self.rfile.readline()
                    return out
                length = int(self.headers.get("content-length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                raw = self._read()
                if self.path.startswith(f"/{fake.owner}/{fake.repo}.git/"):
                    status, headers, data = fake.git_http(self.command, self.path,
                                                          dict(self.headers), raw)
                    self.send_response(status)
                    for key, value in headers:
                        self.send_header(key, value)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
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

    # --- the git side over smart HTTP (``git http-backend``), as github.com serves it -------

    def git_http(self, method: str, path: str, headers: dict[str, str], body: bytes
                 ) -> tuple[int, list[tuple[str, str]], bytes]:
        """``/<owner>/<repo>.git/…`` with HTTP Basic ``x-access-token:<token>`` (else 401)."""
        self.git_requests.append(Request(method, path, headers, None))
        basic = base64.b64encode(f"x-access-token:{self.token}".encode()).decode()
        if headers.get("Authorization") != f"Basic {basic}":
            return 401, [("WWW-Authenticate", 'Basic realm="GitHub"')], b""
        route, _, query = path.partition("?")
        env = {"PATH": os.environ.get("PATH", os.defpath), "GIT_PROJECT_ROOT":
               str(self.bare.parent), "GIT_HTTP_EXPORT_ALL": "1",
               "PATH_INFO": "/" + self.bare.name + route[len(f"/{self.owner}/{self.repo}.git"):],
               "REQUEST_METHOD": method, "QUERY_STRING": query, "REMOTE_USER": "x-access-token",
               "REMOTE_ADDR": "127.0.0.1", "CONTENT_TYPE": headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "GIT_CONFIG_NOSYSTEM": "1",
               "HOME": "/nonexistent", "HTTP_CONTENT_ENCODING":
                   headers.get("Content-Encoding", ""), "GIT_PROTOCOL":
                   headers.get("Git-Protocol", "")}
        out = subprocess.run(["git", "http-backend"], input=body, env=env,
                             capture_output=True, check=False).stdout
        head, _, data = out.partition(b"\r\n\r\n")
        status, pairs = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                pairs.append((key.strip(), value.strip()))
        return status, pairs, data

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
