"""Background runs (AgentRunner), the command executor, and how `auto` chooses."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from healer.agents import (
    AgentRunner,
    AgentTask,
    CommandExecutor,
    PlaybookExecutor,
    _proctree,
    explain_auto,
    select_executor,
)
from healer.agents.claude import ClaudeExecutor
from healer.core.schemas import errors as schema_errors
from healer.errors import (
    AgentProcessError,
    AgentTimeoutError,
    AgentUnavailableError,
    ExecutorError,
    UsageError,
)
from healer.testing import ScriptedModel, hang


def valid(path: str) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    assert schema_errors("agent-result", data) == []
    return data


async def until(check: Any, timeout: float = 10.0) -> None:
    """Wait for ``check()`` to hold (the machine may be busy; never a fixed sleep)."""
    for _ in range(int(timeout / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


def task(n: int, **kw: Any) -> AgentTask:
    return AgentTask("config-updater", f"mac{n}", vars={"host": "127.0.0.1"}, **kw)


class TestRunner:
    async def test_bounded_concurrency(self, settings: Any, gated: dict[str, Any]) -> None:
        """No more than max_concurrent runs execute at once; the rest queue, then all finish."""
        runner = AgentRunner(settings, executor="playbook", max_concurrent=2)
        handles = [runner.submit(task(i)) for i in range(5)]
        await until(lambda: gated["started"] == 2)
        await asyncio.sleep(0.2)  # room for a third to start, were the bound not enforced
        assert gated["started"] == 2 and runner.queued == 3 and runner.running == 2
        gated["gate"].set()
        outcomes = [await runner.wait(h.run_id, timeout=10) for h in handles]
        assert gated["peak"] == 2 and all(o.ok for o in outcomes)
        assert len({o.result_path for o in outcomes}) == 5

    async def test_cancel_running_and_queued(self, settings: Any, gated: dict[str, Any]) -> None:
        """Cancelling a running or a queued run ends it with a failed result on the bus."""
        runner = AgentRunner(settings, executor="playbook", max_concurrent=1)
        running, queued = runner.submit(task(1)), runner.submit(task(2))
        await until(lambda: gated["started"] == 1)
        assert runner.cancel(running.run_id) and runner.cancel(queued.run_id)
        first = await runner.wait(running.run_id, timeout=10)
        second = await runner.wait(queued.run_id, timeout=10)
        assert running.state == queued.state == "cancelled"
        assert first.status == second.status == "failed"
        assert "cancelled" in valid(first.result_path)["error"]
        assert "before it started" in valid(second.result_path)["error"]
        assert gated["started"] == 1
        assert not runner.cancel(running.run_id)  # already over

    async def test_queue_is_bounded(self, settings: Any, gated: dict[str, Any]) -> None:
        """Submitting beyond max_queued waiting runs is refused."""
        runner = AgentRunner(settings, executor="playbook", max_concurrent=1, max_queued=2)
        runner.submit(task(1))
        await until(lambda: gated["started"] == 1)
        runner.submit(task(2))
        runner.submit(task(3))
        with pytest.raises(ExecutorError, match="queue is full"):
            runner.submit(task(4))
        await runner.aclose()

    async def test_bad_task_surfaces_in_wait(self, settings: Any) -> None:
        """A task for an unknown agent fails its handle with the usage error."""
        runner = AgentRunner(settings, executor="playbook")
        handle = runner.submit(AgentTask("no-such-agent", "x"))
        with pytest.raises(UsageError, match="unknown agent"):
            await runner.wait(handle.run_id, timeout=5)
        assert handle.state == "error"

    async def test_on_done_gets_the_outcome(self, settings: Any, free_port: Any) -> None:
        """The on_done callback receives each finished run's outcome."""
        runner = AgentRunner(settings, executor="playbook")
        seen: list[Any] = []
        h = runner.submit(AgentTask("channel-diagnoser", "p1", vars={
            "host": "127.0.0.1", "port": str(free_port())}), on_done=seen.append)
        outcome = await runner.wait(h.run_id, timeout=10)
        assert seen == [outcome] and h.to_dict()["status"] == "diagnosed"

    @pytest.mark.e2e
    async def test_cancel_kills_a_claude_run(self, settings: Any, claude_executor: Any) -> None:
        """Cancelling a running claude agent kills its CLI and leaves a failed result."""
        with ScriptedModel([hang()]) as model:
            runner = AgentRunner(settings, executor=claude_executor(model))
            h = runner.submit(AgentTask("channel-diagnoser", "p1", vars={"host": "127.0.0.1"}))
            pidfile = settings.state_path / "agents" / "pids" / f"{h.run_id}.pid"
            await until(lambda: bool(model.requests), timeout=30)
            pid = int(pidfile.read_text())
            assert _proctree.alive(pid)
            runner.cancel(h.run_id)
            outcome = await runner.wait(h.run_id, timeout=30)
        assert not _proctree.alive(pid) and _proctree.marked(h.run_id) == set()
        assert outcome.status == "failed"
        assert valid(outcome.result_path)["error"].startswith("cancelled")


