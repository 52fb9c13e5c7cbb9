"""``healer eval``: the grader on synthetic records, the shipped fixtures checked for soundness
without a model, the Sentry envelope intake, bad input, and real replays through the Claude
Code CLI against the scripted model (one case here; the whole grid is ``slow``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.code.eval import grade as gr
from healer.code.eval.drive import report_of
from healer.code.eval.fixtures import REPLAYS, discover, load_fixture
from healer.code.eval.runner import Options, cases, run_all
from healer.config import load_settings
from healer.errors import UsageError
from healer.resources import bundle_root

FIXTURES = bundle_root() / "evals" / "fixtures"
GLUE = bundle_root() / "evals" / "scripted.py"


def run_cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEALER")}
    return subprocess.run([sys.executable, "-m", "healer", "eval", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


# --- the grader -----------------------------------------------------------------------------


@pytest.mark.parametrize(("record", "expected", "changed", "hidden", "want"), [
    ({"status": "pr_open"}, "fixed", True, True, gr.FIXED),
    ({"status": "awaiting_approval"}, "fixed", True, True, gr.FIXED),
    ({"status": "pr_open"}, "fixed", True, False, gr.GOT_THROUGH),
    ({"status": "pr_open"}, "unfixable", True, True, gr.GOT_THROUGH),
    ({"status": "pr_merged"}, "no_change", True, None, gr.GOT_THROUGH),
    ({"status": "unfixable"}, "unfixable", False, None, gr.UNFIXABLE_CORRECT),
    ({"status": "unfixable"}, "no_change", False, None, gr.UNFIXABLE_CORRECT),
    ({"status": "failed"}, "no_change", False, None, gr.UNFIXABLE_CORRECT),
    ({"status": "unfixable"}, "fixed", False, None, gr.GAVE_UP),
    ({"status": "failed", "verification": {"passed": False}}, "fixed", True, False, gr.CAUGHT),
    ({"status": "failed"}, "unfixable", True, False, gr.CAUGHT),
    ({"status": "failed"}, "fixed", True, True, gr.MISSED),
    ({"status": "timeout"}, "fixed", False, None, gr.NO_FIX),
    ({"status": "rejected"}, "fixed", False, None, gr.NO_FIX),
])
def test_grade(record: dict[str, Any], expected: str, changed: bool, hidden: bool | None,
               want: str) -> None:
    assert gr.grade(record, expected=expected, changed=changed, hidden_passed=hidden) == want


@pytest.mark.parametrize(("expected", "replay", "want"), [
    ("fixed", "correct", gr.FIXED), ("fixed", "wrong", gr.CAUGHT),
    ("fixed", "unfixable", gr.GAVE_UP), ("unfixable", "correct", gr.UNFIXABLE_CORRECT),
    ("no_change", "unfixable", gr.UNFIXABLE_CORRECT), ("no_change", "wrong", gr.CAUGHT),
    ("fixed", "model", gr.FIXED), ("unfixable", "model", gr.UNFIXABLE_CORRECT),
])
def test_expected_grade(expected: str, replay: str, want: str) -> None:
    assert gr.expected_grade(expected, replay) == want


def test_any_other_grade_is_below_and_got_through_is_worst() -> None:
    assert not gr.below(gr.CAUGHT, gr.CAUGHT)
    assert gr.below(gr.GOT_THROUGH, gr.CAUGHT) and gr.below(gr.FIXED, gr.CAUGHT)
    assert gr.worst_first([gr.FIXED, gr.GOT_THROUGH, gr.CAUGHT])[0] == gr.GOT_THROUGH


# --- the fixtures ---------------------------------------------------------------------------


def test_the_shipped_fixtures_cover_the_issue() -> None:
    found = discover(FIXTURES)
    assert len(found) >= 12
    assert {f.language for f in found} == {"python", "javascript"}
    assert {"fixed", "unfixable", "no_change"} <= {f.expected for f in found}
    assert any(f.envelope for f in found) and any(not f.envelope for f in found)


def _copy(fixture: Any, tmp: Path) -> Path:
    tree = tmp / fixture.name
    shutil.copytree(fixture.repo, tree)
    return tree


def _suite(fixture: Any, tree: Path, files: list[str] = ()) -> subprocess.CompletedProcess[str]:
    argv = ([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
            if fixture.language == "python" else ["node", "--test", *files])
    return subprocess.run(argv, cwd=tree, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def _apply(tree: Path, replay: dict[str, Any]) -> list[str]:
    """Write a replay's files; the reproduction tests it adds."""
    added = [p for p in replay["files"] if not (tree / p).exists()]
    for rel, content in replay["files"].items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(content)
    return added


