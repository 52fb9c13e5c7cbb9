"""The real Claude Code CLI against the scripted model, on both sides of the protocol.

* As the **healing agent**: the dispatcher runs ``healing-agent`` through the claude executor;
  the model edits the bug in the worktree and commits it with Bash (``Bash(git add:*)``,
  ``Bash(git commit:*)``), inside the sandbox; a PR record follows.
* As the **reporting agent**: a Claude Code session loads the shipped ``.mcp.json``, calls
  ``report_error`` (``mcp__healer__report_error``) and gets the seed's accepted response; the
  healing run behind it ends with a PR record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from selfheal_helpers import SEED_REPORT, TRACEBACK, child_env, wait_status

from healer.agents.executors import claude_cli
from healer.core.store import FileStore
from healer.resources import bundle_root
from healer.selfheal.attempts import Attempts
from healer.selfheal.dispatch import Dispatcher
from healer.selfheal.runner import ExecutorRunner
from healer.selfheal.service import SelfHealService
from healer.testing import ScriptedModel, text, tool_use

pytestmark = pytest.mark.e2e

# Fail fast instead of retrying, and never leave the machine: proxies point at a closed
# loopback port; loopback (the scripted model) bypasses them.
CLAUDE_TEST_ENV = {
    "CLAUDE_CODE_MAX_RETRIES": "0",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
}
FIXED = 'def lookup(row):\n    return row.get("user_id")\n'


@pytest.fixture(autouse=True)
def _needs_cli(make_settings: Any) -> None:
    if claude_cli(make_settings(None)) is None:
        pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")


def result(status: str) -> Any:
    doc = {"schema_version": 1, "kind": "${kind}", "target": "${target}", "status": status,
           "run_id": "${run_id}", "incident": "${incident}", "executor": "claude",
           "summary": "scripted healing run", "actions_taken": ["edited", "committed"]}
    return tool_use("Write", {"file_path": "${result_path}", "content": json.dumps(doc)})


REPRO_TEST = ("import sys, pathlib\n"
              "sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / 'src'))\n"
              "from app.tools import lookup\n\n\n"
              "def test_a_row_without_user_id():\n    assert lookup({}) is None\n")


def healing_script() -> list[Any]:
    """What a model does to fix the bug: edit, commit with git, write the result, stop."""
    return [
        tool_use("Edit", {"file_path": "${cwd}/src/app/tools.py",
                          "old_string": 'return row["user_id"]',
                          "new_string": 'return row.get("user_id")'},
                 text="The lookup assumes every row has user_id; legacy rows do not."),
        tool_use("Write", {"file_path": "${cwd}/tests/test_lookup_repro.py",
                           "content": REPRO_TEST},
                 text="A test that reproduces the KeyError."),
        tool_use("Bash", {"command": "git add src/app/tools.py tests && git commit -q -m "
                                     "'fix: tolerate rows without user_id'",
                          "description": "Commit the test and the fix"}),
        result("fixed"),
        text("Committed the fix on the healing branch."),
    ]


class TestHealingAgent:
    async def test_claude_fixes_and_commits(self, make_settings: Any, repo: Path) -> None:
        """Claude Code edits the worktree and commits via Bash; the attempt ends in pr_open."""
        settings = make_settings(None)
        with ScriptedModel(healing_script()) as model:
            runner = ExecutorRunner(settings, executor="claude",
                                    env={**model.env(), **CLAUDE_TEST_ENV})
            svc = SelfHealService(settings, FileStore(settings.state_path), runner=runner,
                                  launcher=lambda _a: None, env={})
            out = svc.report({"error_type": "KeyError", "error_message": "'user_id'",
                              "traceback": TRACEBACK.format(root=repo)})
            assert out["accepted"], out
            att = await Dispatcher(settings, svc.store, runner=runner).run(out["attempt_id"])
        assert att["status"] == "pr_open", att.get("reason")
        pr = json.loads((settings.state_path / "forge" / "prs" / "1.json").read_text())
        diff = Path(pr["diff_file"]).read_text()
        assert '+    return row.get("user_id")' in diff
        assert "fix: tolerate rows without user_id" in pr["body"]
        first = model.turns[0]
        assert "KeyError" in first.user_text() and "src/app/tools.py:lookup" in first.user_text()
        assert f"working directory: `{att['worktree']}`" in first.user_text()
        assert Path(att["worktree"], "src/app/tools.py").read_text() == FIXED


class TestReportingAgent:
    def test_claude_code_reports_through_the_shipped_mcp_json(
            self, tmp_path: Path, repo: Path, agent_script: Any, make_settings: Any) -> None:
        """A Claude Code session with the repository's .mcp.json calls report_error; the
        seed's response comes back to the model and the healing run ends with a PR."""
        project = tmp_path / "project"
        project.mkdir()
        (project / ".mcp.json").write_text((bundle_root() / ".mcp.json").read_text())
        (project / "healer.yaml").write_text(yaml.safe_dump({
            "state_dir": str(project / "state"), "results_dir": str(project / "results"),
            "cto_config": str(project / "none.json"), "selfheal": {"repo": str(repo)},
            "executor": {"default": "command",
                         "commands": {"healing-agent": agent_script("fix")}},
        }))
        # The seed's report, of the error the scripted fix reproduces (a KeyError).
        report = {**SEED_REPORT, "error_type": "KeyError", "error_message": "'user_id'"}
        call = tool_use("mcp__healer__report_error", report,
                        text="That looks like a missing migration; reporting it.")
        with ScriptedModel([call, text("Reported; continuing with a workaround.")]) as model:
            env = child_env(**model.env(), **CLAUDE_TEST_ENV,
                            CLAUDE_CONFIG_DIR=str(tmp_path / "claude-config"),
                            PATH=f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ['PATH']}")
            proc = subprocess.run(
                [str(claude_cli(make_settings(None))), "-p", "Store the new fact.",
                 "--mcp-config", str(project / ".mcp.json"), "--strict-mcp-config",
                 "--allowedTools", "mcp__healer__report_error", "--output-format", "json",
                 "--max-turns", "4"],
                cwd=project, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        answered = [r for r in model.turns if r.tool_results()]
        assert answered, "the model never saw the tool result"
        seen = json.loads(answered[0].tool_result_text())
        assert seen["accepted"] is True and seen["message"] == "Healing agent dispatched"
        attempts = Attempts(FileStore(project / "state"))
        final = wait_status(lambda: attempts.get(seen["attempt_id"]),
                            {"pr_open", "failed", "timeout"})
        assert final["status"] == "pr_open", final.get("reason")
        assert final["tool_name"] == "memory_store_fact"
