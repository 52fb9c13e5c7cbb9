"""GitHub webhook deliveries: verified, validated, de-duplicated, folded into the PR records.

GitHub signs each delivery's raw body with the webhook's secret and sends
``X-Hub-Signature-256: sha256=<hex HMAC-SHA256>``; ``verify_signature`` checks it in
constant time (the SHA-1 ``X-Hub-Signature`` is not accepted). ``X-GitHub-Event`` names the
event, ``X-GitHub-Delivery`` is a GUID per delivery — a redelivery (GitHub's "Redeliver", a
replay) carries the same one and is acknowledged without being applied twice.

Handled events and what they change on the tracked PR (``healer.play.github.pulls``):

===================== =========================================================================
``pull_request``      the PR's fields (head, labels, state, ``mergeable``); a matching open PR
                      of an active play starts being tracked; ``closed`` releases it
``pull_request_review`` one review (``submitted``, ``edited``, ``dismissed``)
``issue_comment``     one comment on a PR (``created``, ``edited``, ``deleted``); plain issues
                      are ignored
``check_run``         one check run of the PR's head commit
``check_suite``       a suite's conclusion, as a check named ``suite:<app>``
``status``            one commit status (context) of the head commit
``push``              new commits on a tracked PR's head branch (progress; checks reset)
``ping``              nothing (GitHub's hello when the hook is made)
===================== =========================================================================

Everything is validated before anything is stored (``parse``), so a malformed delivery is
refused whole.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from healer.errors import UsageError
from healer.play.github import pulls
from healer.play.github.client import split_repo
from healer.play.github.watcher import GitHubWatcher

EVENTS = ("pull_request", "pull_request_review", "issue_comment", "check_run", "check_suite",
          "status", "push", "ping")


def verify_signature(secret: str, raw: bytes, header: str | None) -> str:
    """``""`` when ``header`` is ``sha256=`` and the HMAC-SHA256 of ``raw`` under ``secret``,
    else why not."""
    if not secret:
        return "no GitHub webhook secret is configured"
    if not header:
        return "missing X-Hub-Signature-256"
    algorithm, sep, given = header.strip().partition("=")
    if not sep or algorithm != "sha256":
        return "X-Hub-Signature-256 must be sha256=<hex digest>"
    expected = hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), given.strip().lower().encode("utf-8",
                                                                              "replace")):
        return "X-Hub-Signature-256 does not match the body"
    return ""


def sign(secret: str, raw: bytes) -> str:
    """The ``X-Hub-Signature-256`` GitHub would send for ``raw`` (tests, replay tools)."""
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Event:
    """A validated delivery: the event, its repository and the objects it carries."""

    name: str
    action: str
    repo: str
    data: dict[str, Any] = field(default_factory=dict)


def _obj(payload: dict[str, Any], name: str) -> dict[str, Any]:
    value = payload.get(name)
    if not isinstance(value, dict):
        raise UsageError(f"{name} must be an object")
    return value


def _number(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1 << 31:
        raise UsageError(f"{what} must be a positive integer")
    return value


def parse(name: str, payload: Any) -> Event | None:
    """The delivery as an ``Event``; None for an event healer does not handle;
    ``UsageError`` when the payload is not what GitHub sends for it."""
    if name not in EVENTS:
        return None
    if not isinstance(payload, dict):
        raise UsageError("the payload must be a JSON object")
    action = payload.get("action") if isinstance(payload.get("action"), str) else ""
    if name == "ping":
        return Event(name, "", "", {"zen": str(payload.get("zen", ""))[:200]})
    repo_obj = _obj(payload, "repository")
    owner, repo_name = split_repo(repo_obj.get("full_name"))
    repo, data = f"{owner}/{repo_name}", {}
    if name in ("pull_request", "pull_request_review"):
        pr = _obj(payload, "pull_request")
        _number(pr.get("number"), "pull_request.number")
        data["pull_request"] = pr
        if name == "pull_request_review":
            data["review"] = _obj(payload, "review")
            _number(data["review"].get("id"), "review.id")
    elif name == "issue_comment":
        issue = _obj(payload, "issue")
        _number(issue.get("number"), "issue.number")
        data["issue"], data["comment"] = issue, _obj(payload, "comment")
        _number(data["comment"].get("id"), "comment.id")
    elif name in ("check_run", "check_suite"):
        item = _obj(payload, name)
        if not isinstance(item.get("head_sha"), str):
            raise UsageError(f"{name}.head_sha must be a string")
        data[name] = item
    elif name == "status":
        if not isinstance(payload.get("sha"), str) or not isinstance(payload.get("state"), str):
            raise UsageError("status needs sha and state")
        data["status"] = payload
    elif name == "push":
        if not isinstance(payload.get("ref"), str):
            raise UsageError("push.ref must be a string")
        if not isinstance(payload.get("commits", []), list):
            raise UsageError("push.commits must be a list")
        data["push"] = payload
    return Event(name, action, repo, data)


def apply(watcher: GitHubWatcher, ev: Event) -> dict[str, Any]:
    """Fold the event into the PRs it concerns; what it touched (``prs``: their targets)."""
    if ev.name == "ping":
        return {"status": "ok", "event": "ping", "zen": ev.data.get("zen", "")}
    touched: list[str] = []
    handler = _HANDLERS[ev.name]
    for number, fn, plays in handler(watcher, ev):
        rec = watcher.observe(ev.repo, number, fn, plays=plays)
        if rec is not None:
            touched.append(pulls.target(ev.repo, number))
            if ev.name == "pull_request" and ev.action == "closed":
                watcher.release(pulls.pr_key(ev.repo, number))
    return {"status": "accepted" if touched else "ignored", "event": ev.name,
            "action": ev.action, "prs": touched,
            **({} if touched else {"reason": "no tracked PR of an active play"})}


Fold = Callable[[dict[str, Any]], None]
Work = list[tuple[int, Fold, list[str] | None]]


def _plays(watcher: GitHubWatcher, repo: str, pr: dict[str, Any]) -> list[str] | None:
    """The active plays an open PR belongs to (None: only update it if already tracked)."""
    fields = pulls.pull_fields(pr)
    if fields["state"] != "open":
        return None
    key = pulls.pr_key(repo, fields["number"])
    plays = watcher.plays_for(repo, fields["head_ref"], fields["labels"])
    room = [p for p in plays if watcher.room_for(p, key)]
    return room or None


def _pull_request(watcher: GitHubWatcher, ev: Event) -> Work:
    pr = ev.data["pull_request"]

    def fn(rec: dict[str, Any]) -> None:
        pulls.apply_pull(rec, pr)
        if ev.action == "synchronize" and pr.get("head", {}).get("sha"):
            # The commits arrive with the push event; the new head alone is progress too.
            rec["commits"] = pulls.merge_items(
                rec.get("commits", []), [{"sha": str(pr["head"]["sha"])[:64],
                                          "at": pulls.epoch(pr.get("updated_at"))}],
                "sha", watcher.gh.max_items)

    return [(int(pr["number"]), fn, _plays(watcher, ev.repo, pr))]


def _review(watcher: GitHubWatcher, ev: Event) -> Work:
    pr, review = ev.data["pull_request"], ev.data["review"]
    item = pulls.review(review)
    if ev.action == "dismissed":
        item["state"] = "DISMISSED"

    def fn(rec: dict[str, Any]) -> None:
        pulls.apply_pull(rec, pr)
        rec["reviews"] = pulls.merge_items(rec.get("reviews", []), [item], "id",
                                           watcher.gh.max_items)

    return [(int(pr["number"]), fn, _plays(watcher, ev.repo, pr))]


def _comment(watcher: GitHubWatcher, ev: Event) -> Work:
    issue, comment = ev.data["issue"], ev.data["comment"]
    if not isinstance(issue.get("pull_request"), dict):
        return []  # a comment on a plain issue
    item = pulls.comment(comment)

    def fn(rec: dict[str, Any]) -> None:
        kept = [c for c in rec.get("comments", []) if c.get("id") != item["id"]]
        rec["comments"] = kept if ev.action == "deleted" else pulls.merge_items(
            kept, [item], "id", watcher.gh.max_items)

    labels = [str(label.get("name", "")) for label in issue.get("labels") or []
              if isinstance(label, dict)]
    key = pulls.pr_key(ev.repo, int(issue["number"]))
    plays = [p for p in watcher.plays_for(ev.repo, "", labels) if watcher.room_for(p, key)]
    return [(int(issue["number"]), fn, plays if issue.get("state") == "open" and plays
             else None)]


def _on_head(watcher: GitHubWatcher, ev: Event, sha: str, numbers: set[int],
             update: Fold) -> Work:
    """The tracked PRs of the repository whose head is ``sha`` (or that GitHub names)."""
    work: Work = []
    sha = pulls.sha_or_empty(sha)
    if not sha:
        return work
    for rec in watcher.book.records(ev.repo):
        if rec.get("head_sha") == sha or rec.get("number") in numbers:
            def fn(r: dict[str, Any]) -> None:
                if r.get("number") in numbers and r.get("head_sha") != sha:
                    pulls.set_head(r, sha)  # GitHub says this commit is the PR's head now
                if r.get("head_sha") == sha:
                    update(r)

            work.append((int(rec["number"]), fn, None))
    return work


def _pr_numbers(item: dict[str, Any]) -> set[int]:
    return {int(p["number"]) for p in (item.get("pull_requests") or [])[:50]
            if isinstance(p, dict) and isinstance(p.get("number"), int)}


def _check_run(watcher: GitHubWatcher, ev: Event) -> Work:
    run = ev.data["check_run"]
    name = str(run.get("name") or "check")[:100]

    def update(rec: dict[str, Any]) -> None:
        rec.setdefault("checks", {})[name] = pulls.check_run(run)

    return _on_head(watcher, ev, str(run["head_sha"]), _pr_numbers(run), update)


def _check_suite(watcher: GitHubWatcher, ev: Event) -> Work:
    suite = ev.data["check_suite"]
    app = suite.get("app") if isinstance(suite.get("app"), dict) else {}
    name = f"suite:{str(app.get('slug') or suite.get('id') or 'checks')[:80]}"

    def update(rec: dict[str, Any]) -> None:
        rec.setdefault("checks", {})[name] = {"status": str(suite.get("status") or "")[:20],
                                              "conclusion": str(suite.get("conclusion")
                                                                or "")[:30], "url": ""}

    return _on_head(watcher, ev, str(suite["head_sha"]), _pr_numbers(suite), update)


def _status(watcher: GitHubWatcher, ev: Event) -> Work:
    st = ev.data["status"]
    context = str(st.get("context") or "default")[:100]

    def update(rec: dict[str, Any]) -> None:
        rec.setdefault("statuses", {})[context] = pulls.status(st)

    return _on_head(watcher, ev, str(st["sha"]), set(), update)


def _push(watcher: GitHubWatcher, ev: Event) -> Work:
    push = ev.data["push"]
    ref = str(push["ref"])
    if not ref.startswith("refs/heads/") or push.get("deleted"):
        return []
    branch = ref.removeprefix("refs/heads/")
    after = str(push.get("after") or "")[:64]
    items = [pulls.commit(c) for c in push.get("commits", [])[:watcher.gh.max_items]
             if isinstance(c, dict)]
    work: Work = []
    for rec in watcher.book.records(ev.repo):
        if rec.get("head_ref") != branch:
            continue

        def fn(r: dict[str, Any]) -> None:
            pulls.set_head(r, after)
            r["commits"] = pulls.merge_items(r.get("commits", []), items, "sha",
                                             watcher.gh.max_items)

        work.append((int(rec["number"]), fn, None))
    return work


_HANDLERS: dict[str, Callable[[GitHubWatcher, Event], Work]] = {
    "pull_request": _pull_request, "pull_request_review": _review,
    "issue_comment": _comment, "check_run": _check_run, "check_suite": _check_suite,
    "status": _status, "push": _push,
}
