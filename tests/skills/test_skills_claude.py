"""The repository as a Claude Code plugin, with the real CLI and the scripted model.

Loaded as ``plugins=[{"type": "local", "path": <repo>}]``: the model is offered healer's
skills (with their descriptions) and agents; a scripted turn invokes the healer skill, runs
one of its scripts from the folder the skill names, and calls a tool of the plugin's MCP
server (started through launch/healer); the session hook registers the session with healer.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from skills_helpers import AGENT_LOG, CLAUDE_TEST_ENV, VENV_BIN, child_env

from healer.agents.executors import claude_cli
from healer.config import load_settings
from healer.resources import bundle_root
from healer.testing import RecordedRequest, Reply, ScriptedModel, text, tool_use
from healer.testing.api import ServeProcess

pytestmark = pytest.mark.e2e
MCP_TOOL = "mcp__plugin_healer_healer__get_healing_status"
DESCRIPTIONS = {
    "healer:healer-bundle": "Entry point to healer",
    "healer:healer": "Watches AI coding agents and their play sessions",
    "healer:fleet-healer": "Keeps every communication channel",
    "healer:self-healing": "How to report an unexpected error",
}


@pytest.fixture(autouse=True)
def _needs_cli() -> None:
    if claude_cli(load_settings(env={})) is None:
        pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")


def run_script_from_skill_dir(req: RecordedRequest) -> Reply:
    """The model's second turn: run scan_summary.py from the folder the skill announced."""
    m = re.search(r"Base directory for this skill: (\S+)", req.user_text())
    assert m, "the skill's base directory was not given to the model"
    return tool_use("Bash", {"command": f'"{m.group(1)}/scripts/scan_summary.py" agent.log'})


async def run_session(project: Path, env: dict[str, str], script: list[Any]
                      ) -> tuple[ScriptedModel, list[Any]]:
    from claude_agent_sdk import ClaudeAgentOptions, query

    messages: list[Any] = []
    stderr: list[str] = []
    with ScriptedModel(script) as model:
        options = ClaudeAgentOptions(
            plugins=[{"type": "local", "path": str(bundle_root())}], cwd=str(project),
            env={**env, **model.env()}, setting_sources=[], permission_mode="dontAsk",
            allowed_tools=["Skill", "Bash", MCP_TOOL], max_turns=8,
            cli_path=str(claude_cli(load_settings(env={}))), stderr=stderr.append)
        async for message in query(prompt="Why did the agent fail? Check agent.log.",
                                   options=options):
            messages.append(message)
    assert messages and type(messages[-1]).__name__ == "ResultMessage", stderr[-20:]
    return model, messages


class TestPlugin:
    async def test_skills_agents_mcp_and_hook_work_from_the_plugin(
            self, tmp_path: Path, base_env: dict[str, str]) -> None:
        """The skill listing carries every healer skill with its description and the agents;
        Skill → Bash runs a skill script; the MCP tool answers; the session is registered
        with healer and finished when Claude Code exits."""
        project = tmp_path / "project"
        project.mkdir()
        (project / "agent.log").write_text(AGENT_LOG)
        (project / "healer.yaml").write_text(yaml.safe_dump({
            "state_dir": str(tmp_path / "mcp-state"), "results_dir": str(tmp_path / "results"),
            "fleet_dir": str(tmp_path / "fleet"), "cto_config": str(tmp_path / "none.json")}))
        serve = ServeProcess(base_env)
        try:
            # The plugin must work without healer on PATH: launch/healer finds it. The venv
            # stays last on PATH only for checkouts whose venv is not <repo>/.venv.
            path = os.environ["PATH"].replace(VENV_BIN + os.pathsep, "")
            env = {**child_env(), **CLAUDE_TEST_ENV, "PATH": f"{path}{os.pathsep}{VENV_BIN}",
                   "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config"),
                   "HEALER_URL": serve.url}
            script = [tool_use("Skill", {"skill": "healer:healer"}), run_script_from_skill_dir,
                      tool_use(MCP_TOOL, {}), text("Two alerts: A10 and R2.")]
            model, messages = await run_session(project, env, script)
            sessions = serve.wait_for(lambda: [
                s for s in serve.http.get("/api/v1/sessions").json()["sessions"]
                if s["status"] == "completed"])
        finally:
            serve.close()

        first = json.dumps(model.turns[0].json)
        for skill, words in DESCRIPTIONS.items():
            assert f"{skill}: {words}" in first, skill
        for agent in (bundle_root() / "agents").glob("*.md"):
            assert f"healer:{agent.stem}" in first, agent.stem

        init = next(m for m in messages if type(m).__name__ == "SystemMessage"
                    and m.subtype == "init").data
        # On a busy machine Claude Code may report the server still "pending" at init; the
        # MCP tool's answer below is what proves it connected.
        assert [m for m in init["mcp_servers"] if m["name"] == "plugin:healer:healer"
                and m["source"] == "plugin" and m["status"] in ("connected", "pending")], \
            init["mcp_servers"]
        assert set(DESCRIPTIONS) <= set(init["skills"])

        skill_turn, bash_turn, mcp_turn = model.turns[1], model.turns[2], model.turns[3]
        assert "Launching skill: healer:healer" in skill_turn.tool_result_text()
        skill_dir = bundle_root() / "skills" / "healer"
        # ${CLAUDE_SKILL_DIR} in SKILL.md reached the model as the real folder.
        assert f'"{skill_dir}/scripts/play.py" health' in skill_turn.user_text()
        summary = json.loads(bash_turn.tool_result_text())
        assert summary["alerts"] == 2 and set(summary["codes"]) == {"A10", "R2"}
        assert json.loads(mcp_turn.tool_result_text()) == {"count": 0, "attempts": []}

        session_id = init["session_id"]
        assert [s["play_id"] for s in sessions] == [f"claude-{session_id}"]
        assert sessions[0]["repository"] == "project"
