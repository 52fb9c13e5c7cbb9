"""``healer doctor`` says whether GitHub is reachable, as whom, with which scopes, and how much
of the rate limit is left — never the token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from healer.testing.fake_github import FakeGitHub

TOKEN = "ghp_doctorTestToken0123456789abcdefABCD"


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(TOKEN) as gh:
        yield gh


def github_check(cli: Any, env: dict[str, str]) -> tuple[dict[str, Any], str]:
    res = cli("doctor", "--json", env=env)
    checks = {c["name"]: c for c in json.loads(res.out)["checks"]}
    return checks["github"], res.out + res.err


class TestDoctor:
    def test_a_personal_token_shows_login_scopes_and_budget(self, cli: Any, dirs: Any,
                                                            fake: FakeGitHub) -> None:
        fake.remaining = 4321
        check, out = github_check(cli, {**dirs.env, "GITHUB_TOKEN": TOKEN,
                                        "HEALER__GITHUB__API_URL": fake.url,
                                        "HEALER__GITHUB__REPOS": '["5dlabs/cto"]'})
        assert check["ok"], check
        detail = check["detail"]
        assert "as healer-operator (scopes: repo, read:org)" in detail
        assert "rate limit 4321/5000 left" in detail and "5dlabs/cto readable" in detail
        assert "no webhook secret" in detail
        assert TOKEN not in out

    def test_an_app_installation_token_lists_its_reach(self, cli: Any, dirs: Any,
                                                       fake: FakeGitHub) -> None:
        fake.installation = True
        check, _ = github_check(cli, {**dirs.env, "GITHUB_TOKEN": TOKEN,
                                      "HEALER__GITHUB__API_URL": fake.url})
        assert check["ok"] and "GitHub App installation (1 repositories" in check["detail"]
        assert "push" in check["detail"]

    def test_a_refused_token_and_an_unreachable_api_fail(self, cli: Any, dirs: Any,
                                                         fake: FakeGitHub) -> None:
        check, _ = github_check(cli, {**dirs.env, "GITHUB_TOKEN": "ghp_wrong",
                                      "HEALER__GITHUB__API_URL": fake.url})
        assert not check["ok"] and "401" in check["detail"]
        check, _ = github_check(cli, {**dirs.env, "GITHUB_TOKEN": TOKEN,
                                      "HEALER__GITHUB__API_URL": "http://127.0.0.1:9"})
        assert not check["ok"] and "unreachable" in check["detail"]

    def test_not_configured_is_not_checked(self, cli: Any, dirs: Any) -> None:
        res = cli("doctor", "--json")
        assert "github" not in {c["name"] for c in json.loads(res.out)["checks"]}
