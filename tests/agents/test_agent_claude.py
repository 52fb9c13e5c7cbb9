"""The claude executor end to end: the real Claude Code CLI against the scripted model."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from healer.agents import KNOWN_TOOLS, AgentTask, _proctree, get_definition, load_definitions
from healer.agents.claude import ClaudeExecutor
from healer.agents.executors import claude_cli
from healer.core.bus import ResultsBus
from healer.core.schemas import errors as schema_errors
from healer.core.store import FileStore
from healer.errors import AgentResultError, AgentTimeoutError, AgentUnavailableError
from healer.testing import (
    RecordedRequest,
    Reply,
    ScriptedModel,
    break_stream,
    hang,
    http_error,
    text,
    tool_use,
)

pytestmark = [pytest.mark.e2e]


@pytest.fixture(autouse=True)
def _needs_cli(settings: Any) -> None:
    if claude_cli(settings) is None:
        pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")


def result_doc(status: str = "diagnosed", **extra: Any) -> dict[str, Any]:
    """A result as a scripted agent writes it; ${...} are filled from the task prompt."""
    return {"schema_version": 1, "kind": "${kind}", "target": "${target}", "status": status,
            "run_id": "${run_id}", "executor": "claude", "summary": "scripted", **extra}


def write_result(status: str = "diagnosed", **extra: Any) -> Reply:
    return tool_use("Write", {"file_path": "${result_path}",
                              "content": json.dumps(result_doc(status, **extra))})


def valid(path: str) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    assert schema_errors("agent-result", data) == []
    return data


@pytest.fixture
def prober(tmp_path: Path) -> Path:
    """An agents folder with ``prober``: Read, Write and a few harmless Bash commands."""
    agents = tmp_path / "prober-agents"
    agents.mkdir()
    (agents / "prober.md").write_text(
        "---\nname: prober\ndescription: Probes, for a test.\ntools: Read, Write, "
        "Bash(echo:*), Bash(sleep:*), Bash(printenv:*)\nmodel: haiku\n---\n\nProbe.\n")
    return agents


class TestHealingRun:
    async def test_edits_a_repo_and_its_result_is_applied(
            self, settings: Any, claude_executor: Any, git_repo: Path) -> None:
        """The agent fixes a file in a git repo, writes its result, and the bus applies it;
        the CLI was given the agent's system prompt and exactly its tools."""
        fix = tool_use("Edit", {"file_path": "${cwd}/app.py", "old_string": "sum(items) + 1",
                                "new_string": "sum(items)"}, text="The off-by-one is in total().")
        script = [fix, write_result("fixed", actions_taken=["edited app.py"]), text("Fixed.")]
        store = FileStore(settings.state_path)
        bus = ResultsBus(settings.results_path, store, settle_s=0.3, rescan_s=0.2)
        applied: list[Any] = []
        bus.subscribe(applied.append)
        bus.start()
        try:
            with ScriptedModel(script) as model:
                outcome = await claude_executor(model).run(AgentTask(
                    "healing-agent", "fp0123456789", cwd=str(git_repo), incident="inc-1",
                    vars={"error_type": "AssertionError", "error_message": "total is off"}))
            assert await asyncio.to_thread(bus.drain, 10)
            for _ in range(100):
                if applied:
                    break
                await asyncio.sleep(0.05)
        finally:
            bus.stop()
        assert outcome.ok and outcome.status == "fixed", outcome.error
        diff = subprocess.run(["git", "diff"], cwd=git_repo, capture_output=True, text=True)
        assert "-    return sum(items) + 1" in diff.stdout and "+    return sum(items)" in \
            diff.stdout
        assert [r.data["run_id"] for r in applied] == [outcome.run_id]
        assert applied[0].kind == "healing" and applied[0].target == "fp0123456789"
        first = model.turns[0]
        definition = get_definition("healing-agent")
        assert definition.system_prompt.strip() in first.system_text
        assert set(first.tool_names) - {"DeferredToolPlaceholder"} == set(
            definition.tool_names)
        staged = settings.state_path / "agents" / "runs" / outcome.run_id / Path(
            outcome.result_path).name
        assert "incident: `inc-1`" in first.user_text()
        assert f"result file: `{staged}`" in first.user_text()

    async def test_every_definition_tool_exists_in_the_cli(
            self, settings: Any, claude_executor: Any, tmp_path: Path) -> None:
        """The bundled CLI offers every tool healer's definitions and KNOWN_TOOLS name."""
        wanted = set(KNOWN_TOOLS)
        for d in load_definitions().values():
            wanted |= set(d.tool_names)
        agents = tmp_path / "agents"
        agents.mkdir()
        listed = ["Bash(ls:*)" if t == "Bash" else t for t in sorted(wanted)]
        (agents / "all-tools.md").write_text(
            "---\nname: all-tools\ndescription: Every tool, for a test.\ntools: "
            + ", ".join(listed) + "\nmodel: haiku\n---\n\nYou list tools.\n")
        with ScriptedModel([write_result("ok")]) as model:
            outcome = await claude_executor(model, agents_dir=agents).run(
                AgentTask("all-tools", "t1", kind="probe"))
        assert outcome.ok
        # The session's init message lists the tools it has (some are only announced to the
        # model on demand, through ToolSearch, so the request's list is shorter).
        transcript = settings.state_path / "agents" / "runs" / outcome.run_id / \
            "transcript.jsonl"
        init = next(m for m in map(json.loads, transcript.read_text().splitlines())
                    if m["type"] == "SystemMessage" and m.get("subtype") == "init")
        offered = set(init["data"]["tools"]) | {"Agent"}  # Agent is listed by its old name
        assert "Task" in offered
        assert wanted <= offered, wanted - offered