def _hidden(fixture: Any, tree: Path) -> subprocess.CompletedProcess[str]:
    for rel in fixture.hidden_files():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fixture.hidden / rel, tree / rel)
    return _suite(fixture, tree, fixture.hidden_files())


# Three representative fixtures by default (a Sentry envelope, a JavaScript bug whose obvious
# patch is wrong, a right answer that is no code change); the others with `make test-all`.
SOUND_BY_DEFAULT = {"py-division-by-zero", "js-type-confusion", "py-flaky-external"}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=() if n in SOUND_BY_DEFAULT else (pytest.mark.exhaustive,))
    for n in sorted(p.name for p in FIXTURES.iterdir())])
def test_fixture_is_sound(name: str, tmp_path: Path) -> None:
    """Without a model: the suite passes on base; the correct patch's reproduction fails on
    base and passes after, with the suite and the hidden check; the wrong patch breaks a test
    or leaves its reproduction red; an unfixable fixture's hidden check passes on base."""
    fixture = load_fixture(FIXTURES / name)
    assert _suite(fixture, _copy(fixture, tmp_path / "base")).returncode == 0
    hidden_on_base = _hidden(fixture, _copy(fixture, tmp_path / "hidden"))
    assert (hidden_on_base.returncode == 0) == (fixture.expected != "fixed")
    wrong = yaml.safe_load(fixture.replay("wrong").read_text())
    tree = _copy(fixture, tmp_path / "wrong")
    _apply(tree, wrong)
    assert _suite(fixture, tree).returncode != 0, "the wrong patch passes every test"
    assert _hidden(fixture, tree).returncode != 0, "the hidden check lets the wrong patch by"
    if fixture.expected != "fixed":
        assert "unfixable" in yaml.safe_load(fixture.replay("correct").read_text())
        return
    correct = yaml.safe_load(fixture.replay("correct").read_text())
    base = _copy(fixture, tmp_path / "repro")
    repro = [p for p in correct["files"] if not (base / p).exists()]
    for rel in repro:
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(correct["files"][rel])
    assert repro and _suite(fixture, base, repro).returncode != 0, "no failing reproduction"
    tree = _copy(fixture, tmp_path / "correct")
    _apply(tree, correct)
    assert _suite(fixture, tree).returncode == 0
    assert _hidden(fixture, tree).returncode == 0


def _broken(tmp_path: Path, **change: Any) -> Path:
    src = FIXTURES / "py-off-by-one"
    dest = tmp_path / "py-off-by-one"
    shutil.copytree(src, dest)
    meta = yaml.safe_load((dest / "fixture.yaml").read_text())
    (dest / "fixture.yaml").write_text(yaml.safe_dump({**meta, **change}))
    return dest


