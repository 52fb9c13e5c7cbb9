"""Git isolation on the report_error road: a compromised agent harms nobody's git.

The promise (issue 34, item 2): each attempt works in a clone of its own; whatever the agent
plants in that clone's git dir (hooks, ``core.fsmonitor``, a remote) never runs under healer's
git, which also ignores a hostile repository config and a hostile inherited environment; the
attempt ends as tampered, nothing is pushed or opened, a person is told. Real parts
throughout: real repositories, the real command executor running a hostile agent
(``healer.testing.hostile_git``), a fake GitHub on 127.0.0.1 with a bare repository as its git
side. Every planted program writes a marker with its environment if anything runs it, so "it
never ran" is "no marker", and each test has a control that shows the plant is live.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selfheal_fake_github import FakeGitHub
from selfheal_helpers import TRACEBACK

from healer.core.git import git as healer_git
from healer.core.git import git_env
from healer.core.publish.forge import (
    ForgeError,
    GitHubForge,
    LocalForge,
    PullRequest,
    check_push_url,
    default_push_url,
)
from healer.core.store import FileStore
from healer.errors import GitDirTamperedError, UsageError
from healer.selfheal import attempts as st
from healer.selfheal import gitdir
from healer.selfheal import worktree as wt
from healer.selfheal.dispatch import Dispatcher, reap_worktrees
from healer.selfheal.service import SelfHealService
from healer.testing import hostile_git as hostile
from healer.testing.git import git

pytestmark = pytest.mark.e2e
TOKEN = "ghp_fakeTokenForTheIsolationTests012345678"
OPERATOR_TOKEN = "ghp_operatorsOwnTokenThatMustNeverLeak0123"
FIXED = 'def lookup(row):\n    return row.get("user_id")\n'


def bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    return path


def refs(repo: Path) -> str:
    return subprocess.run(["git", "--git-dir", str(repo), "for-each-ref"], capture_output=True,
                          text=True, check=True).stdout


@pytest.fixture
def github(tmp_path: Path, repo: Path) -> Iterator[FakeGitHub]:
    remote = bare(tmp_path / "remote.git")
    git(repo, "push", "-q", str(remote), "main")
    fake = FakeGitHub("acme", "app", TOKEN, remote).start()
    yield fake
    fake.stop()


def pull_requests(github: FakeGitHub) -> list[Any]:
    return [r for r in github.requests if r.method == "POST" and r.path.endswith("/pulls")]


def commit_fix(tree: wt.Worktree) -> str:
    (tree.path / "src" / "app" / "tools.py").write_text(FIXED)
    git(tree.path, "commit", "-qam", "fix: tolerate rows without user_id")
    return tree.head()


class TestACompromisedAgent:
    async def test_plants_nothing_that_runs_and_publishes_nothing(
            self, repo: Path, make_settings: Any, github: FakeGitHub, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> None:
        """Hooks, fsmonitor and a new origin in its clone: tampered, escalated, no push,
        no PR, no marker, and the operator's git dir byte for byte as before."""
        markers, evil = tmp_path / "markers", bare(tmp_path / "evil.git")
        settings = make_settings(None)
        markers.mkdir()
        # where the hostile agent reports what it found (its sandbox's only way out); a hook
        # healer's git ran would also write there
        settings.agents.sandbox_write_paths = [str(markers)]
        settings.executor.commands = {"healing-agent": hostile.agent_argv(
            tmp_path / "agent", fix={"file": "src/app/tools.py", "content": FIXED},
            markers=markers, evil_remote=evil)}
        settings.forge.kind, settings.forge.github_repo = "github", "acme/app"
        settings.forge.api_url, settings.forge.push_url = github.url, str(github.bare)
        settings.forge.token_env = "TEST_FORGE_TOKEN"
        monkeypatch.setenv("TEST_FORGE_TOKEN", TOKEN)
        monkeypatch.setenv("GITHUB_TOKEN", OPERATOR_TOKEN)
        before = hostile.snapshot(repo)
        svc = SelfHealService(settings, FileStore(settings.state_path), env={},
                              launcher=lambda _a: None)
        out = svc.report({"error_type": "KeyError", "error_message": "'user_id'",
                          "traceback": TRACEBACK.format(root=repo)})
        att = await Dispatcher(settings, svc.store).run(out["attempt_id"])

        assert att["status"] == st.FAILED
        assert "tampered with the git dir" in att["reason"]
        assert {"hooks/post-checkout added", "hooks/reference-transaction added",
                "hooks/pre-push added"} <= set(att["tampered"])
        config = next(c for c in att["tampered"] if c.startswith("config changed"))
        assert "fsmonitor" in config and 'remote "origin"' in config
        assert att["gitdir_seal"]
        # Nothing ran, nothing left the machine, nobody's git dir changed.
        assert hostile.ran(markers) == []
        assert pull_requests(github) == [] and github.pulls == {}
        assert "refs/heads/healer/" not in refs(github.bare) and refs(evil) == ""
        assert hostile.snapshot(repo) == before
        # The clone gave the agent no way to the operator's repository.
        report = json.loads((markers / hostile.REPORT).read_text())
        assert report["found"] == []
        # A person is told, and sent to plain file tools, not git.
        assert att["escalation"]
        seed = Path(att["escalation"]).read_text()
        assert "tampered with its git dir" in seed and "hooks/pre-push added" in seed
        assert f"git -C {att['worktree']}" not in seed
        # The clone's git dir is quarantined; the reaper removes it without running git there.
        clone = Path(att["worktree"])
        assert (clone / "git-dir.tampered" / "hooks" / "pre-push").is_file()
        assert not (clone / ".git").exists()
        assert reap_worktrees(settings, svc.store, now=att["ended_at"] + 86401) == [
            att["attempt_id"]]
        assert not clone.exists() and hostile.ran(markers) == []
        # The control: the planted programs are live under a git that honours them.
        planted = markers / "planted"
        subprocess.run(["git", "init", "-q", str(planted)], check=True)
        hostile.plant(planted / ".git", markers, evil)
        subprocess.run(["git", "-C", str(planted), "status"], capture_output=True, check=True)
        assert "fsmonitor.ran" in hostile.ran(markers)


    async def test_tampering_outranks_the_time_limit(
            self, make_settings: Any, repo: Path, tmp_path: Path) -> None:
        """An agent that plants and then hangs until it is killed: tampered, not timeout."""
        markers, evil = tmp_path / "markers", bare(tmp_path / "evil.git")
        settings = make_settings(None, timeout_s=2)
        settings.executor.commands = {"healing-agent": hostile.agent_argv(
            tmp_path / "agent", fix={"file": "src/app/tools.py", "content": FIXED},
            markers=markers, evil_remote=evil, then_sleep_s=120)}
        svc = SelfHealService(settings, FileStore(settings.state_path), env={},
                              launcher=lambda _a: None)
        out = svc.report({"error_type": "KeyError", "error_message": "'user_id'",
                          "traceback": TRACEBACK.format(root=repo)})
        att = await Dispatcher(settings, svc.store).run(out["attempt_id"])
        assert att["status"] == st.FAILED and "hooks/pre-push added" in att["tampered"]
        assert hostile.ran(markers) == []
        assert not (settings.state_path / "forge" / "prs").exists()


