"""How the dispatcher runs the healing agent: a small seam, so tests and executors plug in.

``AgentRunner`` is anything with ``available()`` (is there a model or command to run the agent
here? — the last gate) and ``async run(task) -> RunResult``. ``ExecutorRunner`` runs the
``healing-agent`` definition through healer's executor runtime (``healer.agents.executors``:
command / claude / playbook), with its cwd in the worktree and the attempt's time limit.

Every run gets ``HEALER_HEALING_RUN=1`` in its environment so that a report made from inside it
(its Bash tool, an MCP server it starts) is refused by the recursion gate.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

AGENT = "healing-agent"
HEALING_ENV = "HEALER_HEALING_RUN"


@dataclass(frozen=True)
class HealingTask:
    """One healing run: the sanitised report, the worktree, the limits."""

    attempt_id: str
    fingerprint: str
    report: Mapping[str, str]  # error_type, error_message, traceback, call_site, context, …
    cwd: Path
    branch: str
    timeout_s: float
    result_path: Path  # the result file on the results bus (the executor decides the name)
    env: Mapping[str, str] = field(default_factory=dict)
    run_id: str = ""  # one per iteration (default: the attempt id)
    # prompts/code-fix.md.j2's variables from the attempt flow (iteration, last rejection,
    # living context), over task_context's defaults
    extra: Mapping[str, Any] = field(default_factory=dict)


def result_path_for(results_dir: Path, fingerprint: str, now: float | None = None) -> Path:
    """``<results dir>/heal-healing-<fingerprint>-<epoch>.json`` (the bus's naming contract)."""
    return Path(results_dir) / f"heal-healing-{fingerprint}-{int(now or time.time())}.json"


@dataclass(frozen=True)
class RunResult:
    """How the agent run ended (the worktree tells what it did). ``detail["hold"]``: the hold
    of healer's model access that stopped it (``healer.agents.limits.held_by``), if any."""

    ok: bool
    timed_out: bool = False
    error: str = ""
    exit_code: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class AgentRunner(Protocol):
    def available(self) -> bool | str:
        """True when the agent can run here; else False (no model) or the gate's reason
        (``no_sandbox``)."""
        ...

    async def run(self, task: HealingTask) -> RunResult: ...


def render_prompt(task: HealingTask, *, executor: str = "command") -> str:
    """The healing-agent task prompt (``prompts/healing-agent.md.j2``, the code-fix family) as
    the executor renders it."""
    from healer.agents.context import RunInfo
    from healer.agents.prompts import render_task

    run = RunInfo(agent=AGENT, kind="healing", target=task.fingerprint,
                  run_id=task.run_id or task.attempt_id,
                  result_path=str(task.result_path), cwd=str(task.cwd),
                  timeout_s=task.timeout_s, executor=executor, incident=task.fingerprint)
    return render_task(f"{AGENT}.md.j2", run, task_context(task))


class ExecutorRunner:
    """The healing agent through healer's executor runtime (``executor.default``).

    ``command`` runs ``executor.commands["healing-agent"]`` (or ``"*"``); ``claude`` runs
    Claude Code; ``auto`` picks claude when a model is reachable; ``playbook`` has no healing
    playbook (no model → the ``no_model`` gate).
    """

    def __init__(self, settings: Any, *, executor: str | None = None,
                 env: Mapping[str, str] | None = None):
        self.settings = settings
        self.choice = executor or settings.executor.default
        self.env = dict(env or {})

    def _env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def resolved(self) -> str:
        """The executor that would run (``auto`` resolved)."""
        if self.choice != "auto":
            return self.choice
        from healer.agents.executors import explain_auto

        return explain_auto(self.settings, self._env())[0]

    def available(self) -> bool | str:
        from healer.agents.executors import availability

        return availability(self.settings, AGENT, self.env, self.choice) or True

    async def run(self, task: HealingTask) -> RunResult:
        from healer.agents import dispatcher
        from healer.agents.task import AgentTask

        env = {**self.env, **task.env, HEALING_ENV: "1", "HEALER_ATTEMPT_ID": task.attempt_id}
        agent_task = AgentTask(
            agent=AGENT, target=task.fingerprint, kind="healing", context=task_context(task),
            cwd=str(task.cwd), timeout_s=task.timeout_s, incident=task.fingerprint,
            run_id=task.run_id or task.attempt_id)
        # This runs in the attempt's worker process, which has no bus: the dispatcher reads
        # the run's result file once the run has ended.
        outcome = await dispatcher(self.settings).run(agent_task, executor=self.resolved(),
                                                      env=env)
        from healer.agents.limits import held_by

        return RunResult(ok=outcome.ok, timed_out=outcome.status == "timeout",
                         error=outcome.error, detail={"run_id": outcome.run_id,
                                                      "status": outcome.status,
                                                      "executor": outcome.executor,
                                                      "result_path": outcome.result_path,
                                                      "summary": str((outcome.result or {})
                                                                     .get("summary") or ""),
                                                      "hold": held_by(outcome.result)})


def task_context(task: HealingTask) -> dict[str, Any]:
    """The healing-agent template's variables (prompts/code-fix.md.j2): the sanitised report,
    the branch, and the attempt flow's ``extra`` (iteration, last rejection, living context)
    over a first iteration's defaults."""
    return {"report": error_report(task), "branch": task.branch, "source": "report_error",
            "living": None, "sentry": {}, "max_blast_radius": 5, "iteration": 1,
            "max_iterations": 1, "previous_failure": "", **task.extra}


def error_report(task: HealingTask) -> Any:
    """The sanitised report as the healing-agent prompt template reads it."""
    from healer.agents.context import ErrorReport

    r = task.report
    return ErrorReport(
        error_type=r.get("error_type", ""), error_message=r.get("error_message", ""),
        fingerprint=task.fingerprint, traceback=r.get("traceback", ""),
        call_site=r.get("call_site", ""), context=r.get("context", ""),
        tool_name=r.get("tool_name", ""), severity=r.get("severity", ""))


def runner_for(settings: Any) -> AgentRunner:
    """The runner the settings ask for."""
    return ExecutorRunner(settings)
