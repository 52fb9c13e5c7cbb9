"""The dispatcher: every agent run of every incident kind starts here, and ends on the bus.

A kind hands the dispatcher a task; the dispatcher starts it through the runner
(``healer.agents.AgentRunner``: the one place runs are queued, time-limited and held to
``executor.max_concurrent``) and then waits for the run's **result document on the results
bus**. That document — not a value the runner hands back in memory — is what the kind's
verifier gets. So a result written by someone else (an agent that outlived its process, a run
finished by hand, another node) reaches the verifier exactly as the runner's own would, and a
result the bus rejects is a failed run, with the bus's reason.

Two ways a result lands:

- **bus attached** (``python -m healer.loop``): the bus calls :meth:`Dispatcher.landed` for
  every result applied here or read from this node's results dir, and
  :meth:`Dispatcher.rejected` for every file it sets aside; the run whose ``run_id`` (or file
  name) matches is woken, from whichever thread the bus runs in; if nothing lands within the
  grace time after the run ended, the file itself is read as without a bus;
- **no bus** (a worker process, a one-shot command): once the runner is done, the dispatcher
  reads the result file where the executor published it (or where a bus moved it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from healer.core.bus import AgentResult
from healer.core.bus.results import read_result

log = logging.getLogger(__name__)

GRACE_S = 15.0  # after the run ends, how long its result may take to land on an attached bus


class RunHandle(Protocol):
    run_id: str
    result_path: str  # known once the run is prepared (empty until then)


class Runner(Protocol):
    """What runs are started through (``healer.agents.AgentRunner``)."""

    def submit(self, task: Any, **kw: Any) -> RunHandle: ...

    async def wait(self, run_id: str, timeout: float | None = None) -> Any: ...

    def cancel(self, run_id: str) -> bool: ...


class Bus(Protocol):
    def subscribe(self, fn: Callable[[AgentResult], None], kind: str | None = None) -> None: ...

    def watch_files(self, landed: Callable[[AgentResult], None],
                    rejected: Callable[[str, str], None]) -> None: ...


@dataclass(frozen=True)
class Landed:
    """What the bus said about one run: its result document, or why there is none."""

    doc: dict[str, Any] | None
    path: str = ""
    error: str = ""  # why no usable document landed ('' when ``doc`` is set)


class Dispatcher:
    """Start runs through ``runner``; their outcome is what lands on the bus (module doc)."""

    def __init__(self, runner: Runner, *, bus: Bus | None = None, grace_s: float = GRACE_S):
        self.runner = runner
        self.grace_s = grace_s
        self.attached = bus is not None
        self._waiting: dict[str, asyncio.Future[Landed]] = {}  # run id → its landing
        self._handles: dict[str, RunHandle] = {}  # run id → its handle (its result path)
        self._loop: asyncio.AbstractEventLoop | None = None
        if bus is not None:
            bus.subscribe(self.landed)  # applied here, from any node's file
            bus.watch_files(self.landed, self.rejected)  # this node's files (JetStream: one
            # node applies each result, so a run must not wait for it to be applied here)

    @property
    def in_flight(self) -> int:
        return len(self._waiting)

    # -- the bus side (any thread) -------------------------------------------------------

    def landed(self, result: AgentResult) -> None:
        """An applied result: wake the run it belongs to."""
        run_id = str(result.data.get("run_id") or "") or self._run_writing(result.name)
        self._wake(run_id, Landed(dict(result.data), result.name))

    def rejected(self, name: str, reason: str) -> None:
        """A result file the bus set aside: the run that was to write it failed."""
        run_id = self._run_writing(name)
        self._wake(run_id, Landed(None, name, f"the bus rejected its result: {reason}"))

    def _run_writing(self, name: str) -> str:
        """The run whose result file is called ``name`` ('' if none of ours)."""
        for run_id, handle in list(self._handles.items()):
            if handle.result_path and Path(handle.result_path).name == name:
                return run_id
        return ""

    def _wake(self, run_id: str, landing: Landed) -> None:
        loop = self._loop
        if not run_id or loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._resolve, run_id, landing)

    def _resolve(self, run_id: str, landing: Landed) -> None:
        fut = self._waiting.get(run_id)
        if fut is not None and not fut.done():
            fut.set_result(landing)

    # -- running -------------------------------------------------------------------------

    async def run(self, task: Any, **submit_kw: Any) -> Any:
        """Run ``task`` (``submit_kw`` go to the runner: ``executor``, ``env``); the runner's
        outcome with its result and status taken from the bus.

        The outcome is a dataclass with ``status``, ``result``, ``result_path`` and ``error``
        (``healer.agents.RunOutcome``). A task that cannot start raises the runner's error.
        """
        self._loop = asyncio.get_running_loop()
        handle = self.runner.submit(task, **submit_kw)
        run_id = handle.run_id
        fut: asyncio.Future[Landed] = self._loop.create_future()
        self._waiting[run_id] = fut
        self._handles[run_id] = handle
        ran = asyncio.ensure_future(self.runner.wait(run_id))
        try:
            return await self._outcome(handle, fut, ran)
        except asyncio.CancelledError:
            self.runner.cancel(run_id)
            raise
        finally:
            self._waiting.pop(run_id, None)
            self._handles.pop(run_id, None)
            if not ran.done():
                ran.cancel()

    async def _outcome(self, handle: RunHandle, fut: asyncio.Future[Landed],
                       ran: asyncio.Future[Any]) -> Any:
        await asyncio.wait({fut, ran}, return_when=asyncio.FIRST_COMPLETED)
        if fut.done() and not ran.done():
            # Someone else's copy of the result landed first: the run has nothing left to
            # tell, but it still ends through the runner (its slot, its process tree).
            log.info("run %s: its result landed before the run ended", handle.run_id)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(ran), self.grace_s)
            if not ran.done():
                self.runner.cancel(handle.run_id)
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await ran
        if ran.cancelled():
            raise RuntimeError(f"run {handle.run_id}: the runner gave no outcome")
        if ran.exception() is not None:
            raise ran.exception()  # type: ignore[misc]  # could not start: UsageError, …
        outcome = ran.result()
        path = str(getattr(outcome, "result_path", "") or handle.result_path)
        if fut.done():
            landing = fut.result()
        elif self.attached:
            try:
                landing = await asyncio.wait_for(asyncio.shield(fut), self.grace_s)
            except TimeoutError:
                log.warning("run %s: no result landed on the bus within %g s of its end; "
                            "reading the file", handle.run_id, self.grace_s)
                landing = await asyncio.to_thread(_read, path)
        else:
            landing = await asyncio.to_thread(_read, path)
        return _with(outcome, landing)


def _read(path: str) -> Landed:
    if not path:
        return Landed(None, "", "the run never reserved a result file")
    doc, why = read_result(Path(path))
    return Landed(doc, path, why)


def _with(outcome: Any, landing: Landed) -> Any:
    """``outcome`` with what the bus holds: its document and status, or the failure."""
    if landing.doc is None:
        return dataclasses.replace(outcome, result=None, status="failed",
                                   error=landing.error or outcome.error)
    status = str(landing.doc.get("status") or "failed")
    error = outcome.error if status == outcome.status else str(
        landing.doc.get("error") or outcome.error or "")
    return dataclasses.replace(outcome, result=landing.doc, status=status, error=error)
