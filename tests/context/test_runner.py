"""The scenario runner's verdicts: scenarios, invariants, blast radius, anti-patterns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from context_helpers import BUGGY, FLOAT_FIX, GOOD_FIX, PY, SWALLOW_FIX

from healer.context.diff import diff_of, parse_patch
from healer.context.layers import Layers
from healer.context.scenarios import judge_output, verify
from healer.testing.git import git


def change(repo: Path, old: str, new: str, file: str = "app/payment.py") -> None:
    path = repo / file
    path.write_text(path.read_text().replace(old, new))


def run(layers_dir: Path, repo: Path, **kw: Any) -> Any:
    base = git(repo, "rev-parse", "HEAD").strip()
    return verify(Layers.load(layers_dir), repo, diff_of(repo, base, committed=False),
                  failing_file="app/payment.py", **kw)


def set_scenario(context_dir: Path, command: str) -> None:
    path = context_dir / "scenarios" / "payments.scenarios.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["scenarios"][0]["test_command"] = command
    path.write_text(yaml.safe_dump(doc))


class TestVerdicts:
    def test_a_good_fix_passes(self, project: Path, context_dir: Path) -> None:
        """The scenario passes, the invariants hold, 4 files < 5, no anti-pattern."""
        change(project, BUGGY, GOOD_FIX)
        v = run(context_dir, project)
        assert v.passed, v.reasons
        assert [s.outcome for s in v.scenarios] == ["passed"]
        assert {i.id: i.status for i in v.invariants} == {
            "INV-001": "held", "INV-002": "held", "INV-003": "held"}
        assert len(v.blast_radius) == 4

    def test_the_bug_itself_fails_its_scenario(self, project: Path, context_dir: Path) -> None:
        """Without the fix the scenario fails (the runner really runs it)."""
        change(project, '"""The mean amount, in cents."""', '"""The mean amount (cents)."""')
        v = run(context_dir, project)
        assert not v.passed
        assert any("scenario S001" in r and "failed" in r for r in v.reasons)

    def test_a_critical_invariant_violated_rejects(self, project: Path, context_dir: Path
                                                   ) -> None:
        """float( in app/ breaks INV-001 (critical): rejected even though the tests pass."""
        change(project, BUGGY, FLOAT_FIX)
        v = run(context_dir, project)
        assert [s.outcome for s in v.scenarios] == ["passed"]
        assert any(r.startswith("critical invariant INV-001 violated") and "app/payment.py:6"
                   in r for r in v.reasons), v.reasons

    def test_a_command_invariant_is_run(self, project: Path, context_dir: Path) -> None:
        """Changing average's signature breaks INV-002 (its check command exits non-zero)."""
        change(project, "def average(total, count):", "def average(total, count, default=0):")
        v = run(context_dir, project)
        assert {i.id: i.status for i in v.invariants}["INV-002"] == "violated"
        assert any("INV-002" in r for r in v.reasons)

    def test_a_warning_invariant_only_warns(self, project: Path, context_dir: Path) -> None:
        """Dropping the docstring breaks INV-003 (warning): a warning, not a rejection."""
        change(project, BUGGY, GOOD_FIX)
        change(project, '    """The mean amount, in cents."""\n', "")
        v = run(context_dir, project)
        assert v.passed, v.reasons
        assert any("INV-003" in w for w in v.warnings)

    def test_blast_radius_too_large_rejects(self, project: Path, context_dir: Path) -> None:
        """Touching payment, api, jobs and util: 5 files with importers — not under 5."""
        change(project, BUGGY, GOOD_FIX)
        for f in ("app/api.py", "app/jobs.py", "app/util.py"):
            (project / f).write_text((project / f).read_text() + "# touched\n")
        v = run(context_dir, project)
        assert any(r.startswith("blast radius too large: 5 files") for r in v.reasons)

    def test_a_known_anti_pattern_rejects(self, project: Path, context_dir: Path) -> None:
        """Catching ZeroDivisionError repeats INC-001's anti-pattern."""
        change(project, BUGGY, SWALLOW_FIX)
        v = run(context_dir, project)
        assert [h.incident for h in v.anti_patterns] == ["INC-001"]
        assert any("anti-pattern of INC-001" in r for r in v.reasons)

    def test_backticked_anti_patterns_match_without_a_regex(self, project: Path,
                                                            context_dir: Path) -> None:
        """An anti_pattern's `code span` is looked for in the added lines."""
        path = context_dir / "incident-memory.yaml"
        doc = yaml.safe_load(path.read_text())
        del doc[0]["anti_pattern_match"]
        doc[0]["anti_pattern"] = "never `return total // count if count else 0`"
        path.write_text(yaml.safe_dump(doc))
        change(project, BUGGY, GOOD_FIX)
        assert any("INC-001" in r for r in run(context_dir, project).reasons)

    def test_no_change_and_no_scenario_are_not_passes(self, project: Path, context_dir: Path
                                                      ) -> None:
        """An empty diff is rejected; so is a change no scenario covers."""
        assert "the fix changes nothing" in run(context_dir, project).reasons
        change(project, "return max(0, x)", "return max(0, int(x))", "app/util.py")
        base = git(project, "rev-parse", "HEAD").strip()
        v = verify(Layers.load(context_dir), project, diff_of(project, base, committed=False),
                   failing_file="app/util.py")
        assert any(r.startswith("no scenario covers app/util.py") for r in v.reasons)
        relaxed = verify(Layers.load(context_dir), project, diff_of(project, base,
                                                                    committed=False),
                         failing_file="app/util.py", require_scenarios=False)
        assert relaxed.passed and relaxed.warnings

    def test_timeouts_and_bad_commands(self, project: Path, context_dir: Path) -> None:
        """A scenario past its timeout fails; shell syntax and missing programs are errors."""
        change(project, BUGGY, GOOD_FIX)
        set_scenario(context_dir, f'{PY} -c "import time; time.sleep(5)"')
        v = run(context_dir, project, timeout_s=1)
        assert v.scenarios[0].outcome == "timeout"
        set_scenario(context_dir, f"{PY} -m unittest && echo ok")
        assert "shell syntax" in run(context_dir, project).scenarios[0].detail
        set_scenario(context_dir, "no-such-program-here --flag")
        assert "command not found" in run(context_dir, project).scenarios[0].detail


class TestNothingRanIsNotAPass:
    @pytest.fixture
    def pytest_project(self, project: Path) -> Path:
        (project / "tests" / "test_skips.py").write_text(
            "import pytest\n\n@pytest.mark.skip(reason='later')\ndef test_a():\n    pass\n\n"
            "@pytest.mark.skip(reason='later')\ndef test_b():\n    pass\n")
        return project

    @pytest.mark.e2e
    def test_all_skipped_under_pytest_is_not_a_pass(self, pytest_project: Path,
                                                    context_dir: Path) -> None:
        """pytest exits 0 with "2 skipped": the runner says skipped, the verdict rejects."""
        change(pytest_project, BUGGY, GOOD_FIX)
        set_scenario(context_dir, f"{PY} -m pytest -q -p no:cacheprovider "
                                  "tests/test_skips.py")
        v = run(context_dir, pytest_project)
        assert v.scenarios[0].exit_code == 0
        assert v.scenarios[0].outcome == "skipped"
        assert any("skipped" in r for r in v.reasons)

    @pytest.mark.e2e
    def test_no_tests_collected_is_not_a_pass(self, pytest_project: Path, context_dir: Path
                                              ) -> None:
        """pytest exit 5 (a -k that selects nothing): no tests ran, rejected."""
        change(pytest_project, BUGGY, GOOD_FIX)
        set_scenario(context_dir, f"{PY} -m pytest -q -p no:cacheprovider "
                                  "tests/test_skips.py -k nothing_matches_this")
        v = run(context_dir, pytest_project)
        assert v.scenarios[0].exit_code == 5 and v.scenarios[0].outcome == "no_tests"
        assert not v.passed

    @pytest.mark.parametrize(("code", "output", "outcome"), [
        (0, "..\n2 passed in 0.01s\n", "passed"),
        (0, "ss\n2 skipped in 0.01s\n", "skipped"),
        (0, "=== 1 passed, 3 skipped in 0.2s ===", "passed"),
        (0, "=== 5 deselected in 0.01s ===", "no_tests"),
        (1, "F.\n1 failed, 1 passed in 0.1s", "failed"),
        (5, "no tests ran in 0.01s", "no_tests"),
        (0, "----\nRan 2 tests in 0.001s\n\nOK (skipped=2)\n", "skipped"),
        (0, "----\nRan 3 tests in 0.001s\n\nOK (skipped=1)\n", "passed"),
        (0, "----\nRan 0 tests in 0.000s\n\nOK\n", "no_tests"),
        (0, "Tests:       4 skipped, 4 total\n", "skipped"),
        (0, "Tests:       1 passed, 1 total\n", "passed"),
        (0, "?   \texample.com/shop\t[no test files]\n", "no_tests"),
        (0, "ok  \texample.com/shop\t0.01s [no tests to run]\n", "no_tests"),
        (0, "ok  \texample.com/shop\t0.01s\n", "passed"),
        (0, "all good\n", "passed"),
        (2, "usage error\n", "failed"),
    ])
    def test_judge_output(self, code: int, output: str, outcome: str) -> None:
        """Test runners' summaries decide; an unknown runner is judged by its exit code."""
        assert judge_output(code, output)[0] == outcome


class TestVerifyCli:
    def test_verify_a_worktree(self, cli: Any, project: Path, context_dir: Path) -> None:
        """`healer context verify` on a fixed checkout exits 0; on a float fix exits 1 and says
        why, in JSON too."""
        common = ("--worktree", str(project), "--file", "app/payment.py", "--set",
                  f"context.dir={context_dir}")
        change(project, BUGGY, GOOD_FIX)
        ok = cli("context", "verify", *common)
        assert ok.code == 0, ok.out + ok.err
        assert "Verdict: PASSED" in ok.out and "| S001 Average of a basket" in ok.out
        change(project, GOOD_FIX, FLOAT_FIX)
        bad = cli("context", "verify", *common, "--json")
        assert bad.code == 1
        data = json.loads(bad.out)
        assert data["passed"] is False and "INV-001" in " ".join(data["reasons"])

    def test_verify_a_diff_file(self, cli: Any, project: Path, context_dir: Path) -> None:
        """--diff applies a patch to a scratch checkout of HEAD and verifies it there; the
        project itself is untouched."""
        change(project, BUGGY, GOOD_FIX)
        patch = git(project, "diff")
        git(project, "checkout", "--", "app/payment.py")
        (project.parent / "fix.diff").write_text(patch)
        res = cli("context", "verify", "--worktree", str(project), "--diff",
                  str(project.parent / "fix.diff"), "--set", f"context.dir={context_dir}",
                  "--json")
        assert res.code == 0, res.out + res.err
        assert json.loads(res.out)["changed_files"] == ["app/payment.py"]
        assert BUGGY in (project / "app" / "payment.py").read_text()
        assert len(git(project, "worktree", "list").splitlines()) == 1

    def test_a_diff_that_does_not_apply_is_a_usage_error(self, cli: Any, project: Path,
                                                         context_dir: Path) -> None:
        """Exit 2 with the reason."""
        (project.parent / "bad.diff").write_text(
            "--- a/app/nope.py\n+++ b/app/nope.py\n@@ -1 +1 @@\n-x\n+y\n")
        res = cli("context", "verify", "--worktree", str(project), "--diff",
                  str(project.parent / "bad.diff"), "--set", f"context.dir={context_dir}")
        assert res.code == 2 and "does not apply" in res.err


class TestPatchParsing:
    def test_renames_deletions_and_line_numbers(self) -> None:
        """New names for renames, deleted files listed, added lines with their numbers."""
        text = ("diff --git a/x.py b/y.py\nsimilarity index 90%\nrename from x.py\nrename to "
                "y.py\n--- a/x.py\n+++ b/y.py\n@@ -3,0 +4,2 @@\n+a = 1\n+b = 2\n"
                "diff --git a/gone.py b/gone.py\ndeleted file mode 100644\n--- a/gone.py\n"
                "+++ /dev/null\n@@ -1 +0,0 @@\n-x\n")
        d = parse_patch(text)
        assert d.files == ["y.py", "gone.py"] and d.deleted == ["gone.py"]
        assert d.added == {"y.py": [(4, "a = 1"), (5, "b = 2")]}



PROBE = """import json, os, pathlib, sys
out = {"token": os.environ.get("GITHUB_TOKEN", "")}
for name, path in (("wrote", sys.argv[1]), ("read", sys.argv[2])):
    try:
        if name == "wrote":
            pathlib.Path(path).write_text("pwned")
        else:
            pathlib.Path(path).read_text()
        out[name] = True
    except OSError:
        out[name] = False
pathlib.Path("probe.json").write_text(json.dumps(out))
"""


class TestConfinedVerification:
    """A healing verification runs the agent's code: its commands get an agent's sandbox."""

    def probe(self, project: Path, context_dir: Path, tmp_path: Path, **kw: Any
              ) -> dict[str, Any]:
        import sys

        (project / "probe.py").write_text(PROBE)
        (tmp_path / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nkey\n")
        set_scenario(context_dir, f"{sys.executable} probe.py {tmp_path / 'outside'} "
                                  f"{tmp_path / 'id_rsa'}")
        change(project, BUGGY, GOOD_FIX)
        v = run(context_dir, project, **kw)
        assert [s.outcome for s in v.scenarios] == ["passed"], v.reasons
        return json.loads((project / "probe.json").read_text())

    def test_a_scenario_cannot_see_secrets_or_write_outside_its_checkout(
            self, project: Path, context_dir: Path, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> None:
        from healer.agents.sandbox import BwrapSandbox
        from healer.config import load_settings

        settings = load_settings(env={}, overrides=[f"state_dir={tmp_path / 'state'}"])
        box = BwrapSandbox(settings, secrets=["GITHUB_TOKEN"])
        if box.unavailable():
            pytest.skip(f"no sandbox here: {box.unavailable()}")
        monkeypatch.setenv("GITHUB_TOKEN", "ghp_operatorsOwnToken0123456789")
        seen = self.probe(project, context_dir, tmp_path, sandbox=box)
        assert seen["token"] == "" and seen["read"] is False
        # Whatever it wrote outside its checkout went to the sandbox's private /tmp.
        assert not (tmp_path / "outside").exists()

    def test_without_a_sandbox_the_same_probe_reaches_everything(
            self, project: Path, context_dir: Path, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> None:
        """The operator's own `healer context verify` (no sandbox): the probe is real."""
        monkeypatch.setenv("GITHUB_TOKEN", "ghp_operatorsOwnToken0123456789")
        seen = self.probe(project, context_dir, tmp_path,
                          env={"GITHUB_TOKEN": "ghp_operatorsOwnToken0123456789"})
        assert seen == {"token": "ghp_operatorsOwnToken0123456789", "wrote": True,
                        "read": True}

    def test_no_sandbox_where_one_is_wanted_fails_the_verification(
            self, project: Path, context_dir: Path, tmp_path: Path) -> None:
        from healer.agents.sandbox import BwrapSandbox
        from healer.config import load_settings

        settings = load_settings(env={}, overrides=[
            f"state_dir={tmp_path / 'state'}", "agents.sandbox_bwrap=/nonexistent/bwrap"])
        change(project, BUGGY, GOOD_FIX)
        v = run(context_dir, project, sandbox=BwrapSandbox(settings))
        assert not v.passed and [s.outcome for s in v.scenarios] == ["error"]
        assert "no sandbox" in v.scenarios[0].detail
