"""Every agent with tools goes through the executor's sandbox — and none starts without one.

Through the seam (``Executor(settings, sandbox=RecordingSandbox())``, no bubblewrap needed):
what a command run, a Claude run and a play action ask their sandbox for; a machine where no
sandbox starts fails the run at once and holds code attempts at the gate (``no_sandbox``,
retried); ``healer doctor``, ``healer status`` and every start of the loop say so; only
``agents.sandbox: off`` runs agents unconfined, with a warning.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from healer.agents import AgentTask, CommandExecutor, PlaybookExecutor
from healer.agents.executors import availability, claude_cli
from healer.agents.sandbox import MODEL_API, Endpoint, NoSandbox, doctor_check
from healer.config import load_settings
from healer.core import gate
from healer.errors import AgentUnavailableError
from healer.testing import ScriptedModel, text
from healer.testing.sandbox import RecordingSandbox

AGENT = """\
import json, os, sys
open(os.path.join(os.environ["HEALER_CWD"], "touched"), "w").write("x")
json.dump({"schema_version": 1, "kind": os.environ["HEALER_KIND"],
           "target": os.environ["HEALER_TARGET"], "run_id": os.environ["HEALER_RUN_ID"],
           "status": "healed", "summary": "ran"}, open(sys.argv[1], "w"))
