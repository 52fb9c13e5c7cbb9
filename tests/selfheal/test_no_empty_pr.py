"""No PR from a healing branch that changes nothing to review.

Real git throughout: a scripted healing agent commits in a real clone, the dispatcher runs
to the end, and the github forge talks to a fake GitHub on 127.0.0.1 that records every
request — so "no PR" means the forge was never asked for one (and the branch never pushed).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selfheal_fake_github import FakeGitHub
from selfheal_helpers import REPRODUCTION, TRACEBACK

from healer.core.store import FileStore
from healer.selfheal import attempts as st
from healer.selfheal import worktree as wt
from healer.selfheal.dispatch import Dispatcher
from healer.selfheal.service import SelfHealService
from healer.testing.git import git

pytestmark = pytest.mark.e2e
TOKEN = "ghp_fakeTokenForTheNoEmptyPrTests0123456"

_COMMIT = '''
    import pathlib, subprocess, sys

    def commit(message, *paths, allow_empty=False):
        if paths:
            subprocess.run(["git", "add", "--", *paths], check=True)
        extra = ["--allow-empty"] if allow_empty else []
        subprocess.run(["git", "commit", "-q", *extra, "-m", message], check=True)

    TOOLS = pathlib.Path("src/app/tools.py")
'''

# What a healing agent might leave behind, as small programs run in the worktree.
AGENTS = {
    # A rate-limited run "recovered" into a commit of a marker file only.
    "marker": '''
        pathlib.Path("HEALED").write_text("healed after retry\\n")
        commit("fix: healed", "HEALED")
        print("429 rate_limit_error: retry later", file=sys.stderr)
        sys.exit(1)
    ''',
    "markers": '''
        pathlib.Path(".healer").mkdir()
        pathlib.Path(".healer/state.json").write_text("{}\\n")
        pathlib.Path("src/app/done.marker").write_text("done\\n")
        pathlib.Path(".heal-ok").write_text("ok\\n")
        commit("fix: mark it", ".healer/state.json", "src/app/done.marker", ".heal-ok")
    ''',
    "empty": '''
        commit("fix: nothing at all", allow_empty=True)
    ''',
    "revert": '''
        TOOLS.write_text('def lookup(row):\\n    return row.get("user_id")\\n')
        commit("fix: tolerate rows without user_id", str(TOOLS))
        subprocess.run(["git", "revert", "--no-edit", "HEAD"], check=True,
                       stdout=subprocess.DEVNULL)
    ''',
    "whitespace": '''
        TOOLS.write_text('def lookup(row):  \\n\\n\\n    return   row["user_id"]\\t\\n\\n')
        pathlib.Path("src/app/empty.py").write_text("")
        commit("style: tidy", str(TOOLS), "src/app/empty.py")
    ''',
    "fix_and_marker": '''
        TOOLS.write_text('def lookup(row):\\n    return row.get("user_id")\\n')
        REPRODUCTION
        pathlib.Path("HEALED").write_text("healed\\n")
        commit("fix: tolerate rows without user_id", str(TOOLS), "HEALED", "tests")
    '''.replace("REPRODUCTION", REPRODUCTION),
}


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
def heal(make_settings: Any, github: FakeGitHub, repo: Path, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Any]:
    """``await heal("marker")``: report the bug, run that agent's attempt to its end."""
    monkeypatch.setenv("TEST_FORGE_TOKEN", TOKEN)

    async def run(agent: str) -> dict[str, Any]:
        script = tmp_path / "agents" / f"{agent}.py"
        script.parent.mkdir(exist_ok=True)
        script.write_text(textwrap.dedent(_COMMIT) + textwrap.dedent(AGENTS[agent]))
        settings = make_settings(None)
        settings.executor.commands = {"healing-agent": [sys.executable, str(script)]}
        settings.forge.kind = "github"
        settings.forge.github_repo = "acme/app"
        settings.forge.api_url = github.url
        settings.forge.token_env = "TEST_FORGE_TOKEN"
        settings.forge.push_url = str(github.bare)
        svc = SelfHealService(settings, FileStore(settings.state_path), env={},
                              launcher=lambda _a: None)
        out = svc.report({"error_type": "KeyError", "error_message": "'user_id'",
                          "traceback": TRACEBACK.format(root=repo)})
        assert out["accepted"], out
        return await Dispatcher(settings, svc.store).run(out["attempt_id"])

    return run


def pr_requests(github: FakeGitHub) -> list[Any]:
    return [r for r in github.requests if r.method == "POST" and r.path.endswith("/pulls")]


def pushed(github: FakeGitHub, branch: str) -> bool:
    return subprocess.run(["git", "-C", str(github.bare), "rev-parse", "--verify", "--quiet",
                           f"refs/heads/{branch}"], capture_output=True).returncode == 0


def assert_no_pr(att: dict[str, Any], github: FakeGitHub) -> None:
    assert att["status"] == st.FAILED, att
    assert "pr_number" not in att and "pr_url" not in att
    assert pr_requests(github) == [] and github.pulls == {}
    assert not pushed(github, att["branch"])
    assert att["reason"].startswith("the healing branch changes nothing to review"), att


