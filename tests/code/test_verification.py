"""The verification rule on real repositories: a fix becomes a PR only when the test the agent
added fails on base for the reported reason, passes with the fix, and the suite stays as green
as it was — in Python (pytest) and in JavaScript (``node --test`` through ``npm test``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from healer.agents.sandbox import sandbox_for
from healer.code import testcmd
from healer.code.verification import (
    EDITS_CHECKS,
    NO_REPRODUCTION,
    NOT_REPRODUCED,
    mentions,
    verify_fix,
)
from healer.config import load_settings
from healer.selfheal import worktree as wt

PY_BUG = "def average(total, count):\n    return total / count\n"
PY_FIX = "def average(total, count):\n    return total / count if count else 0\n"
PY_WRONG = "def average(total, count):\n    return 0\n"
PY_SUITE = ("from shop.money import average\n\n\ndef test_average():\n"
            "    assert average(10, 2) == 5\n")
PY_REPRO = ("from shop.money import average\n\n\ndef test_empty_basket():\n"
            "    assert average(10, 0) == 0\n")

JS_BUG = "exports.first = (xs) => xs[0].name;\n"
JS_FIX = "exports.first = (xs) => (xs.length ? xs[0].name : null);\n"
JS_SUITE = ("const test = require('node:test');\nconst assert = require('node:assert');\n"
            "const { first } = require('../lib/list.js');\n"
            "test('first name', () => assert.strictEqual(first([{name: 'a'}]), 'a'));\n")
JS_REPRO = ("const test = require('node:test');\nconst assert = require('node:assert');\n"
            "const { first } = require('../lib/list.js');\n"
            "test('empty list', () => assert.strictEqual(first([]), null));\n")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _project(root: Path, files: dict[str, str]) -> Path:
    repo = root / "project"
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(root, "init", "-q", "-b", "main", str(repo))
    _git(repo, "config", "user.email", "dev@example.invalid")
    _git(repo, "config", "user.name", "dev")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "initial")
    return repo


def _agent(tree: wt.Worktree, files: dict[str, str | None]) -> str:
    """What an agent does in its clone: write (None: delete) files and commit them."""
    for name, text in files.items():
        path = tree.path / name
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    _git(tree.path, "add", "-A")
    _git(tree.path, "-c", "user.email=a@example.invalid", "-c", "user.name=a", "commit",
         "-qm", "fix")
    return tree.head()


@pytest.fixture
def settings(tmp_path: Path):
    return load_settings(env={}, overrides={"state_dir": str(tmp_path / "state")})


def _verify(settings, tree: wt.Worktree, head: str, error_type: str = "ZeroDivisionError"):
    return verify_fix(tree, head, "t", error_type=error_type, test_argv=None,
                      sandbox=sandbox_for(settings), timeout_s=120, clean=lambda s: s)


@pytest.fixture
def py_tree(tmp_path: Path, settings) -> wt.Worktree:
    repo = _project(tmp_path, {"pyproject.toml": "[project]\nname = 'shop'\n",
                               "shop/__init__.py": "", "shop/money.py": PY_BUG,
                               "tests/test_money.py": PY_SUITE})
    return wt.create(repo, settings.state_path, "20240101T000000-abcd1234", "f" * 64)


class TestPython:
    def test_a_fix_with_a_failing_test_is_verified(self, settings, py_tree) -> None:
        head = _agent(py_tree, {"shop/money.py": PY_FIX, "tests/test_empty.py": PY_REPRO})
        v = _verify(settings, py_tree, head)
        assert v.passed, v.reasons
        assert v.files == ["tests/test_empty.py"] and v.reproduced
        assert v.reproduction_before.exit != 0 and "ZeroDivisionError" in \
            v.reproduction_before.output
        assert (v.reproduction_after.exit, v.reproduction_after.passed) == (0, 1)
        assert (v.suite_before.passed, v.suite_after.passed) == (1, 2)
        rec = v.verification_dict()
        assert rec["passed"] and rec["command"][1:3] == ["-m", "pytest"]
        assert set(rec["suite_after"]) == {"exit", "passed", "failed", "timed_out", "output"}
        body = v.markdown()
        assert "### Reproduction (before the fix)" in body
        assert "### Verification (after the fix)" in body

    def test_the_operator_s_pytest_settings_reach_the_confined_runs(
            self, settings, py_tree, monkeypatch: pytest.MonkeyPatch) -> None:
        """PYTEST_ADDOPTS in healer's environment configures the project's test runs in the
        sandbox (here: deselect every test, so nothing passes before or after)."""
        head = _agent(py_tree, {"shop/money.py": PY_FIX, "tests/test_empty.py": PY_REPRO})
        monkeypatch.setenv("PYTEST_ADDOPTS", "-k no_test_has_this_name")
        v = _verify(settings, py_tree, head)
        assert not v.passed and not v.reproduced
        assert "deselected" in v.reproduction_before.output

    def test_a_fix_without_a_test_is_no_reproduction(self, settings, py_tree) -> None:
        v = _verify(settings, py_tree, _agent(py_tree, {"shop/money.py": PY_FIX}))
        assert not v.passed and v.reasons == [NO_REPRODUCTION]
        assert v.reproduction_before is None

    def test_editing_an_existing_test_is_rejected(self, settings, py_tree) -> None:
        head = _agent(py_tree, {"shop/money.py": PY_WRONG, "tests/test_money.py": None,
                                "tests/test_empty.py": PY_REPRO})
        v = _verify(settings, py_tree, head)
        assert not v.passed and v.reasons[0].startswith(EDITS_CHECKS)
        assert "tests/test_money.py" in v.reasons[0]

    def test_a_test_that_passes_on_base_does_not_reproduce(self, settings, py_tree) -> None:
        head = _agent(py_tree, {"shop/money.py": PY_FIX, "tests/test_more.py": PY_SUITE.replace(
            "test_average", "test_again")})
        v = _verify(settings, py_tree, head)
        assert not v.passed and v.reasons[0].startswith(NOT_REPRODUCED)
        assert not v.reproduced and v.reproduction_before.exit == 0

    def test_a_failure_for_another_reason_does_not_reproduce(self, settings, py_tree) -> None:
        v = _verify(settings, py_tree, _agent(
            py_tree, {"shop/money.py": PY_FIX, "tests/test_empty.py": PY_REPRO}),
            error_type="KeyError")
        assert not v.passed and "not with the reported KeyError" in v.reasons[0]

    def test_a_wrong_fix_breaks_the_suite_and_is_rejected(self, settings, py_tree) -> None:
        head = _agent(py_tree, {"shop/money.py": PY_WRONG, "tests/test_empty.py": PY_REPRO})
        v = _verify(settings, py_tree, head)
        assert v.reproduced and v.reproduction_after.ok
        assert not v.passed
        assert any("passed on base and fails with the fix" in r for r in v.reasons), v.reasons
        assert v.suite_after.failed == 1


class TestJavaScript:
    def test_node_test_through_npm_test(self, tmp_path: Path, settings) -> None:
        repo = _project(tmp_path, {
            "package.json": '{"name": "list", "scripts": {"test": "node --test"}}\n',
            "lib/list.js": JS_BUG, "test/list.test.js": JS_SUITE})
        tree = wt.create(repo, settings.state_path, "20240101T000000-abcd5678", "e" * 64)
        head = _agent(tree, {"lib/list.js": JS_FIX, "test/empty.test.js": JS_REPRO})
        v = _verify(settings, tree, head, error_type="TypeError")
        assert v.command == ["npm", "test"]
        assert v.passed, (v.reasons, v.reproduction_before, v.suite_after)
        assert "TypeError" in v.reproduction_before.output
        assert (v.suite_before.passed, v.suite_after.passed) == (1, 2)


class TestCommand:
    @pytest.mark.parametrize(("files", "argv"), [
        ({"package.json": '{"scripts": {"test": "jest"}}'}, ["npm", "test"]),
        ({"go.mod": "module x\n"}, ["go", "test", "./..."]),
        ({"Cargo.toml": "[package]\n"}, ["cargo", "test"]),
        ({"setup.cfg": ""}, list(testcmd.PYTEST)),
        ({"README": ""}, None),
    ])
    def test_detected_from_the_project_files(self, tmp_path: Path, files, argv) -> None:
        for name, text in files.items():
            (tmp_path / name).write_text(text)
        assert testcmd.detect(tmp_path) == argv

    def test_configured_command_wins_and_shell_syntax_is_refused(self, tmp_path: Path) -> None:
        from healer.errors import UsageError

        class Code:
            test_command = "make check"

        assert testcmd.test_command(Code(), tmp_path) == ["make", "check"]
        Code.test_command = "make check && rm -rf /"
        with pytest.raises(UsageError, match="shell syntax"):
            testcmd.test_command(Code(), tmp_path)

    def test_counts_of_each_runner(self) -> None:
        c = testcmd.parse_counts("FAILED tests/t.py::test_x - assert 0\n"
                                 "1 failed, 3 passed in 0.12s\n")
        assert (c.passed, c.failed, c.failed_names) == (3, 1, ["tests/t.py::test_x"])
        c = testcmd.parse_counts("not ok 2 - empty list\n# pass 4\n# fail 1\n")
        assert (c.passed, c.failed, c.failed_names) == (4, 1, ["empty list"])
        c = testcmd.parse_counts("test a::b ... FAILED\ntest result: FAILED. 2 passed; 1 failed;")
        assert (c.passed, c.failed, c.failed_names) == (2, 1, ["a::b"])
        c = testcmd.parse_counts("--- FAIL: TestX (0.00s)\nFAIL\n")
        assert (c.failed, c.failed_names) == (1, ["TestX"])
        c = testcmd.parse_counts("Tests:       1 failed, 2 passed, 3 total\n")
        assert (c.passed, c.failed) == (2, 1)
        assert testcmd.parse_counts("nothing here").passed is None

    def test_the_reproduction_runs_only_the_added_tests(self) -> None:
        assert testcmd.targeted(["npm", "test"], ["test/a.test.js"]) == [
            "npm", "test", "--", "test/a.test.js"]
        assert testcmd.targeted(["go", "test", "./..."], ["pkg/a_test.go"]) == [
            "go", "test", "./pkg"]
        assert testcmd.targeted(list(testcmd.PYTEST), ["tests/t.py"])[-1] == "tests/t.py"

    def test_the_reported_reason(self) -> None:
        assert mentions("E   ZeroDivisionError: division by zero", "ZeroDivisionError")
        assert mentions("raise asyncpg.exceptions.UndefinedTableError", "UndefinedTableError")
        assert mentions("UndefinedTableError: x", "asyncpg.exceptions.UndefinedTableError")
        assert not mentions("AssertionError", "KeyError")
        assert mentions("anything", "HighErrorRate alert") and mentions("anything", "")
