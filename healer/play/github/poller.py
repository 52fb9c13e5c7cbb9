"""Polling GitHub for the PRs of active plays, cheaply.

One pass (``Poller.poll_once``, every ``github.poll_interval_s``):

1. for each repository of an active play, the open PRs (``GET /repos/{o}/{r}/pulls``, the
   most recently updated first) — matched to the plays (``GitHubWatcher.matches``);
2. for each matched PR: the PR itself (``mergeable``, ``mergeable_state``), its issue
   comments, reviews and commits, and its head commit's check runs (Checks API) and combined
   status — six conditional GETs, each sent with the ETag of its last answer, so a PR where
   nothing happened costs six 304s and no rate limit;
3. PRs no longer open, or whose plays all finished, are released (their alerts clear).

When the rate limit holds (``GitHubRateLimitError``) the pass stops where it is, keeps what
it read, and the next passes send nothing until the limit's reset (``waiting_until`` in the
report, ``healer status``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from healer.errors import GitHubError, GitHubRateLimitError
from healer.play.github import pulls
from healer.play.github.client import GitHubClient, Reply, split_repo
from healer.play.github.watcher import GitHubWatcher

log = logging.getLogger(__name__)

LISTS = "github-repos"  # store kind: the open-PR list of a repository and its ETag
STATUS = ("github-poll", "latest")  # the last pass, for `healer status` in another process


@dataclass
class PollReport:
    """What one pass did."""

    requests: int = 0
    not_modified: int = 0
    prs: int = 0
    released: int = 0
    waiting_until: float = 0.0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (0, 0.0, [])}


class Poller:
    def __init__(self, watcher: GitHubWatcher, client: GitHubClient):
        self.watcher = watcher
        self.client = client
        self.gh = watcher.gh
        self.store = watcher.store
        self.last: PollReport | None = None
        self._logged_hold = 0.0

    async def poll_once(self) -> PollReport:
        report = PollReport()
        sent = self.client.sent
        try:
            await self._pass(report)
        except GitHubRateLimitError as exc:
            report.waiting_until = exc.until
            if exc.until != self._logged_hold:
                self._logged_hold = exc.until
                log.warning("GitHub polling waits %.0f s: %s",
                            max(0.0, exc.until - self.watcher.clock()), exc)
        report.requests = self.client.sent - sent
        self.last = report
        rate = self.client.rate
        self.store.put(*STATUS, {
            **report.as_dict(), "at": self.watcher.clock(),
            "tracked": len(self.watcher.book.tracked()),
            **({"rate_remaining": rate.remaining, "rate_limit": rate.limit,
                "rate_reset": rate.reset} if rate else {})}, durable=False)
        return report

    async def _pass(self, report: PollReport) -> None:
        held = self.client.held()
        if held:
            raise GitHubRateLimitError("held", until=held)
        by_repo = self.watcher.active_plays()
        wanted: dict[tuple[str, int], set[str]] = {}
        listed: set[str] = set()
        for repo, sessions in sorted(by_repo.items()):
            try:
                open_prs = await self._open_prs(repo, report)
            except GitHubRateLimitError:
                raise
            except GitHubError as exc:
                report.errors.append(str(exc)[:300])
                log.warning("GitHub: %s", exc)
                continue
            listed.add(repo.lower())
            for session in sessions:
                mine = [p for p in open_prs
                        if self.watcher.matches(session, p["head_ref"], p["labels"])]
                for p in mine[:self.gh.max_prs_per_play]:  # the list is newest first
                    wanted.setdefault((repo, p["number"]), set()).add(session["play_id"])
        active = {r.lower() for r in by_repo}
        for key in self.watcher.book.tracked():
            rec = self.watcher.book.get(key)
            if rec is None:
                continue
            repo = str(rec.get("repo", ""))
            gone = repo.lower() not in active or (
                repo.lower() in listed and (repo, rec.get("number")) not in wanted)
            if gone:
                await asyncio.to_thread(self.watcher.release, key)
                report.released += 1
        for (repo, number), plays in sorted(wanted.items()):
            await self._refresh(repo, number, sorted(plays), report)
            report.prs += 1

    async def _get(self, path: str, etag: str, report: PollReport,
                   params: dict[str, str | int] | None = None) -> Reply:
        reply = await self.client.get(path, params=params, etag=etag)
        if reply.not_modified:
            report.not_modified += 1
        return reply

    async def _open_prs(self, repo: str, report: PollReport) -> list[dict[str, Any]]:
        owner, name = split_repo(repo)
        key = f"{owner}.{name}"
        cached = self.store.get(LISTS, key)
        etag = str(cached.data.get("etag", "")) if cached else ""
        reply = await self._get(f"/repos/{owner}/{name}/pulls", etag, report,
                                {"state": "open", "sort": "updated", "direction": "desc",
                                 "per_page": 100})
        if reply.not_modified and cached:
            return list(cached.data.get("pulls", []))
        prs = [pulls.pull_fields(p) for p in (reply.data or [])[:100] if isinstance(p, dict)]
        self.store.put(LISTS, key, {"etag": reply.etag, "pulls": prs})
        return prs

    async def _refresh(self, repo: str, number: int, plays: list[str],
                       report: PollReport) -> None:
        owner, name = split_repo(repo)
        base = f"/repos/{owner}/{name}"
        rec = self.watcher.book.get(pulls.pr_key(repo, number)) or {}
        etags: dict[str, str] = dict(rec.get("etags") or {})
        head = str(rec.get("head_sha", ""))
        per_page = self.gh.max_items
        steps: list[Callable[[dict[str, Any]], None]] = []

        def etag_of(what: str, reply: Reply) -> Callable[[dict[str, Any]], None]:
            return lambda r: r.setdefault("etags", {}).__setitem__(what, reply.etag)

        try:
            reply = await self._get(f"{base}/pulls/{number}", etags.get("pull", ""), report)
            if not reply.not_modified and isinstance(reply.data, dict):
                steps += [lambda r, d=reply.data: pulls.apply_pull(r, d),
                          etag_of("pull", reply)]
                new_head = pulls.sha_or_empty((reply.data.get("head") or {}).get("sha")) or head
                if new_head != head:
                    etags.pop("check-runs", None)
                    etags.pop("status", None)
                    head = new_head
            for what, path, fold in (
                    ("comments", f"{base}/issues/{number}/comments", _fold_comments),
                    ("reviews", f"{base}/pulls/{number}/reviews", _fold_reviews),
                    ("commits", f"{base}/pulls/{number}/commits", _fold_commits)):
                steps += await self._newest(what, path, fold, rec, etags, report, per_page)
            if head:
                reply = await self._get(f"{base}/commits/{head}/check-runs",
                                        etags.get("check-runs", ""), report,
                                        {"per_page": per_page})
                if not reply.not_modified and isinstance(reply.data, dict):
                    steps += [lambda r, d=reply.data, h=head: _fold_checks(r, d, h),
                              etag_of("check-runs", reply)]
                reply = await self._get(f"{base}/commits/{head}/status",
                                        etags.get("status", ""), report,
                                        {"per_page": per_page})
                if not reply.not_modified and isinstance(reply.data, dict):
                    steps += [lambda r, d=reply.data, h=head: _fold_status(r, d, h),
                              etag_of("status", reply)]
        except GitHubRateLimitError:
            await self._apply(repo, number, plays, steps)  # keep what was read before the limit
            raise
        except GitHubError as exc:
            report.errors.append(str(exc)[:300])
            log.warning("GitHub: %s", exc)
        await self._apply(repo, number, plays, steps)

    async def _newest(self, what: str, path: str, fold: Fold, rec: dict[str, Any],
                      etags: dict[str, str], report: PollReport, per_page: int
                      ) -> list[Callable[[dict[str, Any]], None]]:
        """Read the newest page of a list GitHub gives oldest first (comments, reviews,
        commits): the page read last time (with its ETag), the next one once that was full,
        and the last one when the ``Link`` header says the list has grown past them (a long
        thread seen for the first time). The steps fold what is new into the record."""
        known = (rec.get("pages") or {}).get(what)
        read = int((known or {}).get("page", 1))  # the page read last time
        page = read + 1 if (known or {}).get("full") else read
        # (A record from before pages were kept: its ETag is of page 1, maybe a full one.)
        etag = etags.get(what, "") if known and page == read else ""

        async def get(n: int, tag: str) -> Reply:
            return await self._get(path, tag, report,
                                   {"per_page": per_page, **({"page": n} if n > 1 else {})})

        reply = await get(page, etag)
        if reply.not_modified or not isinstance(reply.data, list):
            return []
        data = list(reply.data)
        last = _last_page(reply.headers.get("link", ""))
        if last > page:
            reply = await get(last, "")
            if not isinstance(reply.data, list):
                return []
            page, data = last, list(reply.data)
            if len(data) < per_page:  # keep a whole page's worth of the newest
                before = await get(last - 1, "")
                if isinstance(before.data, list):
                    data = [*before.data, *data][-per_page:]
        if page > read and not reply.data:
            return []  # the next page is still empty: nothing new since the full one
        state = {"page": page, "full": len(reply.data) >= per_page}
        complete = page == 1 and len(data) < per_page  # the whole list: gone means deleted

        def remember(r: dict[str, Any], tag: str = reply.etag) -> None:
            r.setdefault("etags", {})[what] = tag
            r.setdefault("pages", {})[what] = state

        return [lambda r: fold(r, data, per_page, complete), remember]

    async def _apply(self, repo: str, number: int, plays: list[str],
               steps: list[Callable[[dict[str, Any]], None]]) -> None:
        def fn(rec: dict[str, Any]) -> None:
            for step in steps:
                step(rec)

        # Store writes and the alert sink are synchronous: off the event loop.
        await asyncio.to_thread(self.watcher.observe, repo, number, fn, plays=plays)


Fold = Callable[[dict[str, Any], list[Any], int, bool], None]
_LAST = re.compile(r'<[^>]*[?&]page=(\d+)[^>]*>;\s*rel="last"')


def _last_page(link: str) -> int:
    """The page number of ``rel="last"`` in a GitHub ``Link`` header (0 when there is none)."""
    m = _LAST.search(link or "")
    return int(m.group(1)) if m else 0


def _fold_comments(rec: dict[str, Any], data: list[Any], limit: int, complete: bool) -> None:
    items = [pulls.comment(c) for c in data[-limit:] if isinstance(c, dict)]
    rec["comments"] = pulls.merge_items(rec.get("comments", []), items, "id", limit,
                                        complete=complete)


def _fold_reviews(rec: dict[str, Any], data: list[Any], limit: int, complete: bool) -> None:
    items = [pulls.review(r) for r in data[-limit:] if isinstance(r, dict)]
    rec["reviews"] = pulls.merge_items(rec.get("reviews", []), items, "id", limit,
                                       complete=complete)


def _fold_commits(rec: dict[str, Any], data: list[Any], limit: int, complete: bool) -> None:
    items = [pulls.commit(c) for c in data[-limit:] if isinstance(c, dict)]
    rec["commits"] = pulls.merge_items(rec.get("commits", []), items, "sha", limit,
                                       complete=complete)


def _fold_checks(rec: dict[str, Any], data: dict[str, Any], head: str) -> None:
    pulls.set_head(rec, head)
    runs = [c for c in (data.get("check_runs") or []) if isinstance(c, dict)]
    latest: dict[str, dict[str, Any]] = {}
    for run in sorted(runs, key=lambda c: int(c.get("id") or 0)):  # a re-run wins
        latest[str(run.get("name") or "check")[:100]] = pulls.check_run(run)
    rec["checks"] = dict(list(latest.items())[:100])


def _fold_status(rec: dict[str, Any], data: dict[str, Any], head: str) -> None:
    pulls.set_head(rec, head)
    rec["statuses"] = {str(s.get("context") or "default")[:100]: pulls.status(s)
                       for s in (data.get("statuses") or [])[:100] if isinstance(s, dict)}
    rec["combined_state"] = str(data.get("state") or "")[:20]