class TestNoPrWithoutAChange:
    async def test_marker_only(self, heal: Any, github: FakeGitHub) -> None:
        """Only a HEALED file committed (by a rate-limited run): failed, reason names it."""
        att = await heal("marker")
        assert_no_pr(att, github)
        assert "(only marker files: HEALED)" in att["reason"]
        assert "exited with code 1" in att["reason"]  # how the agent run ended, too
        # The operator hears of it: the escalation issue carries the reason.
        [issue] = github.issues.values()
        assert "only marker files: HEALED" in issue["body"]

    async def test_every_marker_kind(self, heal: Any, github: FakeGitHub) -> None:
        """.healer/**, *.marker and .heal-* are markers too."""
        att = await heal("markers")
        assert_no_pr(att, github)
        assert "only marker files: .heal-ok, .healer/state.json, src/app/done.marker" in \
            att["reason"]

    async def test_empty_commit(self, heal: Any, github: FakeGitHub) -> None:
        att = await heal("empty")
        assert_no_pr(att, github)
        assert "its commits change no file" in att["reason"]

    async def test_add_then_revert(self, heal: Any, github: FakeGitHub, repo: Path) -> None:
        att = await heal("revert")
        clone = Path(att["worktree"])  # the agent's commits live in its clone
        assert len(git(clone, "rev-list", f"main..{att['branch']}").split()) == 2
        assert_no_pr(att, github)
        assert "its commits change no file" in att["reason"]

    async def test_whitespace_only(self, heal: Any, github: FakeGitHub) -> None:
        """Spaces, tabs, blank lines and a new empty file are no change either."""
        att = await heal("whitespace")
        assert_no_pr(att, github)
        assert "only whitespace or empty-file changes: src/app/empty.py, src/app/tools.py" \
            in att["reason"]

    async def test_real_fix_with_a_marker_opens_the_pr(self, heal: Any,
                                                       github: FakeGitHub) -> None:
        """The control: a one-line fix next to a marker file is a PR as before."""
        att = await heal("fix_and_marker")
        assert att["status"] == st.PR_OPEN, att.get("reason")
        assert len(pr_requests(github)) == 1
        assert github.pulls[att["pr_number"]]["head"]["ref"] == att["branch"]
        assert pushed(github, att["branch"])


def _commit(tree: wt.Worktree, *args: str) -> None:
    git(tree.path, "add", "-A")
    git(tree.path, "commit", "-q", "--allow-empty", "-m", "change", *args)


@pytest.mark.parametrize(("change", "reviewable"), [
    ({"src/app/tools.py": 'def lookup(row):\n    return row.get("user_id")\n'}, True),
    ({"src/app/new.py": "X = 1\n"}, True),
    ({"src/app/tools.py": None, "src/app/moved.py": 'def lookup(row):\n'
      '    return row["user_id"]\n'}, True),  # a rename moves code: a reviewer sees it
    ({"assets/logo.bin": b"\x00\x01\x02"}, True),  # binary
    ({"UNFIXABLE": "not a bug\n"}, False),
    ({"HEALED": "", "x/HEALED": "yes\n"}, False),
    ({".healer/context/incident-memory.yaml": "- id: 1\n"}, False),
    ({"heal-healing-0123abcd-1700000000.json": "{}\n"}, False),
    ({"docs/.healer-skill.json": "{}\n"}, False),
    ({"src/app/empty.py": ""}, False),
    ({"src/app/tools.py": 'def lookup(row):\r\n\treturn row["user_id"]\r\n'}, False),
    ({}, False),
])
def test_what_counts_as_a_change(repo: Path, tmp_path: Path,
                                 change: dict[str, str | bytes | None], reviewable: bool) -> None:
    """``Worktree.unreviewable`` on real commits: content changes count, markers do not."""
    tree = wt.create(repo, tmp_path / "state", "a-1", "f" * 64)
    for rel, content in change.items():
        path = tree.path / rel
        if content is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    _commit(tree)
    why = tree.unreviewable()
    assert (why is None) is reviewable, why
    if not reviewable:
        with pytest.raises(wt.NothingToReviewError):
            tree.require_reviewable(tree.head())


def test_mode_change_is_a_change(repo: Path, tmp_path: Path) -> None:
    """chmod +x can be the whole fix (a hook that failed to run): it is reviewable."""
    tree = wt.create(repo, tmp_path / "state", "a-1", "f" * 64)
    tools = tree.path / "src" / "app" / "tools.py"
    tools.chmod(tools.stat().st_mode | 0o111)
    _commit(tree)
    assert tree.unreviewable() is None


def test_judged_on_the_given_head(repo: Path, tmp_path: Path) -> None:
    """The check reads base...head of the commit the PR would carry, not the worktree's HEAD."""
    tree = wt.create(repo, tmp_path / "state", "a-1", "f" * 64)
    (tree.path / "HEALED").write_text("x\n")
    _commit(tree)
    marker_only = tree.head()
    (tree.path / "src" / "app" / "tools.py").write_text("def lookup(row):\n    return None\n")
    _commit(tree)
    assert tree.unreviewable() is None
    assert tree.unreviewable(marker_only) == ("the healing branch changes nothing to review "
                                              "(only marker files: HEALED)")