@pytest.mark.parametrize(("change", "message"), [
    ({"expected": "maybe"}, "expected must be one of"),
    ({"language": "cobol"}, "language must be one of"),
    ({"name": "other"}, "name must be the folder's name"),
    ({"hidden_command": "pytest -q"}, "hidden_command must be a list"),
])
def test_a_broken_fixture_is_a_usage_error(tmp_path: Path, change: dict[str, Any],
                                           message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_fixture(_broken(tmp_path, **change))


def test_a_symlink_in_a_fixture_is_refused(tmp_path: Path) -> None:
    dest = _broken(tmp_path)
    (dest / "repo" / "link").symlink_to("/etc/passwd")
    with pytest.raises(UsageError, match="symbolic link"):
        load_fixture(dest)


def test_the_sentry_envelope_becomes_the_report(tmp_path: Path) -> None:
    """The captured sentry-sdk envelope goes through the ingest's parser: the exception, the
    in-app culprit and the rendered stack reach the report."""
    fixture = load_fixture(FIXTURES / "py-division-by-zero")
    settings = load_settings(env={}, overrides={"state_dir": str(tmp_path / "s")})
    report = report_of(fixture, tmp_path, settings)
    assert report["error_type"] == "ZeroDivisionError"
    assert report["call_site"] == "shop/pricing.py:apply_discount"
    assert "apply_discount" in report["traceback"] and "production" in report["context"]


# --- the command ----------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--replay", "sloppy"], "--replay takes correct, wrong, unfixable"),
    (["--fixture", "no-such-bug"], "no fixture named 'no-such-bug'"),
    (["--jobs", "0"], "--jobs must be between 1 and 32"),
    (["--fixtures-dir", "/nonexistent/evals"], "no fixtures folder"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str],
                                          message: str) -> None:
    res = run_cli(*args, cwd=tmp_path, timeout=60)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr


def _needs_claude() -> None:
    from healer.agents.executors import claude_cli

    if claude_cli(load_settings(env={})) is None:
        pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")


@pytest.mark.e2e
def test_a_correct_patch_replayed_through_claude_code_is_fixed(tmp_path: Path) -> None:
    """The real command, the real Claude Code CLI, the scripted model replaying the correct
    patch: a PR whose head passes the hidden check — ``fixed``, exit 0, the JSON written."""
    _needs_claude()
    out = tmp_path / "eval.json"
    res = run_cli("--fixture", "py-keyerror-missing-field", "--replay", "correct",
                  "--json", str(out), cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads(out.read_text())
    [case] = doc["cases"]
    assert (case["grade"], case["status"], case["hidden"]) == ("fixed", "pr_open", "passed")
    assert case["turns"] >= 4 and case["duration_s"] > 0
    assert doc["summary"]["as_expected"] == 1 and "fixed" in res.stdout


@pytest.mark.e2e
async def test_an_unfixable_note_is_unfixable_correct(tmp_path: Path) -> None:
    """The operator's step for a missing variable: no PR, graded unfixable_correct."""
    _needs_claude()
    todo = cases(discover(FIXTURES, ["py-missing-env-var"]), ["unfixable"], "scripted")
    before = set(threading.enumerate())
    [result] = await run_all(todo, Options(scripted_glue=GLUE))
    assert (result.grade, result.status) == (gr.UNFIXABLE_CORRECT, "unfixable")
    assert "DATABASE_URL" in result.reason or result.status == "unfixable"
    # Nothing of the case is left to write into its state dir, which is deleted by now.
    writers = [t.name for t in set(threading.enumerate()) - before
               if t.name.startswith("healer-incident")]
    assert writers == []


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.exhaustive
async def test_a_sample_of_the_grid(tmp_path: Path) -> None:
    """Two fixtures × correct, wrong, unfixable, each as expected: a captured sentry-sdk
    envelope in Python and a JavaScript bug whose obvious patch is wrong. The whole grid
    (13 × 3, about 10 minutes) is `healer eval`; this sample runs with `make test-all`; the
    default run proves every fixture's patches sound without a model, and one correct and
    one unfixable replay end to end."""
    _needs_claude()
    sample = discover(FIXTURES, ["py-division-by-zero", "js-type-confusion"])
    results = await run_all(cases(sample, REPLAYS, "scripted"),
                            Options(scripted_glue=GLUE), jobs=2)
    assert len(results) == 6
    off = [(r.fixture, r.replay, r.grade, r.want, r.reason) for r in results if not r.ok]
    assert not off