class TestFailures:
    async def test_broken_stream_is_deferred(
            self, settings: Any, claude_executor: Any) -> None:
        """A model stream that breaks midway is a network failure (T4, transient): the run
        ends deferred with the failure and when to try again, not failed."""
        with ScriptedModel([break_stream(after_events=3)]) as model:
            outcome = await claude_executor(model).run(
                AgentTask("channel-diagnoser", "peer1", vars={"host": "127.0.0.1"},
                          timeout_s=10))
        assert outcome.status == "deferred" and not outcome.ok
        assert isinstance(outcome.exception, AgentResultError), outcome.exception
        data = valid(outcome.result_path)
        assert data["executor"] == "claude" and data["run_id"] == outcome.run_id
        assert data["failure"]["code"] == "T4" and data["retry_at"] > 0

    async def test_http_error_names_the_status(
            self, settings: Any, claude_executor: Any) -> None:
        """An API error answer (529 overloaded) is reported with its status (and, being
        transient, defers the run)."""
        with ScriptedModel([http_error(529)]) as model:
            outcome = await claude_executor(model).run(
                AgentTask("channel-diagnoser", "peer1", vars={"host": "127.0.0.1"},
                          timeout_s=10))
        assert isinstance(outcome.exception, AgentResultError)
        data = valid(outcome.result_path)
        assert "529" in data["error"] and data["status"] == "deferred"
        assert data["failure"]["code"] == "T2"

    async def test_timeout_kills_the_cli_and_everything_it_started(
            self, settings: Any, claude_executor: Any, prober: Path) -> None:
        """A run past its timeout is killed — the sandbox, the CLI and a background child it
        started — and leaves a timeout result."""
        detach = tool_use("Bash", {"command": "sleep 300 >/dev/null 2>&1 & echo started"})
        with ScriptedModel([detach, hang()]) as model:
            outcome = await claude_executor(model, agents_dir=prober).run(AgentTask(
                "prober", "peer1", kind="probe", timeout_s=4))
        assert isinstance(outcome.exception, AgentTimeoutError)
        assert valid(outcome.result_path)["status"] == "timeout"
        pid = int((settings.state_path / "agents" / "pids" / f"{outcome.run_id}.pid"
                   ).read_text())
        assert not _proctree.alive(pid)
        assert _proctree.marked(outcome.run_id) == set()
        assert "started" in model.turns[1].tool_result_text()  # the detached child did start
        assert not (settings.state_path / "agents" / "runs" / outcome.run_id /
                    "claude-config").exists()

    async def test_tool_outside_the_list_is_refused(
            self, settings: Any, claude_executor: Any, tmp_path: Path) -> None:
        """An agent without Bash that calls Bash gets a refusal; the command never runs."""
        agents = tmp_path / "agents"
        agents.mkdir()
        (agents / "reader.md").write_text("---\nname: reader\ndescription: Reads only.\n"
                                          "tools: Read, Write\nmodel: haiku\n---\n\nRead.\n")
        marker = tmp_path / "pwned"
        seen: list[str] = []

        def after_bash(req: RecordedRequest) -> Reply:
            seen.append(req.tool_result_text())
            return write_result("ok")

        script = [tool_use("Bash", {"command": f"touch {marker}"}), after_bash, text("done")]
        with ScriptedModel(script) as model:
            outcome = await claude_executor(model, agents_dir=agents).run(
                AgentTask("reader", "t1", kind="probe", cwd=str(tmp_path)))
        assert not marker.exists()
        assert "No such tool available: Bash" in seen[0]
        assert "Bash" not in model.turns[0].tool_names
        assert outcome.ok

    async def test_agent_that_writes_no_result(
            self, settings: Any, claude_executor: Any) -> None:
        """An agent that just talks and stops gets a failed result saying so."""
        with ScriptedModel([text("I looked around and I am done.")]) as model:
            outcome = await claude_executor(model).run(
                AgentTask("channel-diagnoser", "peer1", vars={"host": "127.0.0.1"}))
        assert outcome.status == "failed"
        assert "wrote no result" in valid(outcome.result_path)["error"]

    async def test_invalid_agent_result_is_replaced(
            self, settings: Any, claude_executor: Any) -> None:
        """A result the schema refuses is set aside and replaced by a failed one."""
        bad = tool_use("Write", {"file_path": "${result_path}",
                                 "content": json.dumps({"kind": "${kind}", "target": "nope",
                                                        "status": "ok"})})
        with ScriptedModel([bad, text("done")]) as model:
            outcome = await claude_executor(model).run(
                AgentTask("channel-diagnoser", "peer1", vars={"host": "127.0.0.1"}))
        assert outcome.status == "failed" and "invalid" in outcome.error
        assert (settings.state_path / "agents" / "runs" / outcome.run_id /
                "invalid-result.json").is_file()
        assert valid(outcome.result_path)["status"] == "failed"

    async def test_missing_cli_is_unavailable(
            self, settings: Any) -> None:
        """A configured CLI path that does not exist gives AgentUnavailableError and a result."""
        settings.executor.claude.cli_path = "/nonexistent/claude"
        outcome = await ClaudeExecutor(settings).run(
            AgentTask("channel-diagnoser", "peer1", vars={"host": "127.0.0.1"}))
        assert isinstance(outcome.exception, AgentUnavailableError)
        assert valid(outcome.result_path)["status"] == "failed"


