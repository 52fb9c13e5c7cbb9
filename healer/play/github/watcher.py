"""The GitHub watcher: which plays a PR belongs to, and what its state means for them.

The poller and the webhook intake both come here with what they saw. ``observe`` folds it
into the PR's record (``healer.play.github.pulls``), notes new commits and comments as the
plays' progress (``healer.play.progress``, for A3), and judges the record
(``healer.play.github.rules``): each finding is fired as a ``PlayAlert`` through the play
pipeline's ``AlertSink`` (issue → incident → evaluation → remediation → escalation), and
what fired before and is no longer found is cleared — which resolves its incident.

**Which PRs are a play's.** An open PR of the session's ``repository`` whose head branch or
one of whose labels contains, as a whole word, one of ``github.pr_match`` rendered for the
play (``{play_id}``, and ``task-{task_id}`` for each task of the session) — the branch names
and labels the CTO platform's agents give their PRs. At most ``github.max_prs_per_play``
(the most recently updated). When the play finishes, or the PR is merged or closed, its
alerts clear.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from healer.core.names import is_safe_name
from healer.errors import ConflictError, HealerError
from healer.play import progress
from healer.play.alerts import AlertSink, PlayAlert, alert_key
from healer.play.github import pulls
from healer.play.github.client import split_repo
from healer.play.github.rules import Finding, Rules, judge
from healer.play.sessions import SessionRegistry

log = logging.getLogger(__name__)

DELIVERIES = "github-deliveries"
SinkProvider = Callable[[], AlertSink | None]


class GitHubWatcher:
    def __init__(self, settings: Any, store: Any, *, sink: SinkProvider,
                 clock: Callable[[], float] = time.time):
        self.settings = settings
        self.gh = settings.github
        self.store = store
        self.clock = clock
        self.sink = sink
        self.rules = Rules.from_settings(self.gh)
        self.book = pulls.PullBook(store, max_prs=self.gh.max_prs, clock=clock)
        self.registry = SessionRegistry(store, clock=clock)
        self.allowed = {r.lower() for r in self.gh.repos}
        self._lock = threading.RLock()  # the webhook and the poller judge one PR at a time
        self.poller: Any = None  # the loop's Poller, when it polls (its last report)

    # -- plays and their PRs ---------------------------------------------------------------

    def active_plays(self) -> dict[str, list[dict[str, Any]]]:
        """Active sessions by repository (``owner/name``), those the watcher may read."""
        out: dict[str, list[dict[str, Any]]] = {}
        for play_id in self.registry.active_ids():
            session = self.registry.get(play_id)
            if not session or session.get("status") != "active":
                continue
            repo = self.repository(session)
            if repo:
                out.setdefault(repo, []).append(session)
        return out

    def repository(self, session: dict[str, Any]) -> str:
        """The session's repository as ``owner/name``, or "" when it is unusable or not in
        ``github.repos``."""
        raw = str(session.get("repository") or "").strip()
        raw = re.sub(r"^(https?://github\.com/|git@github\.com:)", "", raw).removesuffix(".git")
        try:
            owner, name = split_repo(raw)
        except HealerError:
            return ""
        repo = f"{owner}/{name}"
        if self.allowed and repo.lower() not in self.allowed:
            log.warning("play %s: repository %s is not in github.repos; not watched",
                        session.get("play_id"), repo)
            return ""
        return repo

    def matches(self, session: dict[str, Any], head_ref: str, labels: list[str]) -> bool:
        words = _rendered(self.gh.pr_match, session)
        return any(_word(w).search(text) for w in words for text in [head_ref, *labels] if text)

    def plays_for(self, repo: str, head_ref: str, labels: list[str]) -> list[str]:
        by_repo = self.active_plays()
        sessions = by_repo.get(_canonical(repo, by_repo), [])
        return sorted(s["play_id"] for s in sessions if self.matches(s, head_ref, labels))

    def room_for(self, play_id: str, key: str) -> bool:
        """Whether the PR ``key`` may be tracked for ``play_id`` (``github.max_prs_per_play``)."""
        mine = [k for k in self.book.tracked()
                if play_id in ((self.book.get(k) or {}).get("plays") or [])]
        return key in mine or len(mine) < self.gh.max_prs_per_play

    # -- folding in what was seen ----------------------------------------------------------

    def observe(self, repo: str, number: int, fn: Callable[[dict[str, Any]], None], *,
                plays: list[str] | None = None) -> dict[str, Any] | None:
        """Fold ``fn`` into the PR's record, note progress, judge it. ``plays``: the plays it
        belongs to (tracked from now on if any); None: only a PR already tracked is
        updated. Returns the record (None when the PR is not tracked)."""
        with self._lock:
            def apply(rec: dict[str, Any]) -> None:
                fn(rec)
                if plays is not None:
                    rec["plays"] = sorted(set(plays))

            try:
                change = self.book.change(repo, number, apply, create=bool(plays))
            except ConflictError:
                log.warning("PR %s#%s changed under the watcher; next pass", repo, number)
                return None
            if change is None:
                return None
            rec = change.record
            if change.activity_at:
                kind, _, ident = change.activity.partition(":")
                at = min(change.activity_at, self.clock())
                for play_id in rec.get("plays", []):
                    progress.note(self.store, play_id, f"{kind}:{repo}#{number}/{ident}", at)
            return self.judge(rec)

    def judge(self, rec: dict[str, Any]) -> dict[str, Any]:
        """Fire what the rules find on the PR for each of its plays, clear what they no
        longer find; remembers what fired on the record (``firing``)."""
        with self._lock:
            findings = judge(rec, self.rules)
            before: dict[str, dict[str, Any]] = rec.get("firing") or {}
            now: dict[str, dict[str, Any]] = {}
            sink = self.sink()
            if sink is None:
                return rec
            for play_id in rec.get("plays", []):
                for f in findings:
                    now.setdefault(play_id, {})[f.code] = {"agent": f.agent,
                                                           "summary": f.summary}
                    if (before.get(play_id) or {}).get(f.code) != now[play_id][f.code]:
                        self._fire(sink, rec, play_id, f)
            for play_id, codes in before.items():
                for code, was in codes.items():
                    if (now.get(play_id) or {}).get(code, {}).get("agent") != was["agent"]:
                        self._clear(sink, rec, play_id, code, str(was["agent"]))
            if now != before:
                change = self.book.change(rec["repo"], rec["number"],
                                          lambda r: r.update(firing=now))
                return change.record if change else rec
            return rec

    def _fire(self, sink: AlertSink, rec: dict[str, Any], play_id: str, f: Finding) -> None:
        repo, number = rec["repo"], rec["number"]
        alert = PlayAlert(
            code=f.code, play_id=play_id, agent=f.agent if is_safe_name(f.agent) else "",
            target=pulls.target(repo, number), severity=f.severity, summary=f.summary,
            issue_type=f.issue_type, link=str(rec.get("url") or ""),
            detail={**f.detail, "repository": repo, "pr": number, "url": rec.get("url", ""),
                    "source": "github"})
        try:
            sink.fire(alert)
        except HealerError as exc:
            log.warning("play %s: %s on %s#%s not raised: %s", play_id, f.code, repo,
                        number, exc)
            return
        log.warning("play %s: %s", play_id, f.summary)
        if alert.link:
            self._link(sink, alert)

    def _link(self, sink: AlertSink, alert: PlayAlert) -> None:
        """The PR's address on the alert's incident (``links.pr``), where ``GET
        /api/v1/incidents`` and ``healer status`` show it."""
        remediator = sink.play.remediator
        issue = {"issue_type": alert.issue_type, "agent": alert.agent, "code": alert.code,
                 "alert": alert_key(alert.code, alert.play_id, alert.agent)}
        iid = remediator.incident_id(alert.play_id, issue)
        current = remediator.ledger.get(iid)
        if current is not None and (current.get("links") or {}).get("pr") != alert.link:
            remediator.ledger.update(iid, links={**(current.get("links") or {}),
                                                 "pr": alert.link, "target": alert.target})

    def _clear(self, sink: AlertSink, rec: dict[str, Any], play_id: str, code: str,
               agent: str) -> None:
        try:
            sink.clear(code, play_id, agent if is_safe_name(agent) else "",
                       pulls.target(rec["repo"], rec["number"]))
        except HealerError as exc:
            log.warning("play %s: clearing %s failed: %s", play_id, code, exc)

    def release(self, key: str) -> None:
        """Stop following a PR (merged, closed, or none of its plays is active): its alerts
        clear, its record goes."""
        rec = self.book.get(key)
        if rec is None:
            return
        with self._lock:
            if rec.get("firing"):
                self.judge({**rec, "plays": [], "state": "closed"})
            self.book.forget(key)

    # -- webhook deliveries ----------------------------------------------------------------

    def first_delivery(self, delivery_id: str) -> bool:
        """Whether ``delivery_id`` is new (and remember it); a redelivery within
        ``github.delivery_ttl_s`` is not."""
        now = self.clock()
        try:
            self.store.create(DELIVERIES, delivery_id, {"at": now})
            return True
        except ConflictError:
            rec = self.store.get(DELIVERIES, delivery_id)
            if rec is not None and now - float(rec.data.get("at", 0)) > self.gh.delivery_ttl_s:
                self.store.put(DELIVERIES, delivery_id, {"at": now})
                return True
            return False

    def prune_deliveries(self) -> int:
        now, n = self.clock(), 0
        for rec in list(self.store.list(DELIVERIES)):
            if now - float(rec.data.get("at", 0)) > self.gh.delivery_ttl_s:
                self.store.delete(DELIVERIES, rec.key)
                n += 1
        return n


def _canonical(repo: str, by_repo: dict[str, Any]) -> str:
    """GitHub names are case-insensitive: the spelling the sessions use."""
    for known in by_repo:
        if known.lower() == repo.lower():
            return known
    return repo


def _rendered(templates: list[str], session: dict[str, Any]) -> list[str]:
    task_ids = [str(t.get("id")) for t in (session.get("tasks") or [])[:200]
                if isinstance(t, dict) and t.get("id") not in (None, "")]
    out = []
    for t in templates:
        base = t.replace("{play_id}", str(session.get("play_id", "")))
        if "{task_id}" in base:
            out += [base.replace("{task_id}", tid) for tid in task_ids]
        else:
            out.append(base)
    return [w for w in out if w]


def _word(text: str) -> re.Pattern[str]:
    """``text`` as a whole word of a branch name or label (``task-4`` is not in ``task-42``)."""
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(text)}(?![A-Za-z0-9])", re.IGNORECASE)
