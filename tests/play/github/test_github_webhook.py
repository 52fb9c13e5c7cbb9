"""``POST /api/v1/webhooks/github`` through a real `healer serve`: the signature decides, a
refused delivery stores nothing, a redelivery is applied once, and deliveries alone drive
A1, A4 and A5 to a play incident and clear them."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from github_rig import CIPHER, CLEO, REPO, REX, TESS

from healer.testing.api import ServeProcess, stored_records
from healer.testing.fake_github import FakeGitHub
from healer.testing.github_webhooks import (
    check_run_event,
    github_delivery,
    issue_comment_event,
    ping_event,
    pull_request_event,
    push_event,
    review_event,
    status_event,
)
from healer.testing.loop import healer_env
from healer.testing.wait import wait_for

pytestmark = pytest.mark.e2e

SECRET = "gh-webhook-secret-0123456789abcdef"
HOOK = "/api/v1/webhooks/github"
MAX_BODY = 65536


def _server(root: Path, **extra: str) -> ServeProcess:
    # Loopback only, and no polling unless asked: the webhook alone drives most tests.
    settings = {"HEALER_EXECUTOR": "playbook", "HEALER__PLAY__REEVALUATE_AFTER_S": "0",
                "HEALER__PLAY__MAX_ITERATIONS": "1",
                "HEALER__GITHUB__API_URL": "http://127.0.0.1:9",
                "HEALER__GITHUB__POLL": "false",
                "HEALER__GITHUB__MAX_BODY_BYTES": str(MAX_BODY), **extra}
    env = healer_env(root / "state", root / "results", root / "fleet", **settings)
    s = ServeProcess(env)
    s.state = root / "state"  # type: ignore[attr-defined]
    return s


@pytest.fixture(scope="module")
def quiet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """A server that only ever sees refused or empty deliveries."""
    s = _server(tmp_path_factory.mktemp("gh-quiet"), HEALER_GITHUB_WEBHOOK_SECRET=SECRET)
    yield s
    s.close()


@pytest.fixture
def busy(tmp_path: Path) -> Iterator[ServeProcess]:
    s = _server(tmp_path, HEALER_GITHUB_WEBHOOK_SECRET=SECRET)
    yield s
    s.close()


def records(server: ServeProcess) -> dict[str, int]:
    return stored_records(server.state)  # type: ignore[attr-defined]


def send(server: ServeProcess, event: str, body: Any, **kw: Any) -> httpx.Response:
    raw, headers = github_delivery(event, body, secret=SECRET, **kw)
    return server.http.post(HOOK, content=raw, headers=headers)


def refused(server: ServeProcess, raw: bytes, headers: dict[str, str], code: int) -> None:
    before = records(server)
    r = server.http.post(HOOK, content=raw, headers=headers)
    assert r.status_code == code, r.text
    assert r.json()["status"] == "error" and r.json()["error"]
    assert records(server) == before


class TestSignature:
    def test_a_signed_ping_is_answered(self, quiet: ServeProcess) -> None:
        r = send(quiet, "ping", ping_event(REPO))
        assert r.status_code == 200 and r.json()["status"] == "ok"

    def test_forged_missing_and_sha1_signatures_are_401(self, quiet: ServeProcess) -> None:
        raw, headers = github_delivery("ping", ping_event(REPO), secret="not-the-secret")
        refused(quiet, raw, headers, 401)
        bare = {k: v for k, v in headers.items() if k != "X-Hub-Signature-256"}
        refused(quiet, raw, bare, 401)
        sha1 = "sha1=" + hmac.new(SECRET.encode(), raw, hashlib.sha1).hexdigest()
        refused(quiet, raw, {**bare, "X-Hub-Signature-256": sha1}, 401)
        bare_hex = hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
        refused(quiet, raw, {**bare, "X-Hub-Signature-256": bare_hex}, 401)
        # The right signature over a different body.
        _, good = github_delivery("ping", ping_event(REPO), secret=SECRET)
        refused(quiet, raw + b" ", {**bare, "X-Hub-Signature-256":
                                    good["X-Hub-Signature-256"]}, 401)

    def test_oversized_bad_json_and_no_delivery_id_are_refused(self, quiet: ServeProcess
                                                               ) -> None:
        big = {"zen": "x" * (MAX_BODY + 10), "repository": {"full_name": REPO}}
        refused(quiet, *github_delivery("ping", big, secret=SECRET), 413)
        raw = b'{"zen": "unterminated'
        _, headers = github_delivery("ping", {}, secret=SECRET)
        headers["X-Hub-Signature-256"] = "sha256=" + hmac.new(
            SECRET.encode(), raw, hashlib.sha256).hexdigest()
        refused(quiet, raw, headers, 400)
        raw, headers = github_delivery("ping", ping_event(REPO), secret=SECRET)
        refused(quiet, raw, {k: v for k, v in headers.items() if k != "X-GitHub-Delivery"},
                400)
        refused(quiet, raw, {**headers, "X-GitHub-Delivery": "../../etc"}, 400)

    def test_a_payload_not_shaped_like_the_event_is_400(self, quiet: ServeProcess) -> None:
        refused(quiet, *github_delivery("pull_request", {"action": "opened", "repository": {
            "full_name": "../../x"}, "pull_request": {"number": 1}}, secret=SECRET), 400)
        refused(quiet, *github_delivery("check_run", {"repository": {"full_name": REPO}},
                                        secret=SECRET), 400)

    def test_unhandled_events_are_acknowledged(self, quiet: ServeProcess) -> None:
        r = send(quiet, "star", {"action": "created", "repository": {"full_name": REPO}})
        assert r.status_code == 200 and r.json()["status"] == "ignored"

    def test_the_route_needs_no_api_token_and_keeps_githubs_content_type(
            self, tmp_path: Path) -> None:
        """With api.token set the webhook still answers (its signature is its auth), and
        GitHub's form-encoded deliveries are not refused as non-JSON by the guard."""
        s = _server(tmp_path, HEALER_GITHUB_WEBHOOK_SECRET=SECRET,
                    HEALER_TOKEN="api-token-0123456789abcdef")
        try:
            raw, headers = github_delivery("ping", ping_event(REPO), secret=SECRET)
            assert s.http.post(HOOK, content=raw, headers=headers).status_code == 200
            form = {**headers, "Content-Type": "application/x-www-form-urlencoded"}
            forged = {**form, "X-Hub-Signature-256": "sha256=" + "0" * 64}
            assert s.http.post(HOOK, content=raw, headers=forged).status_code == 401
            assert s.http.get("/api/v1/sessions").status_code == 401
        finally:
            s.close()