AGENT_SCRIPT = textwrap.dedent("""
    import json, os, sys
    result, prompt = sys.argv[1], sys.argv[2]
    assert os.path.isfile(prompt) and os.environ["HEALER_RESULT_FILE"] == result
    mode = os.environ.get("MODE", "ok")
    if mode == "fail":
        print("something broke", file=sys.stderr)
        sys.exit(3)
    if mode == "hang":
        import subprocess, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                         start_new_session=True)
        time.sleep(300)
    doc = {"schema_version": 1, "kind": os.environ["HEALER_KIND"],
           "target": os.environ["HEALER_TARGET"], "status": "healed",
           "run_id": os.environ["HEALER_RUN_ID"], "summary": "done by a command"}
    with open(result, "w") as fh:
        json.dump(doc, fh)
""")


class TestCommandExecutor:
    def _executor(self, settings: Any, tmp_path: Path, mode: str) -> CommandExecutor:
        script = tmp_path / "agent.py"
        script.write_text(AGENT_SCRIPT)
        return CommandExecutor(settings, env={"MODE": mode}, commands={
            "daemon-restarter": [sys.executable, str(script), "{result_file}", "{prompt_file}"]})

    async def test_command_writes_the_result(self, settings: Any, tmp_path: Path) -> None:
        """A configured CLI gets the prompt and result paths and its result is published."""
        ex = self._executor(settings, tmp_path, "ok")
        outcome = await ex.run(AgentTask("daemon-restarter", "mac1", vars={"host": "127.0.0.1"}))
        assert outcome.ok and valid(outcome.result_path)["summary"] == "done by a command"

    async def test_failing_command(self, settings: Any, tmp_path: Path) -> None:
        """A non-zero exit is an AgentProcessError with its output, and a failed result."""
        ex = self._executor(settings, tmp_path, "fail")
        outcome = await ex.run(AgentTask("daemon-restarter", "mac1", vars={"host": "127.0.0.1"}))
        assert isinstance(outcome.exception, AgentProcessError)
        assert outcome.exception.exit_code == 3
        assert "something broke" in outcome.exception.stderr
        assert valid(outcome.result_path)["status"] == "failed"

    async def test_timeout_kills_the_command_tree(self, settings: Any, tmp_path: Path) -> None:
        """A command past its timeout is killed with everything it started, even detached."""
        ex = self._executor(settings, tmp_path, "hang")
        outcome = await ex.run(AgentTask("daemon-restarter", "mac1", vars={"host": "127.0.0.1"},
                                         timeout_s=1.5))
        assert isinstance(outcome.exception, AgentTimeoutError)
        assert valid(outcome.result_path)["status"] == "timeout"
        assert _proctree.marked(outcome.run_id) == set()

    async def test_no_command_configured(self, settings: Any) -> None:
        """An agent with no configured command is unavailable, with the setting to set."""
        outcome = await CommandExecutor(settings, commands={}).run(
            AgentTask("daemon-restarter", "mac1", vars={"host": "127.0.0.1"}))
        assert isinstance(outcome.exception, AgentUnavailableError)
        assert "executor.commands.daemon-restarter" in outcome.error


class TestAuto:
    def test_api_key_picks_claude(self, settings: Any) -> None:
        """With an API key set, auto runs Claude."""
        assert explain_auto(settings, {"ANTHROPIC_API_KEY": "k"}) == (
            "claude", "ANTHROPIC_API_KEY is set")

    def test_base_url_picks_claude_without_showing_credentials(self, settings: Any) -> None:
        """A base URL counts as a reachable model; credentials in it are never shown."""
        choice, reason = explain_auto(settings, {
            "ANTHROPIC_BASE_URL": "http://user:pw@127.0.0.1:9999/x"})
        assert choice == "claude" and "127.0.0.1:9999" in reason and "pw" not in reason

    def test_logged_in_cli_picks_claude(self, settings: Any, tmp_path: Path) -> None:
        """Credentials in the Claude config dir count as a logged-in CLI."""
        (tmp_path / ".credentials.json").write_text("{}")
        choice, reason = explain_auto(settings, {"CLAUDE_CONFIG_DIR": str(tmp_path)})
        assert choice == "claude" and "logged in" in reason

    def test_nothing_picks_playbook(self, settings: Any, tmp_path: Path) -> None:
        """No key, URL or login: auto runs the playbooks, and says why."""
        choice, reason = explain_auto(settings, {"CLAUDE_CONFIG_DIR": str(tmp_path)})
        assert choice == "playbook" and "no model reachable" in reason

    def test_missing_cli_picks_playbook(self, settings: Any) -> None:
        """Without a Claude Code CLI, even a key cannot make auto pick claude."""
        settings.executor.claude.cli_path = "/nonexistent/claude"
        assert explain_auto(settings, {"ANTHROPIC_API_KEY": "k"})[0] == "playbook"

    def test_select_executor(self, settings: Any, monkeypatch: pytest.MonkeyPatch,
                             tmp_path: Path) -> None:
        """select_executor builds the named executor, resolving auto from the environment."""
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
        for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN",
                    "CLAUDE_CODE_OAUTH_TOKEN"):
            monkeypatch.delenv(key, raising=False)
        assert isinstance(select_executor(settings, "auto"), PlaybookExecutor)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
        assert isinstance(select_executor(settings, "auto"), ClaudeExecutor)
        assert isinstance(select_executor(settings, "command"), CommandExecutor)
        with pytest.raises(UsageError):
            select_executor(settings, "telepathy")
