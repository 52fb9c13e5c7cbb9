"""Forges: where fix PRs (and issues) are published — locally, or on GitHub.

* ``LocalForge`` (``forge.kind: local``, the default): the branch is fetched from the healing
  clone (``PullRequest.source``) into the repository, and a PR record
  ``<state>/forge/prs/<n>.json`` with the diff beside it (``<n>.diff``) is written; issues are
  Markdown files under ``<state>/forge/issues/``. A PR counts as merged once its head commit is
  reachable from the base branch; setting ``"state": "closed"`` in the record closes it.
* ``GitHubForge`` (``forge.kind: github``): pushes the head commit from the healing clone to
  ``forge.push_url`` (from the settings, never from a repository's config; default
  ``https://github.com/<forge.github_repo>.git``) with an explicit refspec, and uses the REST
  API (``POST /repos/{o}/{r}/pulls`` as a **draft**, ``POST …/issues/{n}/labels``,
  ``GET …/pulls/{n}``, ``POST …/issues``) with the token from ``forge.token_env``. git gets the
  token as an ``http.extraHeader`` through its environment (``healer.core.git``), only for
  ``https`` (or ``http`` to loopback).

Both publish only branches under ``BRANCH_PREFIX`` (``healer/…``), open PRs as drafts
(``PullRequest.draft``, true unless a caller says otherwise; healer merges nothing), find the
PR of a branch (``find_pr``: one revert PR per fix, ``healer.code.aftermerge``), and
re-run the validator on everything they publish — the last line of defence — raising
``AnonymizationError`` instead of publishing.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from ipaddress import ip_address
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit

from healer import __version__
from healer.core.files import atomic_create_bytes, atomic_write_bytes, atomic_write_text, dumps
from healer.core.git import BRANCH_PREFIX, git
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
    source: str = ""  # the healing clone that holds ``head`` (inspected before this)
    # A draft waits for a person to mark it ready; healer opens every PR as one (fixes and
    # the reverts of fixes that did not hold), and never merges.
    draft: bool = True


def _require_own_branch(pr: PullRequest) -> None:
    """healer publishes only its own branches (``healer/…``), never ``main`` or a user's."""
    if not pr.head.startswith(BRANCH_PREFIX) or ".." in pr.head or pr.head.endswith("/"):
        raise ForgeError(f"refusing to publish {pr.head!r}: healer pushes only branches under "
                         f"{BRANCH_PREFIX}")


@dataclass(frozen=True)
class PrRef:
    number: int
    url: str


