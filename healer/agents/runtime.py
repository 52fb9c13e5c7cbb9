"""Background agent runs: ids, timeouts, cancellation, a bounded number in flight.

``AgentRunner`` is what the rest of healer uses to start agents::

    runner = AgentRunner(settings)                     # executor from settings (auto)
    handle = runner.submit(AgentTask("channel-diagnoser", "mac1", vars={"host": "127.0.0.2"}))
    outcome = await runner.wait(handle.run_id)         # or runner.cancel(handle.run_id)

Incident kinds do not call it themselves: they go through ``dispatcher(settings, bus=...)``,
the core ``Dispatcher`` over an ``AgentRunner``, whose outcome is the result on the bus.

At most ``settings.executor.max_concurrent`` runs execute at once on the whole machine: every
executor takes one of the machine's agent slots (``healer.core.slots``), across processes. A
runner given its own ``max_concurrent`` also queues locally (at most ``max_queued`` waiting).
Each run's timeout is enforced by its executor, which also writes the result file — also for
a run that is cancelled, queued or running.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from healer.agents.executors import Executor, Prepared, select_executor
from healer.agents.task import AgentTask, RunOutcome, new_run_id
from healer.core.bus.results import read_result
from healer.core.dispatch import GRACE_S, Dispatcher
from healer.errors import ExecutorError, HealerError

log = logging.getLogger(__name__)

State = Literal["queued", "running", "done", "cancelled", "error"]
KEEP_FINISHED = 500  # finished handles remembered for wait()/status


@dataclass
class RunHandle:
    """One submitted run and where it stands."""

    run_id: str
    task: AgentTask
    executor: str
    state: State = "queued"
    submitted_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    result_path: str = ""
    outcome: RunOutcome | None = None
    error: BaseException | None = None  # a task that could not start (UsageError, ...)
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.state in ("done", "cancelled", "error")

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "agent": self.task.agent, "target": self.task.target,
                "executor": self.executor, "state": self.state,
                "submitted_at": self.submitted_at, "started_at": self.started_at,
                "finished_at": self.finished_at, "result_path": self.result_path,
                "status": self.outcome.status if self.outcome else "",
                "error": str(self.error) if self.error else (
                    self.outcome.error if self.outcome else "")}


class AgentRunner:
    """Owns background agent runs (see the module doc)."""

    def __init__(self, settings: Any, *, executor: Executor | str | None = None,
                 max_concurrent: int | None = None, max_queued: int = 256,
                 executor_kw: dict[str, Any] | None = None):
        self.settings = settings
        self._default = executor
        self._executor_kw = executor_kw or {}
        self._executors: dict[str, Executor] = {}
        # None: no local queue — the machine's agent slots are the bound (module doc). A local
        # one would also deadlock a run that starts runs of its own (master-healer).
        self.max_concurrent = max_concurrent
        self.max_queued = max_queued
        self._slots: asyncio.Semaphore | None = None
        self._handles: OrderedDict[str, RunHandle] = OrderedDict()

    def executor(self, name: Executor | str | None = None,
                 env: dict[str, str] | None = None) -> Executor:
        """The executor for ``name`` (default: the runner's, else the settings'); ``env`` adds
        to the environment of a command or claude run (an executor of its own)."""
        if isinstance(name, Executor):
            return name
        if name is None and isinstance(self._default, Executor):
            return self._default
        key = name or (self._default if isinstance(self._default, str) else None) or \
            self.settings.executor.default
        if env:
            from healer.agents.executors import explain_auto

            if key == "auto":
                key = explain_auto(self.settings, {**os.environ, **env})[0]
            kw = {"env": env} if key in ("command", "claude") else {}
            return select_executor(self.settings, key, **{**self._executor_kw, **kw})
        if key not in self._executors:
            self._executors[key] = select_executor(self.settings, key, **self._executor_kw)
        return self._executors[key]

    # -- submitting ----------------------------------------------------------------------

    @property
    def queued(self) -> int:
        return sum(1 for h in self._handles.values() if h.state == "queued")

    @property
    def running(self) -> int:
        return sum(1 for h in self._handles.values() if h.state == "running")

    def submit(self, task: AgentTask, *, executor: Executor | str | None = None,
               env: dict[str, str] | None = None,
               on_done: Callable[[RunOutcome], None] | None = None) -> RunHandle:
        """Start ``task`` in the background (it waits for a free slot); returns its handle."""
        if self.queued >= self.max_queued:
            raise ExecutorError(f"agent queue is full ({self.max_queued} runs waiting)",
                                agent=task.agent)
        if not task.run_id:
            task = dataclasses.replace(task, run_id=new_run_id())
        if task.run_id in self._handles:
            raise ExecutorError(f"run id {task.run_id!r} is already in use", agent=task.agent,
                                run_id=task.run_id)
        ex = self.executor(executor, env)
        if self._slots is None and self.max_concurrent:
            self._slots = asyncio.Semaphore(self.max_concurrent)
        handle = RunHandle(run_id=task.run_id, task=task, executor=ex.name)
        self._handles[task.run_id] = handle
        handle._task = asyncio.get_running_loop().create_task(
            self._guarded(handle, ex, on_done), name=f"agent-{task.run_id}")
        self._forget_old()
        return handle

    async def _guarded(self, handle: RunHandle, ex: Executor,
                       on_done: Callable[[RunOutcome], None] | None) -> None:
        def prepared(prep: Prepared) -> None:
            handle.result_path = str(prep.result_path)

        try:
            async with self._slots or contextlib.nullcontext():
                handle.state = "running"
                handle.started_at = time.time()
                handle.outcome = await ex.run(handle.task, on_prepared=prepared)
                handle.state = "done"
        except asyncio.CancelledError:
            handle.state = "cancelled"
            handle.outcome = self._cancelled_outcome(handle, ex)
        except HealerError as exc:
            handle.state = "error"
            handle.error = exc
        except Exception as exc:  # never lose a run silently
            log.exception("agent run %s failed to run", handle.run_id)
            handle.state = "error"
            handle.error = exc
        finally:
            handle.finished_at = time.time()
        if on_done is not None and handle.outcome is not None:
            try:
                on_done(handle.outcome)
            except Exception:
                log.exception("agent run %s: on_done callback failed", handle.run_id)

    def _cancelled_outcome(self, handle: RunHandle, ex: Executor) -> RunOutcome:
        started = handle.started_at or time.time()
        doc: dict[str, Any] | None = None
        if not handle.result_path:
            # Cancelled while queued: the run never started, but whoever waits on the bus
            # must still hear that it will not come.
            with contextlib.suppress(HealerError, OSError, ValueError):
                prep = ex.prepare(handle.task)
                handle.result_path = str(prep.result_path)
                doc = ex._conclude(prep, None, ExecutorError(
                    "cancelled before it started", agent=handle.task.agent,
                    run_id=handle.run_id)).result
        else:
            doc, _ = read_result(Path(handle.result_path))
        return RunOutcome(
            run_id=handle.run_id, agent=handle.task.agent, executor=ex.name,
            status=str(doc.get("status", "failed")) if doc else "failed",
            result_path=handle.result_path, result=doc, error="cancelled",
            duration_s=time.time() - started, kind=handle.task.kind,
            target=handle.task.target, incident=handle.task.incident,
            exception=ExecutorError("cancelled", agent=handle.task.agent,
                                    run_id=handle.run_id))

    def _forget_old(self) -> None:
        finished = [k for k, h in self._handles.items() if h.done]
        for key in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self._handles[key]

    # -- following and stopping ----------------------------------------------------------

    def get(self, run_id: str) -> RunHandle | None:
        return self._handles.get(run_id)

    def handles(self, *, active_only: bool = False) -> list[RunHandle]:
        return [h for h in self._handles.values() if not (active_only and h.done)]

    async def wait(self, run_id: str, timeout: float | None = None) -> RunOutcome:
        """The run's outcome once it ends. A task that could not start re-raises its error."""
        handle = self._handles.get(run_id)
        if handle is None or handle._task is None:
            raise ExecutorError(f"no run {run_id!r}", run_id=run_id)
        await asyncio.wait_for(asyncio.shield(handle._task), timeout)
        if handle.error is not None:
            raise handle.error
        assert handle.outcome is not None
        return handle.outcome

    async def run(self, task: AgentTask, *, executor: Executor | str | None = None) -> RunOutcome:
        """Submit ``task`` and wait for its outcome."""
        return await self.wait(self.submit(task, executor=executor).run_id)

    def cancel(self, run_id: str) -> bool:
        """Cancel a queued or running run (its process tree is killed); False if unknown/done."""
        handle = self._handles.get(run_id)
        if handle is None or handle.done or handle._task is None:
            return False
        handle._task.cancel()
        return True

    async def aclose(self, *, cancel: bool = True, timeout: float = 30.0) -> None:
        """Stop: cancel (or wait for) every run still queued or running."""
        tasks = [h._task for h in self._handles.values() if h._task and not h.done]
        if cancel:
            for t in tasks:
                t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)


def dispatcher(settings: Any, *, bus: Any = None, executor: Executor | str | None = None,
               grace_s: float | None = None) -> Dispatcher:
    """The core ``Dispatcher`` over an ``AgentRunner``: how every incident kind runs agents.

    ``bus`` is the running results bus (in ``healer.loop``); without one the dispatcher reads
    each run's result file once the run has ended.
    """
    grace = grace_s if grace_s is not None else GRACE_S + settings.bus.rescan_s
    return Dispatcher(AgentRunner(settings, executor=executor), bus=bus, grace_s=grace)
