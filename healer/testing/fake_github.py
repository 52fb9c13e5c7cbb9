"""A fake GitHub REST API on 127.0.0.1, speaking the real wire format.

The forge's calls: ``POST /repos/{o}/{r}/issues``, ``…/issues/{n}/comments``,
``…/issues/{n}/labels``, ``POST/GET …/pulls[/{n}]`` (set ``merged`` on a PR to simulate a
merge). The PR watcher's reads, with GitHub's field names: ``GET …/pulls?state=open`` (no
mergeability in list items, as on GitHub), ``GET …/pulls/{n}`` (``mergeable``,
``mergeable_state``), ``…/issues/{n}/comments``, ``…/pulls/{n}/reviews``,
``…/pulls/{n}/commits``, ``…/commits/{ref}/check-runs``, ``…/commits/{ref}/status``,
``GET /repos/{o}/{r}``, ``/user`` (with ``X-OAuth-Scopes``), ``/installation/repositories``
(``installation = True`` makes the token an App installation token) and ``/rate_limit``.

Like GitHub it sends ``ETag`` and answers ``If-None-Match`` with ``304`` (not counted against
the limit), sends ``X-RateLimit-*`` on every answer, and refuses with 403 once the limit is
spent (``exhaust(reset_at)``) or while a secondary limit is queued
(``secondary_limit(retry_after)``). ``clock`` is the fake's time (reset times, timestamps).
Every request is in ``requests`` (method, path, body — as before) and ``log`` (with query,
``If-None-Match`` and the status answered). Build PR state with ``add_pull``,
``add_comment``, ``add_review``, ``add_commit``, ``set_check``, ``set_status``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

_ROUTE = re.compile(r"^/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)(?:/(?P<rest>.+))?$")
Answer = tuple[int, Any]


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _etag(body: Any) -> str:
    return 'W/"' + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32] \
        + '"'


class FakeGitHub:
    def __init__(self, token: str = "ghp_test_token",  # noqa: S107 - a test double
                 *, clock: Callable[[], float] = time.time):
        self.token = token
        self.clock = clock
        self.issues: dict[int, dict[str, Any]] = {}
        self.pulls: dict[int, dict[str, Any]] = {}
        self.comments: dict[int, list[dict[str, Any]]] = {}  # PR/issue number → comments
        self.reviews: dict[int, list[dict[str, Any]]] = {}
        self.commits: dict[int, list[dict[str, Any]]] = {}
        self.check_runs: dict[str, list[dict[str, Any]]] = {}  # sha → runs
        self.statuses: dict[str, list[dict[str, Any]]] = {}  # sha → statuses
        self.requests: list[tuple[str, str, Any]] = []
        self._link = ""  # the Link header of the answer being built
        self.log: list[dict[str, Any]] = []
        self.scopes = "repo, read:org"
        self.installation = False
        self.limit = 5000
        self.remaining = 5000
        self.reset_at = self.clock() + 3600
        self._secondary: list[int | None] = []
        self._next = 1
        self._ids = 1000
        self._lock = threading.RLock()
        gh = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, body: Any, headers: dict[str, str]) -> None:
                raw = b"" if code == 304 else json.dumps(body).encode()
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                if code != 304:
                    self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                parts = urlsplit(self.path)
                gh.requests.append((method, parts.path, body))
                code, out, headers = gh.answer(method, parts.path, parse_qs(parts.query),
                                               body, dict(self.headers.items()))
                gh.log.append({"method": method, "path": parts.path, "query": parts.query,
                               "if_none_match": self.headers.get("if-none-match", ""),
                               "status": code})
                self._send(code, out, headers)

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
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)

    # --- limits -------------------------------------------------------------------------------

    def exhaust(self, reset_at: float) -> None:
        """The primary limit is spent until ``reset_at`` (then it refills)."""
        with self._lock:
            self.remaining, self.reset_at = 0, reset_at

    def secondary_limit(self, retry_after: int | None = None, times: int = 1) -> None:
        """The next ``times`` requests hit a secondary limit (with ``Retry-After`` or none)."""
        with self._lock:
            self._secondary += [retry_after] * times

    def _rate_headers(self) -> dict[str, str]:
        return {"x-ratelimit-limit": str(self.limit), "x-ratelimit-remaining":
                str(self.remaining), "x-ratelimit-used": str(self.limit - self.remaining),
                "x-ratelimit-reset": str(int(self.reset_at)), "x-ratelimit-resource": "core"}

    def answer(self, method: str, path: str, query: dict[str, list[str]], body: Any,
               headers: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        with self._lock:
            if self.clock() >= self.reset_at:
                self.remaining, self.reset_at = self.limit, self.clock() + 3600
            auth = {k.lower(): v for k, v in headers.items()}.get("authorization")
            if auth != f"Bearer {self.token}":
                return 401, {"message": "Bad credentials"}, {}
            if path == "/rate_limit":  # free, as on GitHub
                core = {"limit": self.limit, "remaining": self.remaining,
                        "reset": int(self.reset_at), "used": self.limit - self.remaining}
                return 200, {"resources": {"core": core}, "rate": core}, self._rate_headers()
            if self._secondary:
                retry = self._secondary.pop(0)
                extra = {"retry-after": str(retry)} if retry is not None else {}
                return 403, {"message": "You have exceeded a secondary rate limit. Please "
                             "wait a few minutes before you try again."}, {
                    **self._rate_headers(), **extra}
            if self.remaining <= 0:
                return 403, {"message": "API rate limit exceeded for user ID 1."}, \
                    self._rate_headers()
            self._link = ""
            code, out = self.route_any(method, path, query, body)
            etag = _etag(out) if method == "GET" and code == 200 else ""
            inm = {k.lower(): v for k, v in headers.items()}.get("if-none-match", "")
            if etag and inm == etag:
                return 304, None, {**self._rate_headers(), "etag": etag}
            self.remaining -= 1
            extra = {"etag": etag} if etag else {}
            if self._link:
                extra["link"] = self._link
            if path == "/user" and code == 200 and self.scopes is not None:
                extra["x-oauth-scopes"] = self.scopes
            return code, out, {**self._rate_headers(), **extra}

    def route_any(self, method: str, path: str, query: dict[str, list[str]],
                  body: Any) -> Answer:
        if method == "GET" and path == "/user":
            if self.installation:
                return 403, {"message": "Resource not accessible by integration"}
            return 200, {"login": "healer-operator", "id": 1, "type": "User"}
        if method == "GET" and path == "/installation/repositories":
            if not self.installation:
                return 403, {"message": "This endpoint requires an installation token"}
            repos = sorted({p["base"]["repo"]["full_name"] for p in self.pulls.values()}
                           or {"5dlabs/cto"})
            return 200, {"total_count": len(repos), "repositories": [
                {"full_name": r, "permissions": {"admin": False, "push": True, "pull": True}}
                for r in repos]}
        m = _ROUTE.match(path)
        if not m:
            return 404, {"message": "Not Found"}
        if not m["rest"]:
            return 200, {"full_name": f"{m['owner']}/{m['repo']}", "private": False}
        if method == "GET":
            found = self.read(m["owner"], m["repo"], m["rest"], query)
            if found is not None:
                return found
        return self.route(method, m["owner"], m["repo"], m["rest"], body)

    # --- the forge's writes (as before) ---------------------------------------------------------

    def _number(self) -> int:
        with self._lock:
            n = self._next
            self._next += 1
            return n

    def _id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids

    def route(self, method: str, owner: str, repo: str, rest: str,
              body: Any) -> Answer:
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
                made = self.add_comment(n, "healer-operator", body.get("body", ""))
                return 201, made
            target.setdefault("labels", []).extend({"name": x} for x in body.get("labels", []))
            return 200, target["labels"]
        if method == "POST" and parts == ["pulls"]:
            pr = self.add_pull(f"{owner}/{repo}", str(body.get("head")), "healer-operator",
                               base_ref=str(body.get("base")), title=body.get("title", ""))
            pr.update(body=body.get("body", ""), draft=bool(body.get("draft")))
            return 201, pr
        if method == "GET" and len(parts) == 2 and parts[0] in ("pulls", "issues"):
            store = self.pulls if parts[0] == "pulls" else self.issues
            item = store.get(int(parts[1])) if parts[1].isdigit() else None
            return (200, item) if item else (404, {"message": "Not Found"})
        return 404, {"message": "Not Found"}

    # --- the watcher's reads --------------------------------------------------------------------

    def read(self, owner: str, repo: str, rest: str, query: dict[str, list[str]]
             ) -> Answer | None:
        full = f"{owner}/{repo}"
        parts = rest.split("/")
        per_page = min(100, int((query.get("per_page") or ["30"])[0]))
        if parts == ["pulls"]:
            state = (query.get("state") or ["open"])[0]
            found = [p for p in self.pulls.values() if p["base"]["repo"]["full_name"] == full
                     and (state == "all" or p["state"] == state)]
            found.sort(key=lambda p: p["updated_at"], reverse=True)
            # List items carry no mergeability on GitHub (only a PR's own answer does).
            return 200, [{k: v for k, v in p.items() if k not in (
                "mergeable", "mergeable_state", "merged", "comments")}
                for p in found[:per_page]]
        if len(parts) == 3 and parts[1].isdigit():
            n = int(parts[1])
            lists = {("issues", "comments"): self.comments, ("pulls", "reviews"): self.reviews,
                     ("pulls", "commits"): self.commits}
            found_list = lists.get((parts[0], parts[2]))
            if found_list is not None:
                return 200, self._paged(found_list.get(n, []), per_page, query,
                                        f"{full}/{rest}")
        if len(parts) == 3 and parts[0] == "commits" and parts[2] == "check-runs":
            runs = self.check_runs.get(self._sha(parts[1]), [])
            return 200, {"total_count": len(runs), "check_runs": runs[:per_page]}
        if len(parts) == 3 and parts[0] == "commits" and parts[2] == "status":
            sha = self._sha(parts[1])
            sts = self.statuses.get(sha, [])
            states = {s["state"] for s in sts}
            combined = ("failure" if states & {"failure", "error"} else
                        "pending" if not sts or "pending" in states else "success")
            return 200, {"state": combined, "sha": sha, "total_count": len(sts),
                         "statuses": sts[:per_page]}
        return None

    def _paged(self, items: list[dict[str, Any]], per_page: int,
               query: dict[str, list[str]], rest: str) -> list[dict[str, Any]]:
        """One page of ``items`` (oldest first, as GitHub lists them), with GitHub's ``Link``
        header (``next``, ``last``, ``first``, ``prev``) when there is more than one."""
        page = max(1, int((query.get("page") or ["1"])[0]))
        last = max(1, -(-len(items) // per_page))
        url = f"{self.url}/repos/{rest}?per_page={per_page}&page="
        rels = []
        if page < last:
            rels += [f'<{url}{page + 1}>; rel="next"', f'<{url}{last}>; rel="last"']
        if page > 1:
            rels += [f'<{url}1>; rel="first"', f'<{url}{min(page - 1, last)}>; rel="prev"']
        self._link = ", ".join(rels)
        return items[(page - 1) * per_page:page * per_page]

    def _sha(self, ref: str) -> str:
        for pr in self.pulls.values():
            if ref == pr["head"]["ref"]:
                return str(pr["head"]["sha"])
        return ref

    # --- building state -------------------------------------------------------------------------

    def _touch(self, n: int) -> str:
        now = _iso(self.clock())
        if n in self.pulls:
            self.pulls[n]["updated_at"] = now
        return now

    def add_pull(self, repo: str, head_ref: str, user: str, *, base_ref: str = "main",
                 labels: list[str] | None = None, title: str = "") -> dict[str, Any]:
        with self._lock:
            n = self._number()
            sha = hashlib.sha1(f"{repo}{n}".encode()).hexdigest()  # noqa: S324 - an id
            now = _iso(self.clock())
            base = f"https://github.com/{repo}"
            self.pulls[n] = {
                "url": f"https://api.github.com/repos/{repo}/pulls/{n}", "id": self._id(),
                "number": n, "html_url": f"{base}/pull/{n}", "state": "open",
                "title": title or f"work on {head_ref}", "body": "",
                "user": {"login": user, "type": "Bot" if user.endswith("[bot]") else "User"},
                "labels": [{"name": x} for x in labels or []], "draft": False,
                "head": {"label": f"{repo.split('/')[0]}:{head_ref}", "ref": head_ref,
                         "sha": sha, "repo": {"full_name": repo}},
                "base": {"label": f"{repo.split('/')[0]}:{base_ref}", "ref": base_ref,
                         "sha": "0" * 40, "repo": {"full_name": repo}},
                "merged": False, "merged_at": None, "mergeable": True,
                "mergeable_state": "clean", "created_at": now, "updated_at": now,
                "comments": []}
            self.commits[n] = []
            return self.pulls[n]

    def add_comment(self, n: int, login: str, body: str) -> dict[str, Any]:
        with self._lock:
            cid = self._id()
            item = {"id": cid, "html_url": f"https://github.com/x/y/pull/{n}#issuecomment-{cid}",
                    "user": {"login": login, "type": "Bot" if login.endswith("[bot]")
                             else "User"}, "body": body, "created_at": self._touch(n),
                    "updated_at": _iso(self.clock()), "author_association": "CONTRIBUTOR"}
            self.comments.setdefault(n, []).append(item)
            return item

    def add_review(self, n: int, login: str, state: str, body: str = "") -> dict[str, Any]:
        """``state``: APPROVED, CHANGES_REQUESTED, COMMENTED (as the REST API says it)."""
        with self._lock:
            item = {"id": self._id(), "user": {"login": login, "type": "Bot"}, "body": body,
                    "state": state, "submitted_at": self._touch(n),
                    "commit_id": self.pulls[n]["head"]["sha"],
                    "html_url": f"https://github.com/x/y/pull/{n}"}
            self.reviews.setdefault(n, []).append(item)
            return item

    def add_commit(self, n: int, message: str = "work") -> str:
        """A new head commit on PR ``n`` (its checks start empty)."""
        with self._lock:
            sha = hashlib.sha1(f"{n}{self._id()}".encode()).hexdigest()  # noqa: S324 - an id
            when = self._touch(n)
            person = {"name": "rex", "email": "rex@example.com", "date": when}
            self.commits.setdefault(n, []).append(
                {"sha": sha, "commit": {"author": person, "committer": person,
                                        "message": message}})
            self.pulls[n]["head"]["sha"] = sha
            return sha

    def set_check(self, sha: str, name: str, conclusion: str | None = "success", *,
                  status: str = "completed") -> dict[str, Any]:
        with self._lock:
            runs = [r for r in self.check_runs.get(sha, []) if r["name"] != name]
            run = {"id": self._id(), "name": name, "head_sha": sha, "status": status,
                   "conclusion": conclusion if status == "completed" else None,
                   "html_url": f"https://github.com/x/y/runs/{self._ids}",
                   "details_url": "", "app": {"slug": "github-actions"},
                   "started_at": _iso(self.clock()), "completed_at": _iso(self.clock())}
            self.check_runs[sha] = [*runs, run]
            return run

    def set_status(self, sha: str, context: str, state: str) -> dict[str, Any]:
        with self._lock:
            sts = [s for s in self.statuses.get(sha, []) if s["context"] != context]
            st = {"id": self._id(), "context": context, "state": state,
                  "description": f"{context} {state}", "target_url": "https://ci.example/1",
                  "created_at": _iso(self.clock())}
            self.statuses[sha] = [*sts, st]
            return st

    def __enter__(self) -> FakeGitHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