class TestHealersGitIsInert:
    def test_a_hostile_operator_repository_config_never_runs(
            self, repo: Path, tmp_path: Path) -> None:
        """Hooks, fsmonitor and sshCommand in the repository healer works in: clone, fetch,
        merge check, branch deletion, status and an ssh URL run none of them."""
        markers, evil = tmp_path / "markers", bare(tmp_path / "evil.git")
        hostile.plant(repo / ".git", markers, evil)
        tree = wt.create(repo, tmp_path / "state", "a-1", "f" * 64)
        head = commit_fix(tree)
        forge = LocalForge(tmp_path / "forge", repo)
        forge.open_pr(PullRequest(title="t", body="b", head=tree.branch, base="main",
                                  head_sha=head, base_sha=tree.base_sha, diff="",
                                  source=str(tree.path)))
        assert forge.pr_state(1) == "open"
        healer_git(repo, "status")
        ssh = healer_git(repo, "ls-remote", "ssh://git@example.invalid/acme/app.git",
                         check=False)
        wt.remove(repo, tree.path, branch=tree.branch, delete_branch=True)
        assert not ssh.ok
        assert hostile.ran(markers) == []
        subprocess.run(["git", "-C", str(repo), "status"], capture_output=True, check=True)
        assert "fsmonitor.ran" in hostile.ran(markers)  # the control

    def test_a_hostile_environment_is_not_inherited(
            self, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """GIT_DIR, GIT_SSH_COMMAND, GIT_CONFIG_PARAMETERS/COUNT, askpass and the ssh agent
        in healer's environment: git neither uses them nor sees them."""
        markers = tmp_path / "markers"
        decoy = tmp_path / "decoy"
        subprocess.run(["git", "init", "-q", "-b", "main", str(decoy)], check=True)
        git(decoy, "commit", "-q", "--allow-empty", "-m", "decoy")
        hooks = tmp_path / "evil-hooks"
        for hook in ("post-checkout", "reference-transaction"):
            hostile._write_program(hooks / hook, markers, hook)
        prog = tmp_path / "evil-prog"
        hostile._write_program(prog, markers, "env-program")
        monkeypatch.setenv("GIT_DIR", str(decoy / ".git"))
        monkeypatch.setenv("GIT_WORK_TREE", str(decoy))
        monkeypatch.setenv("GIT_SSH_COMMAND", str(prog))
        monkeypatch.setenv("GIT_CONFIG_PARAMETERS",
                           f"'core.hooksPath'='{hooks}' 'core.fsmonitor'='{prog}'")
        monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
        monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
        monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(prog))
        monkeypatch.setenv("GIT_ASKPASS", str(prog))
        monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent.sock"))
        monkeypatch.setenv("GITHUB_TOKEN", OPERATOR_TOKEN)

        tree = wt.create(repo, tmp_path / "state", "a-1", "f" * 64)
        main = subprocess.run(["git", "--git-dir", str(repo / ".git"), "rev-parse", "main"],
                              capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
                              check=True).stdout.strip()
        assert tree.base_sha == main  # the repository asked for, not $GIT_DIR's
        healer_git(tree.path, "status", git_dir=tree.git_dir)
        assert not healer_git(repo, "ls-remote", "ssh://example.invalid/x", check=False).ok
        assert hostile.ran(markers) == []
        env = git_env()
        assert not {"GIT_DIR", "GIT_WORK_TREE", "GIT_SSH_COMMAND", "GIT_CONFIG_PARAMETERS",
                    "GIT_CONFIG_KEY_0", "GIT_ASKPASS", "SSH_AUTH_SOCK", "GITHUB_TOKEN"} & set(env)
        assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["HOME"] != str(Path.home())
        with pytest.raises(ValueError, match="GIT_DIR"):
            healer_git(repo, "status", env={"GIT_DIR": str(decoy / ".git")})


