"""GitHub webhook deliveries as GitHub sends them: headers, signature and payload shapes.

::

    raw, headers = github_delivery("check_run", check_run_event(pr, "build", "failure",
                                   repo="5dlabs/cto"), secret="s3cret")
    httpx.post(url + "/api/v1/webhooks/github", content=raw, headers=headers)

Payloads follow GitHub's webhook reference: every event has ``repository`` (``full_name``,
``owner.login``) and ``sender``; ``pull_request`` and ``pull_request_review`` carry the whole
PR (the fake's PR dicts have that shape); a review's ``state`` is lower case in webhooks
(``approved``, ``changes_requested``), unlike the REST API; a ``check_run`` names the PRs it
belongs to in ``pull_requests``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any


def signature(secret: str, raw: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def github_delivery(event: str, body: Any, *, secret: str, delivery: str | None = None
                    ) -> tuple[bytes, dict[str, str]]:
    """The raw body and headers of one delivery (``X-GitHub-Delivery`` a fresh GUID)."""
    raw = json.dumps(body).encode()
    return raw, {"Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/abc123",
                 "X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                 "X-GitHub-Hook-ID": "123456", "X-Hub-Signature-256": signature(secret, raw)}


def _now() -> str:
    return datetime.fromtimestamp(time.time(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def repository(full_name: str) -> dict[str, Any]:
    owner, name = full_name.split("/")
    return {"id": 1296269, "name": name, "full_name": full_name, "private": False,
            "owner": {"login": owner, "type": "Organization"},
            "html_url": f"https://github.com/{full_name}"}


def _envelope(action: str, repo: str, sender: str, **objects: Any) -> dict[str, Any]:
    return {"action": action, **objects, "repository": repository(repo),
            "sender": {"login": sender, "type": "Bot" if sender.endswith("[bot]") else "User"}}


def ping_event(repo: str) -> dict[str, Any]:
    return {"zen": "Keep it logically awesome.", "hook_id": 123456,
            "hook": {"type": "Repository", "events": ["*"], "active": True},
            "repository": repository(repo), "sender": {"login": "octocat"}}


def pull_request_event(action: str, pr: dict[str, Any], *, repo: str) -> dict[str, Any]:
    return {**_envelope(action, repo, pr["user"]["login"], pull_request=pr),
            "number": pr["number"]}


def review_event(pr: dict[str, Any], login: str, state: str, *, repo: str,
                 review_id: int, action: str = "submitted", body: str = "") -> dict[str, Any]:
    review = {"id": review_id, "user": {"login": login, "type": "Bot"}, "body": body,
              "state": state.lower(), "submitted_at": _now(),
              "commit_id": pr["head"]["sha"], "html_url": pr["html_url"]}
    return _envelope(action, repo, login, review=review, pull_request=pr)


def issue_comment_event(pr: dict[str, Any], login: str, body: str, *, repo: str,
                        comment_id: int, action: str = "created") -> dict[str, Any]:
    issue = {"number": pr["number"], "title": pr["title"], "state": pr["state"],
             "labels": pr["labels"], "user": pr["user"], "html_url": pr["html_url"],
             "pull_request": {"url": pr["url"], "html_url": pr["html_url"]}}
    comment = {"id": comment_id, "user": {"login": login, "type": "Bot"}, "body": body,
               "created_at": _now(), "updated_at": _now(), "html_url": pr["html_url"]}
    return _envelope(action, repo, login, issue=issue, comment=comment)


def check_run_event(pr: dict[str, Any], name: str, conclusion: str | None, *, repo: str,
                    run_id: int, status: str = "completed") -> dict[str, Any]:
    run = {"id": run_id, "name": name, "head_sha": pr["head"]["sha"], "status": status,
           "conclusion": conclusion if status == "completed" else None,
           "html_url": f"https://github.com/{repo}/runs/{run_id}", "details_url": "",
           "started_at": _now(), "completed_at": _now() if status == "completed" else None,
           "app": {"slug": "github-actions"},
           "pull_requests": [{"number": pr["number"], "head": {"ref": pr["head"]["ref"],
                                                               "sha": pr["head"]["sha"]},
                              "base": {"ref": pr["base"]["ref"]}}]}
    return _envelope(status if status != "completed" else "completed", repo,
                     "github-actions[bot]", check_run=run)


def status_event(sha: str, context: str, state: str, *, repo: str) -> dict[str, Any]:
    return {"id": 1, "sha": sha, "name": repo, "context": context, "state": state,
            "description": f"{context} {state}", "target_url": "https://ci.example/1",
            "branches": [], "repository": repository(repo), "sender": {"login": "ci"}}


def push_event(branch: str, shas: list[str], *, repo: str) -> dict[str, Any]:
    commits = [{"id": s, "message": "work", "timestamp": _now(), "distinct": True}
               for s in shas]
    return {"ref": f"refs/heads/{branch}", "before": "0" * 40, "after": shas[-1],
            "commits": commits, "head_commit": commits[-1], "created": False,
            "deleted": False, "forced": False, "repository": repository(repo),
            "pusher": {"name": "rex"}, "sender": {"login": "5dlabs-rex[bot]"}}