class TestNotConfigured:
    def test_without_a_secret_nothing_is_accepted(self, tmp_path: Path) -> None:
        s = _server(tmp_path)
        try:
            refused(s, *github_delivery("ping", ping_event(REPO), secret=""), 404)
            refused(s, *github_delivery("ping", ping_event(REPO), secret=SECRET), 404)
        finally:
            s.close()


def start_play(server: ServeProcess) -> None:
    r = server.http.post("/api/v1/session/start", json={
        "play_id": "play-task-4-abc12", "repository": REPO,
        "cto_config": {"agents": {"rex": {"tools": {"remote": []}}}},
        "tasks": [{"id": 4, "title": "api", "dependencies": [], "priority": 1}]})
    assert r.status_code == 200, r.text


def issues(server: ServeProcess, code: str) -> list[dict[str, Any]]:
    session = server.http.get("/api/v1/session/play-task-4-abc12").json()["session"]
    return [i for i in session["issues"] if i.get("code") == code]


class TestDeliveriesDriveTheAlerts:
    def test_a5_from_deliveries_then_green_again(self, busy: ServeProcess) -> None:
        start_play(busy)
        fake = FakeGitHub()  # only as a source of PR payloads in GitHub's shape
        pr = fake.add_pull(REPO, "feature/task-4-api", REX)
        assert send(busy, "pull_request", pull_request_event(
            "opened", pr, repo=REPO)).status_code == 202
        r = send(busy, "pull_request_review", review_event(pr, CLEO, "APPROVED", repo=REPO,
                                                           review_id=11))
        assert r.status_code == 202 and r.json()["prs"] == [f"pr/{REPO}/{pr['number']}"]
        delivery = "7f0c8a10-5d2e-11ef-9d2b-abcdefabcdef"
        failing = check_run_event(pr, "build", "failure", repo=REPO, run_id=21)
        assert send(busy, "check_run", failing, delivery=delivery).status_code == 202
        found = wait_for(lambda: issues(busy, "A5"), 20)
        assert found[0]["link"] == pr["html_url"] and found[0]["issue_type"] == "build_failure"
        listed = busy.http.get("/api/v1/incidents", params={"kind": "play"}).json()
        a5 = [i for i in listed["incidents"] if (i.get("links") or {}).get("pr")]
        assert a5 and a5[0]["links"]["pr"] == pr["html_url"]
        # GitHub's "Redeliver": the same delivery id is acknowledged, not applied again.
        again = send(busy, "check_run", failing, delivery=delivery)
        assert again.status_code == 200 and again.json()["status"] == "duplicate"
        assert issues(busy, "A5")[0]["count"] == found[0]["count"]
        send(busy, "check_run", check_run_event(pr, "build", "success", repo=REPO,
                                                run_id=22))
        wait_for(lambda: issues(busy, "A5")[0].get("resolved"), 20)
        iid = a5[0]["id"]
        wait_for(lambda: busy.http.get(f"/api/v1/incidents/{iid}").json()["incident"][
            "status"] == "resolved", 20)

    def test_a1_a4_status_and_push_from_deliveries(self, busy: ServeProcess) -> None:
        start_play(busy)
        fake = FakeGitHub()
        pr = fake.add_pull(REPO, "feature/task-4-api", REX)
        send(busy, "pull_request", pull_request_event("opened", pr, repo=REPO))
        send(busy, "issue_comment", issue_comment_event(pr, TESS, "tests pass", repo=REPO,
                                                        comment_id=31))
        a1 = wait_for(lambda: issues(busy, "A1"), 20)
        assert a1[0]["agent"] == "tess"
        send(busy, "issue_comment", issue_comment_event(pr, CLEO, "quality ok", repo=REPO,
                                                        comment_id=32))
        send(busy, "issue_comment", issue_comment_event(
            pr, "octocat", "security reviewed <!-- healer-agent: cipher -->", repo=REPO,
            comment_id=33))
        wait_for(lambda: issues(busy, "A1")[0].get("resolved"), 20)
        for i, state in enumerate(("approved", "changes_requested", "approved",
                                   "changes_requested")):
            send(busy, "pull_request_review", review_event(pr, CIPHER, state, repo=REPO,
                                                           review_id=40 + i))
        a4 = wait_for(lambda: issues(busy, "A4"), 20)
        assert a4[0]["agent"] == "rex"
        wait_for(lambda: issues(busy, "A4")[0].get("escalated"), 30)  # no action for retry
        # A new head commit pushed: progress, and the old commit's statuses are forgotten.
        sha = "b" * 40
        r = send(busy, "push", push_event("feature/task-4-api", [sha], repo=REPO))
        assert r.status_code == 202
        prog = busy.state / "records" / "play-progress" / "play-task-4-abc12.json"  # type: ignore[attr-defined]
        wait_for(prog.exists, 10)
        assert json.loads(prog.read_text())["data"]["sources"].get("commit") or \
            json.loads(prog.read_text())["data"]["sources"].get("comment")
        r = send(busy, "status", status_event(sha, "ci/jenkins", "failure", repo=REPO))
        assert r.status_code == 202
        # Closed: the PR is released and its alerts clear.
        r = send(busy, "pull_request", pull_request_event("closed", {**pr, "state": "closed"},
                                                          repo=REPO))
        assert r.status_code == 202
        wait_for(lambda: all(i.get("resolved") for i in issues(busy, "A4")), 20)


