"""The prompt of a code attempt carries the living context only where one exists: a context
folder without a layer file is no living context (a real bug: an empty folder used to put an
empty "Self-Healing Context" block, and a rule to satisfy no scenario, in every prompt)."""

from __future__ import annotations

from pathlib import Path

import yaml

from healer.agents import RunInfo, render_task
from healer.code.attempt import CodeSignal, living_context, prompt_vars
from healer.config import load_settings

REPORT = {"error_type": "KeyError", "error_message": "'user_id'", "traceback": "",
          "call_site": "src/app/tools.py:lookup", "context": "", "tool_name": "",
          "severity": "high"}


def _prompt(settings, tmp_path: Path) -> str:
    signal = CodeSignal("a-1", "f" * 64, "report_error", REPORT, file="src/app/tools.py")
    ctx = prompt_vars(signal, living_context(settings), branch="healer/x", iteration=1,
                      max_iterations=3, previous_failure="", max_blast_radius=5)
    run = RunInfo(agent="healing-agent", kind="healing", target="f" * 12, run_id="r1",
                  result_path=str(tmp_path / "r.json"), cwd=str(tmp_path), timeout_s=60,
                  executor="command")
    return render_task("healing-agent.md.j2", run, ctx)


def test_a_context_folder_without_a_layer_file_is_no_living_context(tmp_path: Path) -> None:
    folder = tmp_path / "context"
    (folder / "scenarios").mkdir(parents=True)  # what `healer context init` leaves, emptied
    settings = load_settings(env={}, overrides={"context": {"dir": str(folder)}})
    assert living_context(settings) is None
    text = _prompt(settings, tmp_path)
    assert "## Self-Healing Context" not in text and "scenarios, invariants" not in text
    assert "iteration 1 of 3" in text and "**Reproduce.**" in text


def test_a_layer_file_makes_one(tmp_path: Path) -> None:
    folder = tmp_path / "context"
    folder.mkdir()
    (folder / "invariants.yaml").write_text(yaml.safe_dump([
        {"id": "INV-001", "rule": "rows keep their user", "files": ["src/app/*.py"],
         "severity": "critical"}]))
    settings = load_settings(env={}, overrides={"context": {"dir": str(folder)}})
    assert living_context(settings) is not None
    text = _prompt(settings, tmp_path)
    assert "## Self-Healing Context" in text and "INV-001" in text