class TestIsolation:
    async def test_agent_env_has_no_healer_secrets(
            self, settings: Any, claude_executor: Any, monkeypatch: pytest.MonkeyPatch,
            prober: Path) -> None:
        """healer's own secrets are not in the agent's environment; its run id is there,
        and its Claude config dir is an isolated one."""
        monkeypatch.setenv("HEALER_TOKEN", "s3cret-api-token")
        monkeypatch.setenv("GITHUB_TOKEN", "ghp_notforagents")
        show = tool_use("Bash", {"command": "printenv HEALER_RUN_ID CLAUDE_CONFIG_DIR "
                                            "HEALER_TOKEN GITHUB_TOKEN"})
        with ScriptedModel([show, write_result("ok"), text("done")]) as model:
            outcome = await claude_executor(model, agents_dir=prober).run(
                AgentTask("prober", "peer1", kind="probe"))
        shown = model.turns[1].tool_result_text()
        assert outcome.run_id in shown
        assert f"agents/runs/{outcome.run_id}/claude-config" in shown
        assert "s3cret" not in shown and "ghp_" not in shown
        assert "s3cret" not in json.dumps([r.body for r in model.requests])


class TestMcpTools:
    async def test_scripted_mcp_tool_call_reaches_the_server(
            self, settings: Any, claude_executor: Any, tmp_path: Path) -> None:
        """A scripted tool_use of an MCP tool runs that tool on a real MCP server."""
        server = tmp_path / "mcp_server.py"
        work = tmp_path / "work"  # the run's checkout: the one place it may write
        work.mkdir()
        out = work / "mcp-called.txt"
        server.write_text(textwrap.dedent(f"""
            from mcp.server.mcpserver import MCPServer
            app = MCPServer("probe")

            @app.tool()
            def record(note: str) -> str:
                open({str(out)!r}, "w").write(note)
                return "recorded " + note

            app.run()
        """))
        agents = tmp_path / "agents"
        agents.mkdir()
        (agents / "recorder.md").write_text(
            "---\nname: recorder\ndescription: Records notes.\ntools: Write, "
            "mcp__probe__record\nmodel: haiku\n---\n\nRecord.\n")
        script = [tool_use("mcp__probe__record", {"note": "hello"}), write_result("ok"),
                  text("done")]
        with ScriptedModel(script) as model:
            outcome = await claude_executor(model, agents_dir=agents).run(AgentTask(
                "recorder", "t1", kind="probe", cwd=str(work), mcp_servers={"probe": {
                    "type": "stdio", "command": sys.executable, "args": [str(server)]}}))
        assert out.read_text() == "hello"
        assert "recorded hello" in model.turns[1].tool_result_text()
        assert "mcp__probe__record" in model.turns[0].tool_names
        assert outcome.ok
