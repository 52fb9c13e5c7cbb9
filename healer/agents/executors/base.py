"""The executor interface and the run every executor shares (slot, timeout, result)."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from healer.agents import results
from healer.agents.budget import Budget, budget_kind, clean_usd
from healer.agents.budget import tell as budget_tell
from healer.agents.context import RunInfo, context_from_vars, peer_endpoints
from healer.agents.definitions import AgentDefinition, get_definition
from healer.agents.prompts import DEFAULT_TEMPLATE, render_task, templates
from healer.agents.sandbox import Sandbox, Wrapped, checkout_paths, parse_endpoint, sandbox_for
from healer.agents.task import AgentTask, RunOutcome, new_run_id
from healer.core import safedirs
from healer.core.bus.results import read_result
from healer.core.files import atomic_write_bytes
from healer.core.slots import Slot, SlotPool
from healer.errors import (
    AgentResultError,
    AgentTimeoutError,
    AgentUnavailableError,
    ExecutorError,
    SlotWaitError,
    UsageError,
)

log = logging.getLogger("healer.agents.executors")  # one logger for the package
# Set while a run executes: a run started from inside it (master-healer starts the fleet's
# repair agents) works under its parent's slot instead of waiting for one the parent holds.
_IN_RUN: contextvars.ContextVar[bool] = contextvars.ContextVar("healer_in_agent_run",
                                                              default=False)

EXECUTORS = ("playbook", "claude", "command")
KEEP_RUN_DIRS = 200  # run folders (prompt, transcript, output) kept under the state dir


def deferred_error(message: str, *, retry_at: float, failure: Mapping[str, Any],
                   agent: str = "", run_id: str = "") -> AgentResultError:
    """The error of a run that ends ``deferred``: the model API kept answering with a
    transient failure (rate limit, overload, server error, unreachable) until the run's time
    limit — not a failed attempt. It carries when to try again (``retry_at``, Unix seconds)
    and the failure (``failure``: its code, class and the CLI's words); ``deferred_until``
    tells it from other result errors."""
    error = AgentResultError(message, agent=agent, run_id=run_id)
    error.retry_at = float(retry_at)  # type: ignore[attr-defined]
    error.failure = dict(failure)  # type: ignore[attr-defined]
    return error


def deferred_until(error: BaseException | None) -> float | None:
    """``retry_at`` of a run's error made by ``deferred_error`` (None for any other)."""
    value = getattr(error, "retry_at", None)
    return float(value) if isinstance(value, int | float) and not isinstance(
        value, bool) else None


@dataclass
class Prepared:
    """A task with every default filled in, its definition, and where its result goes."""

    task: AgentTask
    definition: AgentDefinition
    run: RunInfo
    result_path: Path  # where the result is published on the bus
    staged_path: Path  # where an agent writes it: in the run's folder, out of the bus's sight
    run_dir: Path
    context: dict[str, Any]
    timeout_s: float
    started: float
    prompts_dir: Path | None = None
    # Whether the sandbox lets the run change ``run.cwd``: the task named it and is not
    # read-only (a run without a checkout of its own works in an empty folder of its run).
    writable_cwd: bool = True

    prompt_text: str | None = None
    # What the run cost so far, as the model API reported it (the Claude executor adds each
    # launch's ``total_cost_usd``); a command agent's own ``cost_usd`` is added at the end.
    cost_usd: float = 0.0
    # Set by an executor while it waits out a transient model API failure (cleared once the
    # model answers again): the run's time limit passing meanwhile ends it deferred.
    deferral: AgentResultError | None = None  # made by ``deferred_error``

    def prompt(self) -> str:
        """The task prompt: given, or rendered from the agent's template (once)."""
        if self.prompt_text is None:
            if self.task.prompt is not None:
                self.prompt_text = self.task.prompt
            else:
                template = self.task.template or self.definition.template
                if not self.task.template and template not in templates(self.prompts_dir):
                    template = DEFAULT_TEMPLATE  # a user's agent without a template of its own
                self.prompt_text = render_task(template, self.run, self.context,
                                               folder=self.prompts_dir)
        return self.prompt_text


def secret_env_names(settings: Any) -> set[str]:
    """Environment variables that hold healer's secrets; agents never inherit them."""
    names: set[str] = set()

    def visit(obj: Any) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                visit(value)
            elif f.metadata.get("secret") and f.metadata.get("env"):
                names.add(f.metadata["env"])

    visit(settings)
    names.add(settings.forge.token_env)
    names.update(k for k in os.environ if k.startswith("HEALER__"))
    return names


def run_env(prep: Prepared) -> dict[str, str]:
    """What every agent process is told about its run (also the marker to find its processes)."""
    return {
        "HEALER_RUN_ID": prep.run.run_id, "HEALER_AGENT": prep.run.agent,
        "HEALER_KIND": prep.run.kind, "HEALER_TARGET": prep.run.target,
        "HEALER_INCIDENT": prep.run.incident, "HEALER_RESULT_FILE": prep.run.result_path,
        "HEALER_CWD": prep.run.cwd, "HEALER_READ_ONLY": "1" if prep.run.read_only else "0",
    }


def _prune(root: Path, keep: int) -> None:
    try:
        dirs = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    for old in dirs[:-keep] if len(dirs) > keep else []:
        shutil.rmtree(old, ignore_errors=True)


class Executor(abc.ABC):
    """Runs agent tasks; subclasses implement ``_execute``.

    ``sandbox`` is where an executor's commands run (default: the settings' — bubblewrap, or
    none with ``agents.sandbox: off``); ``confine`` wraps one command of a run in it."""

    name: ClassVar[str]
    agent_writes_result: ClassVar[bool] = True  # False: healer writes what _execute returns
    runs_commands: ClassVar[bool] = True  # False: only healer's own code runs (playbooks)
    spends: ClassVar[bool] = True  # False: its runs cost nothing, so no budget holds them

    def __init__(self, settings: Any, *, agents_dir: Path | str | None = None,
                 prompts_dir: Path | str | None = None, sandbox: Sandbox | None = None,
                 budget: Budget | None = None):
        self.settings = settings
        self.agents_dir = agents_dir
        self.prompts_dir = Path(prompts_dir) if prompts_dir else None
        self.sandbox: Sandbox = sandbox if sandbox is not None else sandbox_for(
            settings, secrets=secret_env_names(settings))
        self.budget = budget or Budget(settings)  # healer.agents.budget

    # -- the shared run ------------------------------------------------------------------

    def prepare(self, task: AgentTask, *, create: bool = True) -> Prepared:
        """Fill in defaults, check the task, reserve the result path (raises UsageError).

        ``create=False`` only works out the run (for showing its prompt): no folders made.
        """
        definition = get_definition(task.agent, self.agents_dir)
        kind = task.kind or definition.kind
        run_id = task.run_id or new_run_id()
        runs_root = self.settings.state_path.resolve() / "agents" / "runs"
        run_dir = runs_root / run_id
        own = task.cwd is not None
        confined = self.runs_commands and self.sandbox.confined
        if own:
            cwd = str(Path(task.cwd or ".").resolve())
        else:  # no checkout: an empty folder of the run's in the sandbox, else where we are
            cwd = str(run_dir / "work") if confined else str(Path.cwd().resolve())
        if own and not Path(cwd).is_dir():
            raise UsageError(f"working directory {cwd!r} does not exist")
        timeout = float(task.timeout_s or self.settings.executor.timeout_s)
        task = dataclasses.replace(task, kind=kind, cwd=cwd, timeout_s=timeout, run_id=run_id)
        results_dir = self.settings.results_path.resolve()
        path = results.reserve_result_path(results_dir, kind, task.target)
        if create:
            # Private, healer's own, no symlink followed (UnsafeDirError otherwise).
            safedirs.ensure_private_dir(results_dir)
            run_parts = ("agents", "runs", run_id) if own else ("agents", "runs", run_id, "work")
            safedirs.ensure_private_dir(self.settings.state_path, *run_parts)
            _prune(runs_root, KEEP_RUN_DIRS)
        staged = run_dir / path.name
        run = RunInfo(agent=task.agent, kind=kind, target=task.target, run_id=task.run_id,
                      result_path=str(staged if self.agent_writes_result else path), cwd=cwd,
                      timeout_s=timeout, executor=self.name,
                      incident=task.incident, read_only=task.read_only)
        context = {**context_from_vars(task.agent, task.target, task.vars,
                                       settings=self.settings), **task.context}
        prep = Prepared(task=task, definition=definition, run=run, result_path=path,
                        staged_path=staged, run_dir=run_dir, context=context, timeout_s=timeout,
                        started=time.monotonic(), prompts_dir=self.prompts_dir,
                        writable_cwd=not task.read_only)
        if self.agent_writes_result:
            prep.prompt()  # a template that does not render fails here, before the run
        return prep

    async def run(self, task: AgentTask, *,
                  on_prepared: Callable[[Prepared], None] | None = None) -> RunOutcome:
        """Run ``task`` to the end; always leaves a result file (see the module doc).

        ``on_prepared`` is called once the run id and result path are fixed, before any work.
        """
        prep = self.prepare(task)
        if on_prepared is not None:
            on_prepared(prep)
        log.info("agent %s run %s (%s) started for %s, timeout %.0f s", prep.run.agent,
                 prep.run.run_id, self.name, prep.run.target, prep.timeout_s)
        produced: Mapping[str, Any] | None = None
        error: ExecutorError | None = None
        slot: Slot | None = None
        holding = None
        try:
            if self.spends:
                await self._within_budget(prep)
            if not _IN_RUN.get():
                slot = await self._slot(prep)
            holding = _IN_RUN.set(True)
            prep.started = time.monotonic()  # the run's time starts once it may run
            produced = await asyncio.wait_for(self._execute(prep), prep.timeout_s)
        except SlotWaitError as exc:
            error = exc
        except TimeoutError:
            error = prep.deferral or AgentTimeoutError(
                f"no result within {prep.timeout_s:g} s; the run was stopped",
                timeout_s=prep.timeout_s, agent=prep.run.agent, run_id=prep.run.run_id)
        except ExecutorError as exc:
            error = exc
        except asyncio.CancelledError:
            self._conclude(prep, None, ExecutorError("cancelled", agent=prep.run.agent,
                                                     run_id=prep.run.run_id))
            self._count(prep, None)
            raise
        except UsageError:
            raise
        except Exception as exc:  # a bug in a playbook or executor must still end in a result
            log.exception("agent %s run %s crashed", prep.run.agent, prep.run.run_id)
            error = ExecutorError(f"{type(exc).__name__}: {exc}", agent=prep.run.agent,
                                  run_id=prep.run.run_id)
        finally:
            if holding is not None:
                _IN_RUN.reset(holding)
            if slot is not None:
                slot.release()
        outcome = self._conclude(prep, produced, error)
        outcome.cost_usd = await asyncio.to_thread(self._count, prep, outcome.result)
        log.info("agent %s run %s finished: %s in %.1f s%s", outcome.agent, outcome.run_id,
                 outcome.status, outcome.duration_s, f" ({outcome.error})" if outcome.error
                 else "")
        return outcome

    # -- what runs cost ------------------------------------------------------------------

    async def _within_budget(self, prep: Prepared) -> None:
        """Raise the deferred error when the day's budget for the run's kind (or over all
        kinds) is spent (``healer.agents.budget``); the first such run of the day tells a
        person."""
        kind = budget_kind(prep.run.agent)
        over = await asyncio.to_thread(self.budget.over, kind)
        if over is None:
            return
        await budget_tell(self.settings, self.budget, over, kind=kind,
                          run=f"{prep.run.agent} {prep.run.run_id}")
        raise deferred_error(over.message(kind), retry_at=over.retry_at, failure={},
                             agent=prep.run.agent, run_id=prep.run.run_id)

    def cost(self, prep: Prepared, result: Mapping[str, Any] | None) -> float:
        """What the run cost, as far as anything reported it (``prep.cost_usd``)."""
        return clean_usd(prep.cost_usd)

    def _count(self, prep: Prepared, result: Mapping[str, Any] | None) -> float:
        """Add the run's cost to the day's spend; returns it (never raises: a run's outcome
        stands whatever the store says)."""
        usd = self.cost(prep, result) if self.spends else 0.0
        if usd:
            try:
                self.budget.spend(budget_kind(prep.run.agent), usd, run_id=prep.run.run_id)
            except Exception:
                log.exception("the cost of run %s ($%.4f) could not be counted",
                              prep.run.run_id, usd)
        return usd

    async def _slot(self, prep: Prepared) -> Slot:
        """One of the machine's ``executor.max_concurrent`` agent slots, shared by every kind
        of run and every healer process (``healer.core.slots``)."""
        wait = self.settings.executor.slot_wait_s
        try:
            return await SlotPool.agents(self.settings).acquire(
                {"run_id": prep.run.run_id, "agent": prep.run.agent, "kind": prep.run.kind,
                 "target": prep.run.target}, timeout=wait)
        except TimeoutError as exc:
            raise SlotWaitError(f"no free agent slot within {wait:g} s (all "
                                f"{self.settings.executor.max_concurrent} busy); not run",
                                agent=prep.run.agent, run_id=prep.run.run_id) from exc

    def confine(self, prep: Prepared, argv: Sequence[str], *, env: Mapping[str, str],
                readable: Sequence[str] = (), network: Sequence[str] = ()) -> Wrapped:
        """``argv`` of run ``prep`` wrapped in the executor's sandbox: writable its run folder
        and (unless read-only) its checkout with the checkout's git dir; reachable
        ``network``, the task's own endpoints and those of the peers its context names.
        ``env`` is what healer sets for the run. Raises ``AgentUnavailableError`` where no
        sandbox can start; an unconfined run (``agents.sandbox: off``) is logged as such."""
        ids = {"agent": prep.run.agent, "run_id": prep.run.run_id}
        why = self.sandbox.unavailable()
        if why:
            raise AgentUnavailableError(f"no sandbox for the agent: {why}", **ids)
        if not self.sandbox.confined:
            log.warning("agent %s run %s runs UNCONFINED (agents.sandbox: off): it can read, "
                        "write and reach whatever healer can", prep.run.agent, prep.run.run_id)
        cwd = prep.run.cwd
        writable, shown = [str(prep.run_dir)], list(readable)
        if prep.writable_cwd:
            extra_rw, extra_ro = checkout_paths(cwd)
            writable += [cwd, *extra_rw]
            shown += extra_ro
        else:
            shown.append(cwd)
        wanted = [*network, *prep.task.network, *peer_endpoints(prep.context)]
        endpoints = []
        for item in dict.fromkeys(wanted):
            try:
                endpoints.append(parse_endpoint(item))
            except ValueError as exc:
                log.warning("agent %s run %s: endpoint left out: %s", prep.run.agent,
                            prep.run.run_id, exc)
        return self.sandbox.wrap(argv, cwd=cwd, env=env, writable=writable, readable=shown,
                                 network=endpoints)

    @abc.abstractmethod
    async def _execute(self, prep: Prepared) -> Mapping[str, Any] | None:
        """Do the work. Return result fields (healer writes them) or None (the agent wrote its
        own file). Raise an ``ExecutorError`` on failure."""

    # -- ending a run --------------------------------------------------------------------

    def _base(self, prep: Prepared) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema_version": 1, "kind": prep.run.kind, "target": prep.run.target,
            "agent": prep.run.agent[:64], "executor": self.name, "run_id": prep.run.run_id,
            "timestamp": results.now_iso(),
            "duration_s": round(time.monotonic() - prep.started, 3),
        }
        if prep.run.incident:
            doc["incident"] = prep.run.incident
        return doc

    def _outcome(self, prep: Prepared, doc: dict[str, Any] | None, status: str,
                 error: ExecutorError | None, message: str = "") -> RunOutcome:
        return RunOutcome(
            run_id=prep.run.run_id, agent=prep.run.agent, executor=self.name, status=status,
            result_path=str(prep.result_path), result=doc, error=message or (str(error) if
                                                                             error else ""),
            duration_s=time.monotonic() - prep.started, kind=prep.run.kind,
            target=prep.run.target, incident=prep.run.incident, exception=error)

    def _conclude(self, prep: Prepared, produced: Mapping[str, Any] | None,
                  error: ExecutorError | None) -> RunOutcome:
        why = ""
        if produced is not None and error is None:
            doc = {**self._base(prep), **dict(produced)}
            try:
                written = results.write_result(prep.result_path, doc)
                return self._outcome(prep, written, written["status"], None)
            except ValueError as exc:
                error = AgentResultError(f"the playbook returned an invalid result: {exc}",
                                         agent=prep.run.agent, run_id=prep.run.run_id)
        elif self.agent_writes_result:
            staged = prep.staged_path.exists() or prep.staged_path.is_symlink()
            data, why = read_result(prep.staged_path if staged else prep.result_path)
            if data is not None:
                why = results.problems(data, prep.run.kind, prep.run.target)
                if not why:
                    # The agent's own valid result stands, even if the process failed after.
                    if staged:
                        # Published in one atomic step (also across filesystems).
                        atomic_write_bytes(prep.result_path, prep.staged_path.read_bytes())
                    return self._outcome(prep, data, str(data["status"]), error)
                why = f"the agent's result is invalid ({why})"
            if staged:
                self._set_aside(prep)
        if error is None:
            error = AgentResultError(why or "no result", agent=prep.run.agent,
                                     run_id=prep.run.run_id)
        message = str(error) if not why or why in str(error) or deferred_until(
            error) is not None else f"{error}; {why}"
        retry_at = deferred_until(error)
        status = ("timeout" if isinstance(error, AgentTimeoutError) else
                  results.DEFERRED if retry_at is not None else "failed")
        doc = {**self._base(prep), "status": status,
               "summary": results.clip(f"{prep.run.agent} run {prep.run.run_id} {status}: "
                                       f"{message}", 4000),
               "error": results.clip(message)}
        if retry_at is not None:
            doc["retry_at"] = round(max(0.0, retry_at), 3)
        failure = getattr(error, "failure", None)  # a model API failure that ended the run
        if isinstance(failure, Mapping) and (fields := _failure_fields(failure)):
            doc["failure"] = fields
        written = results.write_result(prep.result_path, doc)
        return self._outcome(prep, written, status, error, message)

    def _set_aside(self, prep: Prepared) -> None:
        """Keep an unusable agent result for debugging, out of the bus's way."""
        with contextlib.suppress(OSError):
            os.replace(prep.staged_path, prep.staged_path.with_name("invalid-result.json"))


def _failure_fields(failure: Mapping[str, Any]) -> dict[str, Any]:
    """A failure as the result schema holds it (known keys, cut to size; {} without a code)."""
    if not failure.get("code"):
        return {}
    out: dict[str, Any] = {}
    for key in ("code", "class", "title", "detail", "provider"):
        if failure.get(key):
            out[key] = results.clip(str(failure[key]), 2000 if key == "detail" else 200)
    if isinstance(failure.get("status"), int) and 100 <= failure["status"] <= 599:
        out["status"] = failure["status"]
    if isinstance(failure.get("retry_at"), int | float) and failure["retry_at"] >= 0:
        out["retry_at"] = failure["retry_at"]
    return out
