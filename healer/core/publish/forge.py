"""Forges: where fix PRs (and issues) are published — locally, or on GitHub.

* ``LocalForge`` (``forge.kind: local``, the default): the branch stays in the repository and
  a PR record ``<state>/forge/prs/<n>.json`` with the diff beside it (``<n>.diff``); issues are
  Markdown files under ``<state>/forge/issues/``. A PR counts as merged once its head commit is
  reachable from the base branch; setting ``"state": "closed"`` in the record closes it.
* ``GitHubForge`` (``forge.kind: github``): pushes the branch to ``forge.remote`` and uses the
  REST API (``POST /repos/{o}/{r}/pulls``, ``POST …/issues/{n}/labels``, ``GET …/pulls/{n}``,
  ``POST …/issues``) with the token from ``forge.token_env``.

Both re-run the validator on everything they publish — the last line of defence — and raise
``AnonymizationError`` instead of publishing.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from healer import __version__
from healer.core.files import atomic_create_bytes, atomic_write_bytes, atomic_write_text, dumps
from healer.core.git import git
from healer.core.names import safe_name
from healer.core.publish.sanitizer import Sanitizer
from healer.errors import HealerError, UsageError

OPEN, MERGED, CLOSED = "open", "merged", "closed"
HTTP_TIMEOUT_S = 30.0


class ForgeError(HealerError):
    """The forge refused or failed (``status``: the HTTP status, 0 for local/git errors)."""

    def __init__(self, message: str, *, status: int = 0):
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class PullRequest:
    """A fix to publish: the branch (already holding the commits) and its description."""

    title: str
    body: str
    head: str
    base: str
    head_sha: str
    base_sha: str
    diff: str
    labels: tuple[str, ...] = ("self-healing", "automated")
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PrRef:
    number: int
    url: str


class Forge(Protocol):
    """What the dispatcher and ``healer status --refresh`` need from a forge."""

    def open_pr(self, pr: PullRequest) -> PrRef: ...

    def pr_state(self, number: int) -> str: ...

    def open_issue(self, title: str, body: str, labels: tuple[str, ...] = (), *,
                   own: tuple[str, ...] = ()) -> PrRef: ...

    def comment_issue(self, number: int, body: str, *, own: tuple[str, ...] = ()) -> None: ...


def _check(sanitizer: Sanitizer, own: tuple[str, ...] = (), **texts: str) -> None:
    for what, text in texts.items():
        sanitizer.ensure_publishable(text, what.replace("_", " "), own=own)


def _own(pr: PullRequest) -> tuple[str, ...]:
    """The identifiers healer minted for this PR (its meta: incident, attempt, fingerprint)
    and its branch."""
    return (pr.head, *(str(v) for v in (pr.meta or {}).values() if isinstance(v, str)))


class LocalForge:
    """PR records and issues as files under ``<state>/forge``; the branch stays in ``repo``."""

    def __init__(self, root: Path | str, repo: Path | str, sanitizer: Sanitizer | None = None):
        self.root = Path(root)
        self.repo = Path(repo)
        self.sanitizer = sanitizer or Sanitizer()

    def _next(self, folder: Path, suffix: str, data: bytes) -> tuple[int, Path]:
        folder.mkdir(parents=True, exist_ok=True)
        numbers = [int(p.name.split(".")[0]) for p in folder.glob(f"*{suffix}")
                   if p.name.split(".")[0].isdigit()]
        n = max(numbers, default=0) + 1
        while True:
            path = folder / f"{n}{suffix}"
            if atomic_create_bytes(path, data):
                return n, path
            n += 1

    def open_pr(self, pr: PullRequest) -> PrRef:
        _check(self.sanitizer, _own(pr), pr_title=pr.title, pr_body=pr.body, diff=pr.diff)
        folder = self.root / "prs"
        record: dict[str, Any] = {
            "title": pr.title, "body": pr.body, "head": pr.head, "base": pr.base,
            "head_sha": pr.head_sha, "base_sha": pr.base_sha, "labels": list(pr.labels),
            "state": OPEN, "created_at": time.time(), **pr.meta,
        }
        # Claim the number first (create-only), then fill in the record and the diff.
        n, path = self._next(folder, ".json", dumps({**record, "state": "creating"}))
        diff_path = folder / f"{n}.diff"
        atomic_write_text(diff_path, pr.diff)
        record.update(number=n, url=path.resolve().as_uri(), diff_file=str(diff_path.resolve()))
        atomic_write_bytes(path, dumps(record))
        return PrRef(n, record["url"])

    def record(self, number: int) -> dict[str, Any]:
        path = self.root / "prs" / f"{int(number)}.json"
        try:
            data: dict[str, Any] = json.loads(path.read_bytes())
        except FileNotFoundError as exc:
            raise ForgeError(f"local PR #{number} not found") from exc
        return data

    def pr_state(self, number: int) -> str:
        rec = self.record(number)
        if rec.get("state") == MERGED:
            return MERGED
        merged = git(self.repo, "merge-base", "--is-ancestor", rec["head_sha"], rec["base"],
                     check=False).returncode == 0
        if merged:
            rec.update(state=MERGED, merged_at=time.time())
            atomic_write_bytes(self.root / "prs" / f"{int(number)}.json", dumps(rec))
            return MERGED
        return CLOSED if rec.get("state") == CLOSED else OPEN

    def open_issue(self, title: str, body: str, labels: tuple[str, ...] = (), *,
                   own: tuple[str, ...] = ()) -> PrRef:
        _check(self.sanitizer, own, issue_title=title, issue_body=body)
        head = f"---\ntitle: {json.dumps(title)}\nlabels: {json.dumps(list(labels))}\n---\n\n"
        n, path = self._next(self.root / "issues", ".md", (head + body.rstrip() + "\n").encode())
        return PrRef(n, path.resolve().as_uri())

    def comment_issue(self, number: int, body: str, *, own: tuple[str, ...] = ()) -> None:
        _check(self.sanitizer, own, issue_comment=body)
        path = self.root / "issues" / f"{int(number)}.md"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise ForgeError(f"local issue #{number} not found") from exc
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        atomic_write_text(path, f"{text.rstrip()}\n\n---\n\n**Update {stamp}**\n\n"
                                f"{body.rstrip()}\n")


class GitHubForge:
    """The GitHub REST API (v2022-11-28) plus ``git push`` of the healing branch."""

    def __init__(self, *, api_url: str, repo: str, token: str, local_repo: Path | str,
                 remote: str = "origin", sanitizer: Sanitizer | None = None,
                 timeout: float = HTTP_TIMEOUT_S):
        owner, _, name = repo.partition("/")
        safe_name(owner, "GitHub owner")
        safe_name(name, "GitHub repository")
        if not token:
            raise UsageError("the github forge needs a token (forge.token_env)")
        if urlsplit(api_url).scheme not in ("http", "https"):
            raise UsageError(f"forge.api_url {api_url!r} is not an http(s) URL")
        self.api_url = api_url.rstrip("/")
        self.repo = f"{owner}/{name}"
        self.local_repo = Path(local_repo)
        self.remote = safe_name(remote, "git remote")
        self.sanitizer = sanitizer or Sanitizer()
        self._token = token
        self._timeout = timeout

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        import httpx

        headers = {
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {self._token}",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": f"healer/{__version__}",
        }
        url = f"{self.api_url}/repos/{self.repo}{path}"
        try:
            with httpx.Client(timeout=self._timeout) as client:
                resp = client.request(method, url, headers=headers, json=body)
        except httpx.HTTPError as exc:
            raise ForgeError(f"GitHub {method} {path}: {type(exc).__name__}") from exc
        if resp.status_code >= 300:
            try:
                detail = resp.json().get("message", "")
            except ValueError:
                detail = resp.text[:200]
            raise ForgeError(f"GitHub {method} {path}: HTTP {resp.status_code} {detail}",
                             status=resp.status_code)
        return resp.json() if resp.content else None

    def _push(self, branch: str) -> None:
        secret = {}
        url = git(self.local_repo, "remote", "get-url", self.remote, check=False).stdout.strip()
        if url.startswith("https://"):
            # The token reaches git through the environment, never through argv (ps shows argv).
            basic = base64.b64encode(f"x-access-token:{self._token}".encode()).decode()
            secret = {"http.extraHeader": f"Authorization: Basic {basic}"}
        res = git(self.local_repo, "push", "--quiet", self.remote,
                  f"refs/heads/{branch}:refs/heads/{branch}", check=False,
                  secret_config=secret)
        if not res.ok:
            raise ForgeError(f"git push to {self.remote} failed: "
                             f"{(res.stderr.strip().splitlines() or ['?'])[-1]}")

    def open_pr(self, pr: PullRequest) -> PrRef:
        _check(self.sanitizer, _own(pr), pr_title=pr.title, pr_body=pr.body, diff=pr.diff)
        self._push(pr.head)
        created = self._request("POST", "/pulls", {
            "title": pr.title, "head": pr.head, "base": pr.base, "body": pr.body,
            "maintainer_can_modify": True,
        })
        number = int(created["number"])
        if pr.labels:
            self._request("POST", f"/issues/{number}/labels", {"labels": list(pr.labels)})
        return PrRef(number, str(created.get("html_url", "")))

    def pr_state(self, number: int) -> str:
        data = self._request("GET", f"/pulls/{int(number)}")
        if data.get("merged") or data.get("merged_at"):
            return MERGED
        return CLOSED if data.get("state") == "closed" else OPEN

    def open_issue(self, title: str, body: str, labels: tuple[str, ...] = (), *,
                   own: tuple[str, ...] = ()) -> PrRef:
        _check(self.sanitizer, own, issue_title=title, issue_body=body)
        data = self._request("POST", "/issues", {"title": title, "body": body,
                                                 "labels": list(labels)})
        return PrRef(int(data["number"]), str(data.get("html_url", "")))

    def comment_issue(self, number: int, body: str, *, own: tuple[str, ...] = ()) -> None:
        _check(self.sanitizer, own, issue_comment=body)
        self._request("POST", f"/issues/{int(number)}/comments", {"body": body})


def open_forge(settings: Any, repo: Path | str, sanitizer: Sanitizer | None = None,
               env: dict[str, str] | None = None) -> Forge:
    """The forge the settings ask for, publishing fixes of ``repo``."""
    import os

    f = settings.forge
    if f.kind == "github":
        if not f.github_repo:
            raise UsageError("forge.kind is github but forge.github_repo is empty")
        token = (env if env is not None else os.environ).get(f.token_env, "")
        return GitHubForge(api_url=f.api_url, repo=f.github_repo, token=token, local_repo=repo,
                           remote=f.remote, sanitizer=sanitizer)
    return LocalForge(settings.state_path / "forge", repo, sanitizer)