class TestPollingAndWebhookShareOneRecord:
    def test_the_loop_polls_and_a_delivery_completes_the_picture(self, tmp_path: Path
                                                                 ) -> None:
        """`healer serve` with a token polls the fake (wired only because a token is set);
        the poll saw the red check, a review delivery brings the approval: A5, on the one
        record both write. The check going green is seen by the next poll: cleared."""
        token = "ghp_loopTestToken0123456789abcdefABCDEF"
        with FakeGitHub(token) as fake:
            pr = fake.add_pull(REPO, "feature/task-4-api", REX)
            sha = fake.add_commit(pr["number"])
            fake.set_check(sha, "build", "failure")
            s = _server(tmp_path, HEALER_GITHUB_WEBHOOK_SECRET=SECRET, GITHUB_TOKEN=token,
                        HEALER__GITHUB__API_URL=fake.url, HEALER__GITHUB__POLL="true",
                        HEALER__GITHUB__POLL_INTERVAL_S="1")
            try:
                start_play(s)
                prs = s.state / "records" / "github-prs"  # type: ignore[attr-defined]
                wait_for(lambda: any(e["path"].endswith("/check-runs") for e in fake.log), 20)
                wait_for(lambda: list(prs.glob("*.json")), 10)
                assert not issues(s, "A5")
                r = send(s, "pull_request_review", review_event(
                    {**pr, "head": {**pr["head"], "sha": sha}}, CLEO, "approved", repo=REPO,
                    review_id=77))
                assert r.status_code == 202
                wait_for(lambda: issues(s, "A5"), 20)
                fake.set_check(sha, "build", "success")
                wait_for(lambda: issues(s, "A5")[0].get("resolved"), 20)
                assert token not in s.log()
            finally:
                s.close()
