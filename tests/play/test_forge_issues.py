"""Forge issues: local Markdown files or GitHub, deduplicated, never publishing secrets."""

from __future__ import annotations

import asyncio

import pytest

from healer.config import load_settings
from healer.core.publish.findings import AnonymizationError
from healer.core.publish.forge_issues import Issues
from healer.core.store import FileStore
from healer.testing.fake_github import FakeGitHub


def _settings(tmp_path, **over: str):  # type: ignore[no-untyped-def]
    sets = [f"state_dir={tmp_path / 'state'}", *[f"{k}={v}" for k, v in over.items()]]
    return load_settings(env={}, overrides=sets)


class TestLocal:
    def test_open_then_comment_within_window(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        """A second report with the same key inside the window is a comment, not a new issue."""
        s = _settings(tmp_path)
        issues = Issues(s, FileStore(s.state_path))
        first = asyncio.run(issues.open(key="heal.A10.play-task-4", title="[HEAL-A10] x",
                                        body="first", labels=["heal", "A10"], window_s=1800))
        second = asyncio.run(issues.open(key="heal.A10.play-task-4", title="[HEAL-A10] x",
                                         body="second", labels=["heal", "A10"], window_s=1800))
        assert first.created and not second.created and first.number == second.number
        text = (s.state_path / "forge" / "issues" / "1.md").read_text()
        assert "first" in text and "second" in text and 'labels: ["heal", "A10"]' in text

    def test_outside_window_new_issue(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        s = _settings(tmp_path)
        issues = Issues(s, FileStore(s.state_path))
        a = asyncio.run(issues.open(key="k", title="t", body="b", labels=[], window_s=0))
        b = asyncio.run(issues.open(key="k", title="t", body="b", labels=[], window_s=0))
        assert a.number != b.number and b.created

    def test_secret_never_published(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        """A body carrying a credential is blocked before anything is written."""
        s = _settings(tmp_path)
        issues = Issues(s, FileStore(s.state_path))
        with pytest.raises(AnonymizationError):
            asyncio.run(issues.open(key="k", title="t", labels=[], window_s=0,
                                    body="token ghp_abcdefghijklmnopqrstuvwxyz0123456789"))
        assert list((s.state_path / "forge").glob("issues/*.md")) == []


class TestGitHub:
    def test_rest_issue_and_comment(self, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
        """With forge.kind=github, issues and comments go to the REST API with the token."""
        monkeypatch.setenv("GITHUB_TOKEN", "ghp_test_token")
        with FakeGitHub() as gh:
            s = _settings(tmp_path, **{"forge.kind": "github", "forge.api_url": gh.url,
                                       "forge.github_repo": "5dlabs/cto"})
            issues = Issues(s, FileStore(s.state_path))
            ref = asyncio.run(issues.open(key="k", title="[HEAL-A10] missing tools",
                                          body="analysis", labels=["heal", "A10"],
                                          window_s=1800))
            again = asyncio.run(issues.open(key="k", title="[HEAL-A10] missing tools",
                                            body="escalated", labels=[], window_s=1800))
        assert ref.url == "https://github.com/5dlabs/cto/issues/1" and not again.created
        assert gh.issues[1]["labels"] == [{"name": "heal"}, {"name": "A10"}]
        assert gh.issues[1]["comments"] == ["escalated"]
