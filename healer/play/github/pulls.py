"""The tracked pull requests: one store record per PR, written by the poller and the webhook.

Both sources fold what they saw into the same record (compare-and-set), in the same
normalised shape, so a webhook delivery and the next poll agree on one picture::

    github-prs/<owner>.<name>.<number>
      repo, number, url, title, author, head_ref, head_sha, base_ref, state, merged, draft,
      mergeable, mergeable_state, labels[], plays[]       (the active plays it belongs to)
      comments[{id, login, marker, at}]   reviews[{id, login, state, at, commit_id}]
      commits[{sha, at}]   checks{name: {status, conclusion, url}}   statuses{context: …}
      etags{what: etag}    firing{play_id: {code: agent}}            (alerts raised on it)

No comment or review text is kept — only who wrote it, when, and the hand-off marker
(``<!-- healer-agent: NAME -->``) it carried. Every list is bounded (``github.max_items``),
the number of tracked PRs too (``github.max_prs``; closed ones are forgotten first).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from healer.core.names import is_safe_name
from healer.core.store import Store
from healer.play.github.client import split_repo

KIND = "github-prs"
TRACKED = "github-prs-tracked"  # store set: keys of the PRs the watcher follows
MARKER = re.compile(r"<!--\s*healer-agent:\s*([A-Za-z0-9._-]{1,64})\s*-->", re.IGNORECASE)
_SHA = re.compile(r"[0-9a-fA-F]{7,64}")


def pr_key(repo: str, number: int) -> str:
    """The record key of a PR. GitHub names are case-insensitive (a session may say
    ``5DLabs/CTO``, a payload ``5dlabs/cto``): one record either way."""
    owner, name = split_repo(repo)
    # An owner has no '.', so the key is unambiguous.
    return f"{owner.lower()}.{name.lower()}.{int(number)}"


def sha_or_empty(value: Any) -> str:
    """A commit id as GitHub gives it (hex, SHA-1 or SHA-256), else "" — it becomes part of
    an API path."""
    return value.lower() if isinstance(value, str) and _SHA.fullmatch(value) else ""


def target(repo: str, number: int) -> str:
    """How an alert names a PR: ``pr/owner/repo/12`` (like ``pod/cto/NAME``; no ``#``, which
    the remediation playbook refuses to substitute into an action's argv)."""
    return f"pr/{repo}/{int(number)}"


def epoch(value: Any) -> float:
    """GitHub's ISO 8601 timestamps (``2024-05-01T12:00:00Z``) as epoch seconds; 0 if none."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _login(user: Any) -> str:
    login = user.get("login") if isinstance(user, dict) else None
    return str(login)[:100] if isinstance(login, str) else ""


def _text(value: Any, limit: int = 300) -> str:
    return value[:limit] if isinstance(value, str) else ""


# --- normalising what GitHub sends (REST answers and webhook payloads share these shapes) ---

def pull_fields(pr: dict[str, Any]) -> dict[str, Any]:
    """The PR's own fields (``GET /pulls/{n}``, a list item, or a webhook's ``pull_request``)."""
    head, base = pr.get("head") or {}, pr.get("base") or {}
    out = {
        "number": int(pr.get("number") or 0), "url": _text(pr.get("html_url"), 500),
        "title": _text(pr.get("title")), "author": _login(pr.get("user")),
        "head_ref": _text(head.get("ref"), 255), "head_sha": sha_or_empty(head.get("sha")),
        "base_ref": _text(base.get("ref"), 255), "state": _text(pr.get("state"), 20),
        "merged": bool(pr.get("merged") or pr.get("merged_at")), "draft": bool(pr.get("draft")),
        "labels": [_text(label.get("name"), 100) for label in (pr.get("labels") or [])[:50]
                   if isinstance(label, dict)],
    }
    # List answers leave mergeability out; only a PR's own answer (or a webhook) has it.
    if "mergeable" in pr:
        out["mergeable"] = pr["mergeable"] if isinstance(pr["mergeable"], bool) else None
        out["mergeable_state"] = _text(pr.get("mergeable_state"), 30)
    return out


def comment(c: dict[str, Any]) -> dict[str, Any]:
    m = MARKER.search(c.get("body") or "") if isinstance(c.get("body"), str) else None
    return {"id": int(c.get("id") or 0), "login": _login(c.get("user")),
            "marker": m.group(1).lower() if m else "", "at": epoch(c.get("created_at"))}


def review(r: dict[str, Any]) -> dict[str, Any]:
    m = MARKER.search(r.get("body") or "") if isinstance(r.get("body"), str) else None
    # REST says APPROVED / CHANGES_REQUESTED; the webhook's review says approved / ….
    return {"id": int(r.get("id") or 0), "login": _login(r.get("user")),
            "state": _text(r.get("state"), 30).upper(), "at": epoch(r.get("submitted_at")),
            "commit_id": _text(r.get("commit_id"), 64), "marker": m.group(1).lower() if m else ""}


def commit(c: dict[str, Any]) -> dict[str, Any]:
    """A PR commit (``GET /pulls/{n}/commits``) or a pushed one (``push``'s ``commits[]``)."""
    inner = c.get("commit") or {}
    when = ((inner.get("committer") or {}).get("date") or (inner.get("author") or {}).get("date")
            or c.get("timestamp"))
    return {"sha": _text(c.get("sha") or c.get("id"), 64), "at": epoch(when)}


def check_run(c: dict[str, Any]) -> dict[str, Any]:
    return {"status": _text(c.get("status"), 20), "conclusion": _text(c.get("conclusion"), 30),
            "url": _text(c.get("html_url") or c.get("details_url"), 500)}


def status(s: dict[str, Any]) -> dict[str, Any]:
    return {"state": _text(s.get("state"), 20), "url": _text(s.get("target_url"), 500),
            "description": _text(s.get("description"), 140)}


# --- folding into a record --------------------------------------------------------------------

def merge_items(old: list[dict[str, Any]], new: Iterable[dict[str, Any]], key: str,
                limit: int, *, complete: bool = False) -> list[dict[str, Any]]:
    """``new`` folded into ``old`` by ``key``, oldest first, the newest ``limit`` kept.
    ``complete``: ``new`` is the whole list (one page that was not full), so what is missing
    from it was deleted."""
    by_key = {} if complete else {i[key]: i for i in old}
    for item in new:
        if item.get(key):
            by_key[item[key]] = item
    return sorted(by_key.values(), key=lambda i: (
        i.get("at", 0), i[key] if isinstance(i[key], int) else 0, str(i[key])))[-limit:]


def set_head(rec: dict[str, Any], sha: str) -> None:
    """A new head commit: the checks and statuses of the old one no longer say anything."""
    sha = sha_or_empty(sha)
    if sha and sha != rec.get("head_sha"):
        rec["head_sha"] = sha
        rec["checks"], rec["statuses"] = {}, {}
        for what in ("check-runs", "status"):
            rec.setdefault("etags", {}).pop(what, None)


def apply_pull(rec: dict[str, Any], pr: dict[str, Any]) -> None:
    fields = pull_fields(pr)
    set_head(rec, fields.pop("head_sha"))
    rec.update({k: v for k, v in fields.items() if k != "number"})


@dataclass(frozen=True)
class Change:
    """What a write added: the record after it, and the newest commit or comment it brought
    (``activity``: ``commit:<sha>`` or ``comment:<id>``, made at ``activity_at``; 0 when it
    brought none) — the play's progress."""

    record: dict[str, Any]
    activity_at: float = 0.0
    activity: str = ""


class PullBook:
    """The tracked PR records of one store."""

    def __init__(self, store: Store, *, max_prs: int = 200, clock: Callable[[], float]):
        self.store = store
        self.max_prs = max_prs
        self.clock = clock

    def get(self, key: str) -> dict[str, Any] | None:
        if not is_safe_name(key):
            return None
        rec = self.store.get(KIND, key)
        return rec.data if rec else None

    def tracked(self) -> list[str]:
        return self.store.members(TRACKED)

    def records(self, repo: str | None = None) -> list[dict[str, Any]]:
        """The tracked PRs (of one repository)."""
        prefix = pr_key(repo, 0)[:-1] if repo else ""
        out = []
        for key in self.tracked():
            if key.startswith(prefix):
                data = self.get(key)
                if data is not None:
                    out.append(data)
        return out

    def change(self, repo: str, number: int, fn: Callable[[dict[str, Any]], None], *,
               create: bool = False) -> Change | None:
        """Apply ``fn`` to the PR's record (made first when ``create``); None when it is not
        tracked and ``create`` is false."""
        key = pr_key(repo, number)
        seen: dict[str, Any] = {}

        def update(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None and not create:
                return None
            rec = cur or {"repo": repo, "number": int(number), "plays": [], "comments": [],
                          "reviews": [], "commits": [], "checks": {}, "statuses": {},
                          "etags": {}, "firing": {}, "created_at": self.clock()}
            seen["before"], seen["new"] = _activity_keys(rec), cur is None
            fn(rec)
            rec["updated_at"] = self.clock()
            return rec

        stored = self.store.update(KIND, key, update)
        if stored is None:
            return None
        if seen.get("new"):
            self.store.add_member(TRACKED, key)
            self._bound()
        return Change(stored.data, *_new_activity(seen.get("before", set()), stored.data))

    def forget(self, key: str) -> None:
        self.store.remove_member(TRACKED, key)
        self.store.delete(KIND, key)

    def _bound(self) -> None:
        keys = self.tracked()
        if len(keys) <= self.max_prs:
            return
        recs = [(k, self.get(k) or {}) for k in keys]
        # Finished PRs go first, then the ones quiet the longest.
        recs.sort(key=lambda kr: (kr[1].get("state") == "open" and bool(kr[1].get("plays")),
                                  kr[1].get("updated_at", 0)))
        for key, _ in recs[:len(keys) - self.max_prs]:
            self.forget(key)


def _activity_keys(rec: dict[str, Any]) -> set[str]:
    return ({f"c{c['id']}" for c in rec.get("comments", [])}
            | {f"s{c['sha']}" for c in rec.get("commits", [])})


def _new_activity(before: set[str], rec: dict[str, Any]) -> tuple[float, str]:
    new = [(float(c.get("at", 0)), f"comment:{c['id']}") for c in rec.get("comments", [])
           if f"c{c['id']}" not in before]
    new += [(float(c.get("at", 0)), f"commit:{c['sha'][:12]}") for c in rec.get("commits", [])
            if f"s{c['sha']}" not in before]
    return max(new, default=(0.0, ""))
