"""Git isolation and honest verification on the living-context road (Sentry → heal loop).

Two promises (issue 34, items 2 and 4):

* a compromised living-context-healer — the real command executor running
  ``healer.testing.hostile_git`` — that plants hooks, ``core.fsmonitor`` and a new origin in
  its clone: nothing it planted ever runs under healer's git, the operator's repository is
  unchanged, nothing is published, the incident is escalated and the audit names what changed;
* a fix is verified with the base branch's tests and scenarios: one that only passes because
  it edited its own test is rejected, and the verdict names the edit that was left out.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from context_helpers import BUGGY, GOOD_FIX, PAYMENT, edit, plan

from healer.context.sentry import from_sentry
from healer.selfheal import checks
from healer.selfheal import worktree as wt
from healer.selfheal.attempts import Attempts
from healer.testing import hostile_git as hostile
from healer.testing.git import git
from healer.testing.webhooks import sentry_event_alert

pytestmark = [pytest.mark.e2e]

CHEAT = ("        self.assertEqual(average(10, 0), 0)\n",
         "        self.assertRaises(ZeroDivisionError, average, 10, 0)\n")


def sentry_signal(root: Path) -> Any:
    return from_sentry("event_alert", sentry_event_alert(line=6), root)[0]


def prs(svc: Any) -> list[Path]:
    return sorted((svc.settings.state_path / "forge" / "prs").glob("*.json"))


class TestACompromisedAgent:
    async def test_plants_nothing_that_runs_and_publishes_nothing(
            self, service_for: Any, project: Path, tmp_path: Path, dirs: Any,
            monkeypatch: pytest.MonkeyPatch) -> None:
        """Hooks, fsmonitor and a new origin in its clone after a good-looking fix: the
        incident is escalated as an attack, no PR, no marker, the operator's git dir as
        before."""
        markers = tmp_path / "markers"
        evil = tmp_path / "evil.git"
        subprocess.run(["git", "init", "-q", "--bare", str(evil)], check=True)
        argv = hostile.agent_argv(
            tmp_path / "agent", markers=markers, evil_remote=evil,
            fix={"file": "app/payment.py", "content": PAYMENT.replace(BUGGY, GOOD_FIX)})
        monkeypatch.setenv("GITHUB_TOKEN", "ghp_operatorsOwnTokenThatMustNeverLeak0123")
        markers.mkdir()
        svc = service_for("executor.default=command",
                          "executor.commands=" + json.dumps({"living-context-healer": argv}),
                          # where the hostile agent reports what it found (its sandbox's
                          # only way out); a hook healer's git ran would also write there
                          "agents.sandbox_write_paths=" + json.dumps([str(markers)]))
        before = hostile.snapshot(project)
        (receipt,) = await svc.ingest([sentry_signal(project)])
        assert receipt.heal, receipt
        await svc.drain(120)

        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "escalated"
        assert "tampered with the git dir" in inc["escalation"]["reason"]
        att = Attempts(svc.store).require(inc["attempt_id"])
        assert att["status"] == "failed" and "tampered" in att["reason"]
        assert {"hooks/post-checkout added", "hooks/reference-transaction added",
                "hooks/pre-push added"} <= set(att["tampered"])
        assert any("fsmonitor" in c and 'remote "origin"' in c for c in att["tampered"])
        [event] = [e for e in svc.book.audit.read("sentry-4242")
                   if e["event"] == "git_dir_tampered"]
        assert "hooks/pre-push added" in event["changes"]
        # No iteration went on to verification, nothing was published or fetched.
        events = [e["event"] for e in svc.book.audit.read("sentry-4242")]
        assert "verdict" not in events and "pr_opened" not in events
        assert prs(svc) == []
        assert "healer/" not in git(project, "branch", "--list")
        assert hostile.ran(markers) == []
        assert hostile.snapshot(project) == before
        assert json.loads((markers / hostile.REPORT).read_text())["found"] == []
        # A person is told, and sent to plain file tools.
        seed = Path(inc["escalation"]["seed_file"]).read_text()
        assert "hooks/pre-push added" in seed and "Do not run git in the clone" in seed
        assert not (Path(att["worktree"]) / ".git").exists()


class TestVerificationUsesTheBaseChecks:
    async def test_a_fix_that_only_passes_by_editing_its_test_fails(
            self, service_for: Any, project: Path, tmp_path: Path) -> None:
        """The agent leaves the bug, rewrites the empty-basket test to expect the crash: the
        fix edits the test that judges it, so the verdict rejects it at once; no PR. (In the
        agent's own checkout its test passes: the control.)"""
        cheat = {"edits": [
            {"file": "app/payment.py", "old": '"""The mean amount, in cents."""',
             "new": '"""The mean amount, in cents (count must not be 0)."""'},
            {"file": "tests/test_payment.py", "old": CHEAT[0], "new": CHEAT[1]}],
            "commit": "fix: document the contract", "summary": "documented"}
        svc = service_for("code.max_iterations=1", plan=plan(tmp_path / "agent", cheat))
        await svc.ingest([sentry_signal(project)])
        await svc.drain(120)

        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "escalated"
        [verdict] = [e for e in svc.book.audit.read("sentry-4242") if e["event"] == "verdict"]
        assert verdict["passed"] is False
        assert any(r.startswith("the fix edits the tests that judge it (tests/test_payment.py)")
                   for r in verdict["reasons"])
        assert prs(svc) == []
        clone = Path(Attempts(svc.store).require(inc["attempt_id"])["worktree"])
        own = subprocess.run([sys.executable, "-m", "unittest", "-q", "tests.test_payment"],
                             cwd=clone, capture_output=True, text=True)
        assert own.returncode == 0, own.stderr  # it would have passed on its own checks

    async def test_a_real_fix_passes_and_its_new_test_is_named(
            self, service_for: Any, project: Path, tmp_path: Path) -> None:
        """A good fix that adds tests passes: the added tests are the reproduction, run on
        base (they fail) and with the fix (they pass); the PR names them and shows both runs."""
        fix = edit(BUGGY, GOOD_FIX, commit=None)
        fix["edits"].append({"file": "tests/test_more.py", "content": "X = 1\n"})
        fix["commit"] = "fix: empty basket, with a test"
        svc = service_for("context.max_blast_radius=10", plan=plan(tmp_path / "agent", fix))
        await svc.ingest([sentry_signal(project)])
        await svc.drain(120)

        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "fixed", inc.get("escalation")
        [record] = prs(svc)
        pr = json.loads(record.read_text())
        assert "`tests/test_more.py`" in pr["body"]
        assert "### Reproduction (before the fix)" in pr["body"]
        assert "### Verification (after the fix)" in pr["body"]
        assert "tests/test_more.py" in Path(pr["diff_file"]).read_text()
        assert pr["draft"] is True


class TestTheCheckout:
    def test_holds_the_fix_with_the_base_checks(self, project: Path, tmp_path: Path) -> None:
        """Changed, added and deleted checks go back to the base; the code change stays."""
        tree = wt.create(project, tmp_path / "state", "a-1", "f" * 64)
        (tree.path / "app" / "payment.py").write_text(PAYMENT.replace(BUGGY, GOOD_FIX))
        (tree.path / "tests" / "test_payment.py").write_text("# gone\n")
        (tree.path / "tests" / "__init__.py").unlink()
        (tree.path / "conftest.py").write_text("collect_ignore = ['tests']\n")
        (tree.path / "app" / "new.scenarios.yaml").write_text("scenarios: []\n")
        git(tree.path, "add", "-A")
        git(tree.path, "commit", "-qm", "fix and cheat")
        out = checks.base_checks_checkout(tree, tree.head(), tmp_path / "verify")
        assert out.left_out == ["app/new.scenarios.yaml", "conftest.py",
                                "tests/__init__.py", "tests/test_payment.py"]
        assert (out.path / "app" / "payment.py").read_text() == PAYMENT.replace(BUGGY,
                                                                                GOOD_FIX)
        assert (out.path / "tests" / "test_payment.py").read_text() == \
            (project / "tests" / "test_payment.py").read_text()
        assert (out.path / "tests" / "__init__.py").exists()
        assert not (out.path / "conftest.py").exists()
        assert not (out.path / "app" / "new.scenarios.yaml").exists()
        assert (out.path / ".git").is_dir() and tree.inspect() == []

    @pytest.mark.parametrize(("path", "check"), [
        ("tests/test_a.py", True), ("src/pkg/tests/helpers.py", True), ("test_x.py", True),
        ("pkg/x_test.py", True), ("conftest.py", True), ("web/App.test.tsx", True),
        ("web/api.spec.ts", True), ("web/__tests__/a.js", True), ("cmd/run_test.go", True),
        ("spec/models/user_spec.rb", True), (".healer/context/invariants.yaml", True),
        ("ctx/payments.scenarios.yaml", True), ("src/app/payment.py", False),
        ("src/latest.py", False), ("docs/testing.md", False), ("contest.py", False)])
    def test_what_is_a_check(self, path: str, check: bool) -> None:
        assert checks.is_check(path, [".healer/context"]) is check
