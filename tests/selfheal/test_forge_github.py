"""The github forge against a fake GitHub on 127.0.0.1 (REST wire format + a bare git remote)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selfheal_fake_github import FakeGitHub
from selfheal_helpers import TRACEBACK

from healer.core.publish.findings import AnonymizationError
from healer.core.publish.forge import ForgeError, GitHubForge
from healer.core.store import FileStore
from healer.selfheal.dispatch import Dispatcher
from healer.selfheal.service import SelfHealService
from healer.testing.git import git

pytestmark = pytest.mark.e2e
TOKEN = "ghp_fakeTokenForTheFakeGitHub0123456789"


@pytest.fixture
def github(tmp_path: Path, repo: Path) -> Iterator[FakeGitHub]:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "main")
    fake = FakeGitHub("acme", "app", TOKEN, bare).start()
    yield fake
    fake.stop()


@pytest.fixture
def gh_service(make_settings: Any, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> Any:
    def make(agent: str = "fix", token: str | None = TOKEN) -> SelfHealService:
        settings = make_settings(agent)
        settings.forge.kind = "github"
        settings.forge.github_repo = "acme/app"
        settings.forge.api_url = github.url
        settings.forge.token_env = "TEST_FORGE_TOKEN"
        settings.forge.push_url = str(github.bare)
        if token is None:
            monkeypatch.delenv("TEST_FORGE_TOKEN", raising=False)
        else:
            monkeypatch.setenv("TEST_FORGE_TOKEN", token)
        return SelfHealService(settings, FileStore(settings.state_path), env={},
                               launcher=lambda _a: None)

    return make


async def heal(svc: SelfHealService, repo: Path) -> dict[str, Any]:
    out = svc.report({"error_type": "KeyError", "error_message": "'user_id'",
                      "traceback": TRACEBACK.format(root=repo)})
    return await Dispatcher(svc.settings, svc.store).run(out["attempt_id"])


class TestPullRequests:
    async def test_fix_is_pushed_and_opened(self, gh_service: Any, github: FakeGitHub,
                                            repo: Path) -> None:
        """The branch is pushed, the PR is created with labels, and its URL is recorded."""
        att = await heal(gh_service(), repo)
        assert att["status"] == "pr_open", att.get("reason")
        pr = github.pulls[att["pr_number"]]
        assert att["pr_url"] == pr["html_url"]
        assert pr["title"].startswith("fix(healing): KeyError in src/app/tools.py:lookup [")
        assert pr["head"]["ref"] == att["branch"] and pr["base"]["ref"] == "main"
        assert [x["name"] for x in pr["labels"]] == ["self-healing", "automated"]
        assert pr["draft"] is True  # a person marks it ready
        assert att["branch"].startswith("healer/")
        pushed = git(github.bare, "rev-parse", f"refs/heads/{att['branch']}").strip()
        assert pushed == att["head_sha"]
        for req in github.requests:
            assert req.headers["Accept"] == "application/vnd.github+json"
            assert req.headers["X-GitHub-Api-Version"] == "2022-11-28"
            assert req.headers["Authorization"] == f"Bearer {TOKEN}"

    async def test_merge_and_close_are_polled(self, gh_service: Any, github: FakeGitHub,
                                              repo: Path, make_settings: Any) -> None:
        """refresh() asks GitHub: merged → pr_merged, closed unmerged → failed."""
        svc = gh_service()
        first = await heal(svc, repo)
        assert svc.refresh() == []
        github.merge(first["pr_number"])
        assert [a["status"] for a in svc.refresh()] == ["pr_merged"]

    async def test_closed_unmerged_fails(self, gh_service: Any, github: FakeGitHub,
                                         repo: Path) -> None:
        """A PR closed without merging ends the attempt as failed."""
        svc = gh_service()
        att = await heal(svc, repo)
        github.close(att["pr_number"])
        changed = svc.refresh()
        assert [(a["status"], a["reason"]) for a in changed] == [
            ("failed", "the PR was closed without merging")]

    async def test_api_errors_fail_the_attempt(self, gh_service: Any, github: FakeGitHub,
                                               repo: Path) -> None:
        """An API refusal is a failed attempt whose reason carries GitHub's message."""
        github.fail_next = (422, "Validation Failed")
        att = await heal(gh_service(), repo)
        assert att["status"] == "failed"
        assert "HTTP 422 Validation Failed" in att["reason"]

    async def test_missing_token(self, gh_service: Any, github: FakeGitHub,
                                 repo: Path) -> None:
        """Without the token the attempt fails with a clear reason; nothing is pushed."""
        att = await heal(gh_service(token=None), repo)
        assert att["status"] == "failed" and "token" in att["reason"]
        assert github.requests == []

    async def test_leaky_fix_is_neither_pushed_nor_opened(self, gh_service: Any,
                                                          github: FakeGitHub,
                                                          repo: Path) -> None:
        """anonymization_failed: no git push, no API call."""
        att = await heal(gh_service("leak"), repo)
        assert att["status"] == "anonymization_failed"
        assert github.requests == []
        assert git(github.bare, "branch", "--list", "healer/*").strip() == ""


class TestIssues:
    def test_issue_is_validated_before_it_is_created(self, github: FakeGitHub,
                                                     repo: Path) -> None:
        """open_issue creates the issue; a body with personal data is refused locally."""
        forge = GitHubForge(api_url=github.url, repo="acme/app", token=TOKEN, local_repo=repo)
        ref = forge.open_issue("[HEAL-A2] silent agent failure: play-task-4", "Steps: restart.",
                               ("heal", "A2"))
        assert github.issues[ref.number]["title"].startswith("[HEAL-A2]")
        with pytest.raises(AnonymizationError):
            forge.open_issue("x", "contact jane.doe@gmail.com", ())
        assert len(github.issues) == 1

    def test_bad_credentials(self, github: FakeGitHub, repo: Path) -> None:
        """A wrong token is a ForgeError with the HTTP status."""
        forge = GitHubForge(api_url=github.url, repo="acme/app", token="nope", local_repo=repo)
        with pytest.raises(ForgeError) as err:
            forge.pr_state(1)
        assert err.value.status == 401 and "Bad credentials" in str(err.value)
        assert json.loads(json.dumps(github.requests[-1].body)) is None
