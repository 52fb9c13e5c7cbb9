"""Issues on the forge: where analyses and escalations are written for people.

``local`` (the default) keeps each issue as a Markdown file under ``<state>/forge/issues/``
plus a record in the store; ``github`` uses the GitHub REST API with the token from
``forge.token_env``. Issues sharing a dedup key within a window are one issue: later reports
become comments. Every title and body passes the publication validator first.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from healer.config import Settings
from healer.core.files import atomic_write_text
from healer.core.store import Store
from healer.errors import ConflictError, UnavailableError

KEYS = "forge-issue-keys"
_KEY_CLEAN = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class IssueRef:
    number: int
    url: str
    created: bool


def dedup_key(*parts: str) -> str:
    return _KEY_CLEAN.sub("-", ".".join(parts)).strip(".-")[:128] or "issue"


class Tracker(Protocol):
    async def create(self, title: str, body: str, labels: list[str]) -> tuple[int, str]: ...

    async def comment(self, number: int, body: str) -> None: ...


class LocalTracker:
    def __init__(self, settings: Settings, store: Store):
        self.folder = settings.state_path / "forge" / "issues"
        self.store = store

    async def create(self, title: str, body: str, labels: list[str]) -> tuple[int, str]:
        rec = self.store.update("forge-counters", "issues",
                                lambda d: {"next": (d or {"next": 0})["next"] + 1})
        assert rec is not None
        number = int(rec.data["next"])
        path = self.folder / f"{number:05d}.md"
        head = f"# {title}\n\nlabels: {', '.join(labels)}\nopened: {_now()}\n\n"
        atomic_write_text(path, head + body.rstrip() + "\n")
        return number, str(path.absolute())

    async def comment(self, number: int, body: str) -> None:
        path = self.folder / f"{number:05d}.md"
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        atomic_write_text(path, f"{text}\n---\n\n**Update {_now()}**\n\n{body.rstrip()}\n")


class GitHubTracker:
    def __init__(self, settings: Settings, token: str):
        if not settings.forge.github_repo or "/" not in settings.forge.github_repo:
            raise UnavailableError("forge.github_repo must be set to owner/name")
        self.base = settings.forge.api_url.rstrip("/") + f"/repos/{settings.forge.github_repo}"
        self.headers = {"Authorization": f"Bearer {token}",
                        "Accept": "application/vnd.github+json",
                        "X-GitHub-Api-Version": "2022-11-28"}

    async def create(self, title: str, body: str, labels: list[str]) -> tuple[int, str]:
        async with httpx.AsyncClient(timeout=20, headers=self.headers) as c:
            r = await c.post(f"{self.base}/issues",
                             json={"title": title, "body": body, "labels": labels})
            r.raise_for_status()
            data = r.json()
        return int(data["number"]), str(data.get("html_url", ""))

    async def comment(self, number: int, body: str) -> None:
        async with httpx.AsyncClient(timeout=20, headers=self.headers) as c:
            r = await c.post(f"{self.base}/issues/{number}/comments", json={"body": body})
            r.raise_for_status()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def tracker(settings: Settings, store: Store) -> Tracker:
    if settings.forge.kind == "github":
        import os

        token = os.environ.get(settings.forge.token_env, "")
        if not token:
            raise UnavailableError(f"forge github: ${settings.forge.token_env} is not set")
        return GitHubTracker(settings, token)
    return LocalTracker(settings, store)


class Issues:
    """Open-or-comment with dedup, validated before anything is published."""

    def __init__(self, settings: Settings, store: Store, backend: Tracker | None = None):
        self.settings = settings
        self.store = store
        self.backend = backend or tracker(settings, store)

    async def open(self, *, key: str, title: str, body: str, labels: list[str],
                   window_s: float) -> IssueRef:
        from healer.selfheal.sanitize import ensure_publishable

        title = ensure_publishable(title, "issue title")
        body = ensure_publishable(body, "issue body")
        now = time.time()
        existing = self.store.get(KEYS, key)
        if existing and now - float(existing.data["opened"]) < window_s:
            await self.backend.comment(int(existing.data["number"]), body)
            return IssueRef(int(existing.data["number"]), existing.data["url"], created=False)
        number, url = await self.backend.create(title, body, labels)
        data: dict[str, Any] = {"number": number, "url": url, "opened": now, "title": title}
        try:
            if existing:
                self.store.put(KEYS, key, data, expected_revision=existing.revision)
            else:
                self.store.create(KEYS, key, data)
        except ConflictError:
            pass  # a concurrent opener won; both issues exist, the record keeps theirs
        return IssueRef(number, url, created=True)
