"""How the dispatcher runs the healing agent: a small seam, so tests and executors plug in.

``AgentRunner`` is anything with ``available()`` (is there a model/command to run the agent
here? — the last gate) and ``async run(task) -> RunResult``. ``ExecutorRunner`` adapts healer's
executor runtime (``healer.agents.executors``: playbook / claude / command) when it is
installed; ``CommandRunner`` runs a configured argv directly (``executor.commands
["healing-agent"]``), which is also what tests use for a scripted "agent".

Every run gets ``HEALER_HEALING_RUN=1`` in its environment so that a report made from inside it
is refused by the recursion gate.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from healer.core.files import atomic_write_text

AGENT = "healing-agent"
HEALING_ENV = "HEALER_HEALING_RUN"
KILL_GRACE_S = 5.0


@dataclass(frozen=True)
class HealingTask:
    """One healing run: the sanitised report, the worktree, the limits."""

    attempt_id: str
    fingerprint: str
    report: Mapping[str, str]  # error_type, error_message, traceback, call_site, context, …
    cwd: Path
    branch: str
    timeout_s: float
    run_dir: Path  # where the prompt and the run log go (under the state dir)
    result_path: Path  # where the agent drops its result JSON (the results bus)
    env: Mapping[str, str] = field(default_factory=dict)


def result_path_for(results_dir: Path, fingerprint: str, now: float | None = None) -> Path:
    """``<results dir>/heal-healing-<fingerprint>-<epoch>.json`` (the bus's naming contract)."""
    return Path(results_dir) / f"heal-healing-{fingerprint}-{int(now or time.time())}.json"


@dataclass(frozen=True)
class RunResult:
    """How the agent run ended (the worktree tells what it did)."""

    ok: bool
    timed_out: bool = False
    error: str = ""
    exit_code: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class AgentRunner(Protocol):
    def available(self) -> bool: ...

    async def run(self, task: HealingTask) -> RunResult: ...


def agent_env(task: HealingTask) -> dict[str, str]:
    """The environment of a healing run: ours, plus the recursion marker."""
    env = dict(os.environ)
    env.update(task.env)
    env[HEALING_ENV] = "1"
    env["HEALER_ATTEMPT_ID"] = task.attempt_id
    return env


def render_prompt(task: HealingTask, *, executor: str = "command") -> str:
    """The healing-agent task prompt (``prompts/healing-agent.md.j2``)."""
    from healer.agents.context import ErrorReport, RunInfo
    from healer.agents.prompts import render_task

    r = task.report
    report = ErrorReport(
        error_type=r.get("error_type", ""), error_message=r.get("error_message", ""),
        fingerprint=task.fingerprint, traceback=r.get("traceback", ""),
        call_site=r.get("call_site", ""), context=r.get("context", ""),
        tool_name=r.get("tool_name", ""), severity=r.get("severity", ""))
    run = RunInfo(agent=AGENT, kind="healing", target=task.fingerprint, run_id=task.attempt_id,
                  result_path=str(task.result_path), cwd=str(task.cwd),
                  timeout_s=task.timeout_s, executor=executor, incident=task.fingerprint)
    return render_task(f"{AGENT}.md.j2", run, {"report": report, "branch": task.branch})


class CommandRunner:
    """Runs ``argv`` (no shell) with cwd in the worktree; ``{prompt_file}``, ``{result_file}``
    and ``{cwd}`` in it are substituted. Kills the whole process group on timeout."""

    def __init__(self, argv: list[str] | tuple[str, ...] | None):
        self.argv = list(argv or [])

    def available(self) -> bool:
        return bool(self.argv) and (shutil.which(self.argv[0]) is not None
                                    or Path(self.argv[0]).is_file())

    async def run(self, task: HealingTask) -> RunResult:
        if not self.available():
            return RunResult(False, error=f"no command configured for {AGENT}")
        task.run_dir.mkdir(parents=True, exist_ok=True)
        prompt_file = task.run_dir / "prompt.md"
        atomic_write_text(prompt_file, render_prompt(task))
        values = {"prompt_file": str(prompt_file), "result_file": str(task.result_path),
                  "cwd": str(task.cwd)}
        argv = [a.format_map(values) if "{" in a else a for a in self.argv]
        with open(task.run_dir / "agent.log", "ab") as log:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=task.cwd, env=agent_env(task), stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=log, start_new_session=True)
            try:
                code = await asyncio.wait_for(proc.wait(), timeout=task.timeout_s)
            except TimeoutError:
                await _kill_group(proc)
                return RunResult(False, timed_out=True, error=f"time limit of "
                                 f"{task.timeout_s:g} s exceeded", exit_code=proc.returncode)
            except asyncio.CancelledError:
                await _kill_group(proc)
                raise
        if code != 0:
            return RunResult(False, error=f"the agent exited with code {code}", exit_code=code)
        return RunResult(True, exit_code=0)


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(proc.wait(), timeout=KILL_GRACE_S)
            return
        except TimeoutError:
            continue


def runner_for(settings: Any) -> AgentRunner:
    """The runner the settings ask for (``executor.default``)."""
    argv = settings.executor.commands.get(AGENT)
    kind = settings.executor.default
    if kind == "command" or (kind in ("auto", "playbook") and argv):
        return CommandRunner(argv)
    try:
        from healer.selfheal.executor_adapter import ExecutorRunner
    except ImportError:
        return CommandRunner(argv)
    return ExecutorRunner(settings)