class Forge(Protocol):
    """What the dispatcher and ``healer status --refresh`` need from a forge."""

    def open_pr(self, pr: PullRequest) -> PrRef: ...

    def pr_state(self, number: int) -> str: ...

    def find_pr(self, head: str) -> PrRef | None: ...

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

    def _fetch(self, pr: PullRequest) -> None:
        """The branch from the healing clone into the repository (objects checked by fsck)."""
        ref = f"refs/heads/{pr.head}"
        res = git(self.repo, "-c", "fetch.fsckObjects=true", "fetch", "--quiet", "--no-tags",
                  "--no-write-fetch-head", pr.source, f"+{ref}:{ref}", check=False)
        got = git(self.repo, "rev-parse", "--verify", "--quiet", ref, check=False)
        if not res.ok or got.stdout.strip() != pr.head_sha:
            raise ForgeError(f"could not take {pr.head} from the healing clone: "
                             f"{(res.stderr.strip().splitlines() or ['it moved'])[-1]}")

    def open_pr(self, pr: PullRequest) -> PrRef:
        _check(self.sanitizer, _own(pr), pr_title=pr.title, pr_body=pr.body, diff=pr.diff)
        _require_own_branch(pr)
        if pr.source:
            self._fetch(pr)
        folder = self.root / "prs"
        record: dict[str, Any] = {
            "title": pr.title, "body": pr.body, "head": pr.head, "base": pr.base,
            "head_sha": pr.head_sha, "base_sha": pr.base_sha, "labels": list(pr.labels),
            "state": OPEN, "draft": pr.draft, "created_at": time.time(), **pr.meta,
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

    def find_pr(self, head: str) -> PrRef | None:
        """The PR recorded for branch ``head`` (open, merged or closed), if any."""
        for path in sorted((self.root / "prs").glob("*.json")):
            try:
                rec = json.loads(path.read_bytes())
            except (OSError, ValueError):
                continue
            if isinstance(rec, dict) and rec.get("head") == head and rec.get("number"):
                return PrRef(int(rec["number"]), str(rec.get("url", "")))
        return None

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
                 push_url: str = "", sanitizer: Sanitizer | None = None,
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
        self.push_url = check_push_url(push_url or default_push_url(api_url, self.repo))
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

    def _push(self, pr: PullRequest) -> None:
        """Push exactly ``head_sha`` to ``refs/heads/<head>`` at the settings' push URL."""
        source = Path(pr.source) if pr.source else self.local_repo
        secret = {}
        if sends_token(self.push_url):
            # The token reaches git through the environment, never through argv (ps shows argv).
            basic = base64.b64encode(f"x-access-token:{self._token}".encode()).decode()
            secret = {"http.extraHeader": f"Authorization: Basic {basic}"}
        res = git(source, "push", "--quiet", "--no-verify", self.push_url,
                  f"{pr.head_sha}:refs/heads/{pr.head}", check=False, secret_config=secret,
                  git_dir=source / ".git" if pr.source else None)
        if not res.ok:
            raise ForgeError(f"git push of {pr.head} failed: "
                             f"{(res.stderr.strip().splitlines() or ['?'])[-1]}")

    def open_pr(self, pr: PullRequest) -> PrRef:
        _check(self.sanitizer, _own(pr), pr_title=pr.title, pr_body=pr.body, diff=pr.diff)
        _require_own_branch(pr)
        self._push(pr)
        created = self._request("POST", "/pulls", {
            "title": pr.title, "head": pr.head, "base": pr.base, "body": pr.body,
            "draft": pr.draft, "maintainer_can_modify": True,
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

    def find_pr(self, head: str) -> PrRef | None:
        """The PR of branch ``head`` in any state (``GET …/pulls?head=owner:branch``)."""
        owner = self.repo.split("/")[0]
        query = urlencode({"head": f"{owner}:{head}", "state": "all", "per_page": 100})
        for pr in self._request("GET", f"/pulls?{query}") or []:
            if isinstance(pr, dict) and (pr.get("head") or {}).get("ref") == head:
                return PrRef(int(pr["number"]), str(pr.get("html_url", "")))
        return None

    def open_issue(self, title: str, body: str, labels: tuple[str, ...] = (), *,
                   own: tuple[str, ...] = ()) -> PrRef:
        _check(self.sanitizer, own, issue_title=title, issue_body=body)
        data = self._request("POST", "/issues", {"title": title, "body": body,
                                                 "labels": list(labels)})
        return PrRef(int(data["number"]), str(data.get("html_url", "")))

    def comment_issue(self, number: int, body: str, *, own: tuple[str, ...] = ()) -> None:
        _check(self.sanitizer, own, issue_comment=body)
        self._request("POST", f"/issues/{int(number)}/comments", {"body": body})


def default_push_url(api_url: str, repo: str) -> str:
    """Where ``owner/name`` is pushed when ``forge.push_url`` is empty: github.com for the
    public API, else the API's host (GitHub Enterprise: ``https://HOST/api/v3`` →
    ``https://HOST/owner/name.git``)."""
    parts = urlsplit(api_url)
    if parts.hostname == "api.github.com":
        return f"https://github.com/{repo}.git"
    path = parts.path.rstrip("/")
    path = path[:-len("/api/v3")] if path.endswith("/api/v3") else path
    return f"{parts.scheme}://{parts.netloc}{path}/{repo}.git"


def _loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ip_address(host or "").is_loopback
    except ValueError:
        return False


def check_push_url(url: str) -> str:
    """``url`` if healer may push to it: ``https``, ``http`` to loopback, or a local path /
    ``file://`` URL. ssh and other transports are refused: their credentials would come
    from the machine (keys, an agent), not from healer's settings."""
    parts = urlsplit(url)
    if url.startswith("/") or parts.scheme == "file" or parts.scheme == "https" or (
            parts.scheme == "http" and _loopback(parts.hostname)):
        return url
    raise UsageError(f"forge.push_url {url!r} is not an https URL, an http URL on loopback or "
                     "a local path (healer pushes with the token from forge.token_env only)")


def sends_token(url: str) -> bool:
    """Whether a push to ``url`` carries the forge token (https, or http to loopback)."""
    parts = urlsplit(url)
    return parts.scheme == "https" or (parts.scheme == "http" and _loopback(parts.hostname))


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
                           push_url=f.push_url, sanitizer=sanitizer)
    return LocalForge(settings.state_path / "forge", repo, sanitizer)