class TestThePush:
    def test_goes_to_the_settings_url_whatever_the_remotes_say(
            self, repo: Path, github: FakeGitHub, tmp_path: Path) -> None:
        """origin points at an attacker's repository in the operator's repo and in the clone:
        the push still goes to forge.push_url, with one explicit refspec, as a draft PR."""
        evil = bare(tmp_path / "evil.git")
        git(repo, "remote", "add", "origin", str(evil))
        tree = wt.create(repo, tmp_path / "state", "a-1", "f" * 64)
        head = commit_fix(tree)
        git(tree.path, "remote", "add", "origin", str(evil))
        forge = GitHubForge(api_url=github.url, repo="acme/app", token=TOKEN, local_repo=repo,
                            push_url=str(github.bare))
        ref = forge.open_pr(PullRequest(title="fix", body="b", head=tree.branch, base="main",
                                        head_sha=head, base_sha=tree.base_sha, diff="",
                                        source=str(tree.path)))
        assert git(github.bare, "rev-parse", f"refs/heads/{tree.branch}").strip() == head
        assert refs(evil) == ""
        assert github.pulls[ref.number]["draft"] is True
        assert [r.body.get("draft") for r in pull_requests(github)] == [True]

    def test_https_carries_the_settings_token_and_nothing_inherited(
            self, repo: Path, github: FakeGitHub, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> None:
        """Over http(s) git authenticates with the forge token healer read from its settings
        (an http.extraHeader in git's environment): no credential helper, askpass, prompt or
        inherited token takes part, and a wrong token fails instead of asking anyone."""
        markers = tmp_path / "markers"
        prog = tmp_path / "askpass"
        hostile._write_program(prog, markers, "askpass")
        monkeypatch.setenv("GIT_ASKPASS", str(prog))
        monkeypatch.setenv("SSH_ASKPASS", str(prog))
        monkeypatch.setenv("GITHUB_TOKEN", OPERATOR_TOKEN)
        git(repo, "config", "credential.helper", f"!{prog}")
        tree = wt.create(repo, tmp_path / "state", "a-1", "f" * 64)
        head = commit_fix(tree)
        url = f"{github.url}/acme/app.git"
        pr = PullRequest(title="fix", body="b", head=tree.branch, base="main", head_sha=head,
                         base_sha=tree.base_sha, diff="", source=str(tree.path))
        wrong = GitHubForge(api_url=github.url, repo="acme/app", token=OPERATOR_TOKEN,
                            local_repo=repo, push_url=url)
        with pytest.raises(ForgeError, match="git push of healer/"):
            wrong.open_pr(pr)
        assert pull_requests(github) == []
        GitHubForge(api_url=github.url, repo="acme/app", token=TOKEN, local_repo=repo,
                    push_url=url).open_pr(pr)
        assert git(github.bare, "rev-parse", f"refs/heads/{tree.branch}").strip() == head
        accepted = [r for r in github.git_requests if r.path.endswith("git-receive-pack")]
        assert accepted and hostile.ran(markers) == []

    def test_only_healer_branches_are_published(self, repo: Path, github: FakeGitHub,
                                                tmp_path: Path) -> None:
        """A PR whose head is not under healer/ is refused before any push or request."""
        forge = GitHubForge(api_url=github.url, repo="acme/app", token=TOKEN, local_repo=repo,
                            push_url=str(github.bare))
        sha = git(repo, "rev-parse", "main").strip()
        with pytest.raises(ForgeError, match="only branches under healer/"):
            forge.open_pr(PullRequest(title="t", body="b", head="main", base="main",
                                      head_sha=sha, base_sha=sha, diff=""))
        assert github.requests == []

    @pytest.mark.parametrize(("url", "ok"), [
        ("https://github.com/acme/app.git", True), ("http://127.0.0.1:9/acme/app.git", True),
        ("/srv/git/app.git", True), ("file:///srv/git/app.git", True),
        ("http://git.example.com/acme/app.git", False),
        ("ssh://git@github.com/acme/app.git", False), ("git@github.com:acme/app.git", False),
        ("ext::sh -c touch% /tmp/pwned", False)])
    def test_push_urls(self, url: str, ok: bool) -> None:
        """https, http on loopback and local paths; never ssh, ext or plain http outside."""
        if ok:
            assert check_push_url(url) == url
        else:
            with pytest.raises(UsageError, match=r"forge\.push_url"):
                check_push_url(url)

    def test_default_push_url(self) -> None:
        assert default_push_url("https://api.github.com", "acme/app") == \
            "https://github.com/acme/app.git"
        assert default_push_url("https://ghe.example.com/api/v3", "acme/app") == \
            "https://ghe.example.com/acme/app.git"


class TestTheInspection:
    @pytest.mark.parametrize(("tamper", "finding"), [
        (lambda g: (g / "hooks" / "post-checkout").write_text("#!/bin/sh\n"),
         "hooks/post-checkout added"),
        (lambda g: (g / "info" / "attributes").write_text("* filter=x\n"),
         "info/attributes added"),
        (lambda g: (g / "objects" / "info" / "alternates").write_text("/tmp/o\n"),
         "objects/info/alternates added"),
        (lambda g: (g / "commondir").write_text("/tmp/other/.git\n"),
         "commondir added (it points git at another git dir)"),
        (lambda g: (g / "refs" / "heads" / "x").symlink_to("/etc/passwd"),
         "symlink in the git dir: refs/heads/x -> /etc/passwd"),
    ])
    def test_what_counts_as_tampering(self, repo: Path, tmp_path: Path, tamper: Any,
                                      finding: str) -> None:
        tree = wt.create(repo, tmp_path / "state", "a-1", "f" * 64)
        tamper(tree.git_dir)
        assert finding in tree.inspect()
        with pytest.raises(GitDirTamperedError) as err:
            tree.require_untouched("after the run")
        assert finding in err.value.changes

    def test_dot_git_replaced(self, repo: Path, tmp_path: Path) -> None:
        """A gitfile or a symlink in place of .git (pointing git at the operator's repo)."""
        tree = wt.create(repo, tmp_path / "state", "a-1", "f" * 64)
        tree.git_dir.rename(tree.path / "moved")
        (tree.path / ".git").write_text(f"gitdir: {repo / '.git'}\n")
        assert tree.inspect()[0].startswith(".git is now a gitfile (gitdir: ")
        (tree.path / ".git").unlink()
        (tree.path / ".git").symlink_to(repo / ".git")
        assert tree.inspect() == [f".git is now a symlink to {repo / '.git'}"]

    def test_a_recorded_seal_is_enough(self, repo: Path, tmp_path: Path) -> None:
        """After a crash or a time limit only the attempt record is left: its seal still
        finds the plant, and the clone is quarantined."""
        tree = wt.create(repo, tmp_path / "state", "a-1", "f" * 64)
        assert tree.seal is not None
        record = json.loads(json.dumps(tree.seal.as_dict()))
        assert gitdir.check_recorded(record) == []
        (tree.git_dir / "hooks" / "pre-push").write_text("#!/bin/sh\n")
        assert gitdir.check_recorded(record) == ["hooks/pre-push added"]
        assert (tree.path / "git-dir.tampered").is_dir() and not tree.git_dir.exists()
        assert gitdir.check_recorded({**record, "digest": "0" * 64}) == []  # not a seal

    def test_ordinary_git_work_is_not_tampering(self, repo: Path, tmp_path: Path) -> None:
        """Commits, branches, tags, a stash, gc: the seal holds."""
        tree = wt.create(repo, tmp_path / "state", "a-1", "f" * 64)
        commit_fix(tree)
        for args in (["checkout", "-q", "-b", "try"], ["tag", "v0"], ["checkout", "-q", "-"],
                     ["gc", "-q"]):
            git(tree.path, *args)
        (tree.path / "src" / "app" / "tools.py").write_text("x = 1\n")
        git(tree.path, "stash", "-q")
        assert tree.inspect() == []