"""


class _Confining(NoSandbox):
    """Runs unconfined but counts as a sandbox (what prepare() decides a run's folder by)."""

    confined = True


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "tools" / "agent.py"
    path.parent.mkdir()
    path.write_text(AGENT)
    return path


def command(settings: Any, script: Path, box: Any) -> CommandExecutor:
    return CommandExecutor(settings, sandbox=box, commands={
        "daemon-restarter": [sys.executable, str(script), "{result_file}"]})


class TestWhatARunAsksFor:
    async def test_a_command_run_writes_its_checkout_and_run_folder_reaches_its_endpoints(
            self, settings: Any, script: Path, tmp_path: Path) -> None:
        box = RecordingSandbox()
        work = tmp_path / "checkout"
        work.mkdir()
        outcome = await command(settings, script, box).run(AgentTask(
            "daemon-restarter", "mac1", vars={"host": "10.0.0.7"}, cwd=str(work),
            network=("pypi.org:443",)))
        assert outcome.ok, outcome.error
        (call,) = box.calls
        run_dir = settings.state_path.resolve() / "agents" / "runs" / outcome.run_id
        assert call.cwd == str(work) and set(call.writable) == {str(work), str(run_dir)}
        assert str(script) in call.readable  # the configured command's own file
        assert {MODEL_API, Endpoint("pypi.org", 443), Endpoint("10.0.0.7", 8855),
                Endpoint("10.0.0.7", 22)} <= set(call.network)  # model, task, its peer
        assert call.env["HEALER_RUN_ID"] == outcome.run_id and "PATH" not in call.env

    async def test_a_read_only_run_only_reads_its_checkout(
            self, settings: Any, script: Path, tmp_path: Path) -> None:
        box = RecordingSandbox()
        await command(settings, script, box).run(AgentTask(
            "daemon-restarter", "mac1", vars={"host": "127.0.0.1"}, cwd=str(tmp_path),
            read_only=True))
        (call,) = box.calls
        assert str(tmp_path) not in call.writable and str(tmp_path) in call.readable

    async def test_a_run_without_a_checkout_works_in_an_empty_folder_of_its_own(
            self, settings: Any, script: Path) -> None:
        box = RecordingSandbox(_Confining())
        outcome = await command(settings, script, box).run(AgentTask(
            "daemon-restarter", "mac1", vars={"host": "127.0.0.1"}))
        (call,) = box.calls
        run_dir = settings.state_path.resolve() / "agents" / "runs" / outcome.run_id
        assert call.cwd == str(run_dir / "work") and (run_dir / "work" / "touched").exists()


class TestNoSandboxNoAgent:
    async def test_a_command_run_fails_at_once_and_nothing_runs(
            self, settings: Any, script: Path, tmp_path: Path) -> None:
        box = RecordingSandbox(unavailable="bubblewrap (bwrap) not found")
        outcome = await command(settings, script, box).run(AgentTask(
            "daemon-restarter", "mac1", vars={"host": "127.0.0.1"}, cwd=str(tmp_path)))
        assert isinstance(outcome.exception, AgentUnavailableError)
        assert "no sandbox for the agent: bubblewrap (bwrap) not found" in outcome.error
        assert box.calls == [] and not (tmp_path / "touched").exists()
        assert json.loads(Path(outcome.result_path).read_text())["status"] == "failed"

    async def test_a_claude_run_fails_before_the_cli_starts(
            self, settings: Any, tmp_path: Path) -> None:
        if claude_cli(settings) is None:
            pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")
        from healer.agents.claude import ClaudeExecutor

        with ScriptedModel([text("never")]) as model:
            started = time.monotonic()
            outcome = await ClaudeExecutor(
                settings, env=model.env(), sandbox=RecordingSandbox(unavailable="no bwrap")
            ).run(AgentTask("healing-agent", "fp1", cwd=str(tmp_path)))
        assert isinstance(outcome.exception, AgentUnavailableError)
        assert model.requests == [] and time.monotonic() - started < 10

    async def test_a_play_action_runs_in_the_sandbox_or_not_at_all(
            self, tmp_path: Path, script: Path) -> None:
        settings = load_settings(env={}, overrides={
            "state_dir": str(tmp_path / "state"), "results_dir": str(tmp_path / "results"),
            "play": {"actions": {"retry": [sys.executable, str(script), "{pod}"]}}})
        task = AgentTask("remediation-agent", "play-1", vars={
            "strategy": "retry", "pod": "/root/.ssh/id_rsa"})
        box = RecordingSandbox()
        outcome = await PlaybookExecutor(settings, sandbox=box).run(task)
        (call,) = box.calls
        assert call.argv[-1] == "/root/.ssh/id_rsa"  # a value from the agent's logs …
        assert "/root/.ssh/id_rsa" not in call.readable  # … is never shown because of it
        assert str(script) in call.readable and call.writable == (call.cwd,)
        assert call.cwd.endswith(f"/agents/runs/{outcome.run_id}/work")
        refused = await PlaybookExecutor(
            settings, sandbox=RecordingSandbox(unavailable="no bwrap")).run(task)
        assert isinstance(refused.exception, AgentUnavailableError)
        assert refused.status == "failed"


def no_bwrap(settings: Any) -> Any:
    settings.agents.sandbox_bwrap = "/nonexistent/bwrap"
    return settings


class TestTheGateAndTheOperator:
    def test_the_gate_holds_code_attempts_while_no_sandbox_starts(
            self, settings: Any) -> None:
        settings.executor.commands = {"healing-agent": [sys.executable, "-c", "pass"]}
        assert availability(no_bwrap(settings), "healing-agent", executor="command") == \
            gate.NO_SANDBOX
        assert gate.NO_SANDBOX in gate.RETRYABLE
        decision = gate.decide(gate.empty_admission(), "k", 0.0, gate.Policy(),
                               lambda: gate.NO_SANDBOX)
        assert decision.reason == gate.NO_SANDBOX and "healer doctor" in decision.message

    def test_a_playbook_needs_no_sandbox(self, settings: Any) -> None:
        assert availability(no_bwrap(settings), "channel-diagnoser",
                            executor="playbook") == ""

    def test_doctor_says_why_or_off(self, settings: Any) -> None:
        ok, detail = doctor_check(no_bwrap(settings))
        assert not ok and "/nonexistent/bwrap" in detail and "agents.sandbox: off" in detail
        settings.agents.sandbox = False
        ok, detail = doctor_check(settings)
        assert not ok and "unconfined" in detail

    def test_status_says_agents_wait(self, settings: Any) -> None:
        from healer.core.store import FileStore
        from healer.overview import overview, render

        data = overview(no_bwrap(settings), FileStore(settings.state_path))
        assert data["agents"]["sandbox"]["state"] == "unavailable"
        assert "agents WAIT: no sandbox" in render(data)

    def test_every_start_of_the_loop_warns_when_agents_run_unconfined(
            self, settings: Any, caplog: pytest.LogCaptureFixture) -> None:
        from healer.loop import warn_about_the_sandbox

        settings.agents.sandbox = False
        with caplog.at_level(logging.WARNING, "healer.loop"):
            warn_about_the_sandbox(settings)
        assert "UNCONFINED" in caplog.text

    async def test_an_unconfined_run_is_logged_as_such(
            self, settings: Any, script: Path, tmp_path: Path,
            caplog: pytest.LogCaptureFixture) -> None:
        settings.agents.sandbox = False
        ex = CommandExecutor(settings, commands={
            "daemon-restarter": [sys.executable, str(script), "{result_file}"]})
        with caplog.at_level(logging.WARNING):
            outcome = await ex.run(AgentTask("daemon-restarter", "mac1", cwd=str(tmp_path),
                                             vars={"host": "127.0.0.1"}))
        assert outcome.ok and f"run {outcome.run_id} runs UNCONFINED" in caplog.text
