"""A person between anonymous input and a code agent, and between a sensitive fix and its PR.

Through the real parts: the real HTTP server (uvicorn on 127.0.0.1), the real ``healer``
CLI in its own process, detached healing workers running scripted agents in real git
worktrees, and the github forge against a fake GitHub that records every request — so "not
started" means no attempt and no worktree exist, and "not published" means the forge was
never asked.
"""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selfheal_fake_github import FakeGitHub
from selfheal_helpers import TRACEBACK, child_env, serve

from healer.core.audit import Audit
from healer.core.incidents import Ledger
from healer.core.store import FileStore
from healer.selfheal import attempts as st
from healer.selfheal.dispatch import Dispatcher
from healer.selfheal.service import SelfHealService, settings_snapshot
from healer.testing.git import git
from healer.testing.wait import until

pytestmark = pytest.mark.e2e
TOKEN = "ghp_fakeTokenForTheApprovalTests0123456789"


def report(repo: Path, message: str = "'user_id'") -> dict[str, str]:
    return {"error_type": "KeyError", "error_message": message,
            "traceback": TRACEBACK.format(root=repo)}


def cli(settings: Any, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The real `healer` command in its own process, on exactly these settings."""
    config = settings.state_path.parent / "cli-healer.yaml"
    config.write_text(json.dumps(settings_snapshot(settings)))
    return subprocess.run([sys.executable, "-m", "healer", *args, "--config", str(config)],
                          cwd=settings.state_path.parent, capture_output=True, text=True,
                          env=child_env(**env), timeout=60)


def audit(settings: Any, iid: str, event: str) -> list[dict[str, Any]]:
    return [e for e in Audit(settings.state_path).read(iid) if e["event"] == event]


def words(n: int) -> str:
    """A word per number, letters only (digits would be normalised away)."""
    out = ""
    while True:
        n, r = divmod(n, 26)
        out += string.ascii_lowercase[r]
        if not n:
            return out


class TestAnonymousReports:
    async def test_an_anonymous_report_waits_until_a_person_approves_with_the_cli(
            self, make_settings: Any, repo: Path) -> None:
        """POST /api/v1/errors with no token configured: recorded, 200 awaiting_approval, no
        attempt, no worktree — the agent never started. `healer approve` then starts it (a
        detached worker runs the agent to a PR) and the audit names the approver."""
        settings = make_settings("fix")
        svc = SelfHealService(settings, FileStore(settings.state_path), env={})
        async with serve(svc, anonymous=True) as c:
            r = await c.post("/api/v1/errors", json=report(repo))
            assert r.status_code == 200, r.text
            body = r.json()
            assert (body["accepted"], body["reason"]) == (False, "awaiting_approval")
            again = await c.post("/api/v1/errors", json=report(repo))
            assert again.json()["reason"] == "awaiting_approval"
            iid = f"code-{body['fingerprint']}"
            inc = (await c.get(f"/api/v1/incidents/{iid}")).json()["incident"]
            assert (inc["trust"], inc["status"], inc["count"]) == ("anonymous", "open", 2)
        assert list(svc.attempts.all()) == []
        assert not (settings.state_path / "worktrees").exists()

        listed = cli(settings, "approve", "--json")
        assert [w["id"] for w in json.loads(listed.stdout)["waiting"]] == [iid]
        status = cli(settings, "status")
        assert status.returncode == 1 and f"healer approve {iid}" in status.stdout

        out = cli(settings, "approve", iid, "--by", "alice", "--comment", "a real bug")
        assert out.returncode == 0, out.stderr
        assert f"{iid}: run approved by alice" in out.stdout and "started: attempt" in out.stdout

        def done() -> Any:
            atts = svc.attempts.for_fingerprint(body["fingerprint"])
            return atts and atts[0]["status"] not in st.ACTIVE and atts[0]

        att = await until(done, 60)
        assert att["status"] == st.PR_OPEN, att.get("reason")
        assert att["lane"] == "anonymous"  # its failures would trip only the anonymous breaker
        [rec] = audit(settings, iid, "approved")
        assert (rec["by"], rec["via"], rec["stage"], rec["comment"]) == \
            ("alice", "cli", "run", "a real bug")
        again = cli(settings, "approve", iid)
        assert again.returncode == 2 and "approved already, by alice" in again.stderr

    async def test_a_report_with_the_token_is_trusted_and_starts_at_once(
            self, make_settings: Any, repo: Path) -> None:
        svc = SelfHealService(make_settings("fix"), FileStore(make_settings().state_path),
                              env={}, launcher=lambda _a: None)
        async with serve(svc) as c:  # the client sends the configured token
            r = await c.post("/api/v1/errors", json=report(repo))
            assert r.status_code == 202 and r.json()["accepted"], r.text
            inc = (await c.get(f"/api/v1/incidents/code-{r.json()['fingerprint']}")).json()
        assert inc["incident"]["trust"] == "trusted"

    async def test_an_anonymous_caller_cannot_approve(self, make_settings: Any,
                                                      repo: Path) -> None:
        """With no token configured the approve and deny routes are refused (403, naming the
        setting), and nothing changes; with one, a caller without it is 401, and the holder
        of the token approves — recorded as by the API token."""
        settings = make_settings("fix")
        svc = SelfHealService(settings, FileStore(settings.state_path), env={},
                              launcher=lambda _a: None)
        async with serve(svc, anonymous=True) as c:
            fp = (await c.post("/api/v1/errors", json=report(repo))).json()["fingerprint"]
            iid = f"code-{fp}"
            for verb in ("approve", "deny"):
                r = await c.post(f"/api/v1/incidents/{iid}/{verb}", json={"by": "mallory"})
                assert r.status_code == 403 and "api.token" in r.json()["error"], r.text
            forged = await c.post(f"/api/v1/incidents/{iid}/approve",
                                  headers={"Authorization": "Bearer guessed"})
            assert forged.status_code == 403
        assert audit(settings, iid, "approved") == [] and list(svc.attempts.all()) == []
        inc = Ledger(svc.store).require(iid)
        assert inc["gate"]["reason"] == "awaiting_approval" and inc["status"] == "open"

        settings.api.token = TOKEN
        async with serve(svc) as c:
            nobody = await c.post(f"/api/v1/incidents/{iid}/approve",
                                  headers={"Authorization": "Bearer guessed"})
            assert nobody.status_code == 401
            ok = await c.post(f"/api/v1/incidents/{iid}/approve", json={"by": "dana"},
                              headers={"Authorization": f"Bearer {TOKEN}"})
            assert ok.status_code == 200, ok.text
            assert ok.json()["decision"] == "accepted" and ok.json()["attempt_id"]
            late = await c.post(f"/api/v1/incidents/{iid}/deny",
                                headers={"Authorization": f"Bearer {TOKEN}"})
            assert late.status_code == 409  # nothing waits any more
        [rec] = audit(settings, iid, "approved")
        assert (rec["by"], rec["via"]) == ("dana (api token)", "api")

    async def test_word_varied_anonymous_reports_open_at_most_the_limit(
            self, make_settings: Any, repo: Path) -> None:
        """40 anonymous reports with varied words: 3 new incidents (the `api` origin's
        hourly limit), the rest answered `new_incident_limit` and counted in /metrics."""
        settings = make_settings("fix")
        settings.code.new_incidents_per_hour = 3
        svc = SelfHealService(settings, FileStore(settings.state_path), env={},
                              launcher=lambda _a: None)
        async with serve(svc, anonymous=True) as c:
            reasons = [(await c.post("/api/v1/errors", json=report(
                repo, f"'{words(i)} {words(i * 7 + 3)}'"))).json()["reason"]
                for i in range(40)]
            metrics = (await c.get("/metrics")).text
        assert reasons.count("awaiting_approval") == 3
        assert reasons.count("new_incident_limit") == 37
        assert Ledger(svc.store).stats()["status"]["code"] == {"open": 3}
        assert 'healer_incidents_dropped_total{reason="new_incident_limit",' \
               'source="report_error:api"} 37.0' in metrics


@pytest.fixture
def github(tmp_path: Path, repo: Path) -> Iterator[FakeGitHub]:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "main")
    fake = FakeGitHub("acme", "app", TOKEN, bare).start()
    yield fake
    fake.stop()


def pull_requests(github: FakeGitHub) -> list[Any]:
    return [r for r in github.requests if r.method == "POST" and r.path.endswith("/pulls")]


def pushed(github: FakeGitHub, branch: str) -> bool:
    return subprocess.run(["git", "-C", str(github.bare), "rev-parse", "--verify", "--quiet",
                           f"refs/heads/{branch}"], capture_output=True).returncode == 0


class TestHeldPublication:
    @pytest.fixture
    def held(self, make_settings: Any, github: FakeGitHub, repo: Path,
             monkeypatch: pytest.MonkeyPatch) -> Any:
        """A trusted report whose fix also adds .github/workflows/x.yml, run to its end."""
        monkeypatch.setenv("TEST_FORGE_TOKEN", TOKEN)
        settings = make_settings("workflow")
        settings.forge.kind = "github"
        settings.forge.github_repo = "acme/app"
        settings.forge.api_url = github.url
        settings.forge.token_env = "TEST_FORGE_TOKEN"

        async def run() -> tuple[Any, dict[str, Any]]:
            svc = SelfHealService(settings, FileStore(settings.state_path), env={},
                                  launcher=lambda _a: None)
            out = svc.report(report(repo))
            assert out["accepted"], out
            return svc, await Dispatcher(settings, svc.store).run(out["attempt_id"])

        return run

    async def test_a_workflow_touching_fix_waits_and_its_pr_says_why(
            self, held: Any, github: FakeGitHub) -> None:
        svc, att = await held()
        assert att["status"] == st.AWAITING_APPROVAL, att.get("reason")
        assert any(".github/workflows/x.yml" in r for r in att["held"]["reasons"])
        assert pull_requests(github) == [] and not pushed(github, att["branch"])
        iid = att["incident_id"]
        inc = Ledger(svc.store).require(iid)
        assert inc["status"] == "fixed"
        assert inc["approvals"]["publish"]["verdict"] == "waiting"
        settings = svc.settings
        assert [w["stage"] for w in json.loads(
            cli(settings, "approve", "--json").stdout)["waiting"]] == ["publish"]

        out = cli(settings, "approve", iid, "--by", "bob", "--comment", "workflow reviewed",
                  TEST_FORGE_TOKEN=TOKEN)
        assert out.returncode == 0, out.stderr
        [pr] = github.pulls.values()
        body = pr["body"]
        assert "Held for a person's approval" in body
        assert "touches CI or automation: .github/workflows/x.yml" in body
        assert "approved by **bob** (via cli)" in body and "workflow reviewed" in body
        assert pushed(github, att["branch"])
        final = svc.attempts.require(att["attempt_id"])
        assert final["status"] == st.PR_OPEN and final["approved_by"]["by"] == "bob"
        [rec] = audit(settings, iid, "approved")
        assert (rec["stage"], rec["by"], rec["attempt_id"]) == ("publish", "bob",
                                                               att["attempt_id"])

    async def test_a_denied_fix_is_never_published(self, held: Any,
                                                   github: FakeGitHub) -> None:
        svc, att = await held()
        out = cli(svc.settings, "deny", att["incident_id"], "--by", "carol",
                  TEST_FORGE_TOKEN=TOKEN)
        assert out.returncode == 0, out.stderr
        final = svc.attempts.require(att["attempt_id"])
        assert final["status"] == st.FAILED and "denied by carol" in final["reason"]
        assert not final.get("escalation_due")  # a person decided: nobody to tell
        assert pull_requests(github) == [] and not pushed(github, att["branch"])
        inc = Ledger(svc.store).require(att["incident_id"])
        assert (inc["status"], inc["resolved_by"]) == ("resolved", "publish denied by carol")
        assert not os.path.exists(att["held"]["diff_file"])
