"""Deterministic playbooks: the no-model way to run an agent.

A playbook is an ``async`` function registered for one agent name::

    @playbook("channel-diagnoser")
    async def diagnose(ctx: PlaybookContext) -> dict:
        ...
        return {"status": "diagnosed", "summary": "...", "channels": {...}}

It does the job the agent's prompt describes and returns the result fields (at least
``status``); the playbook executor adds ``kind``, ``target``, ``run_id``, ``incident``,
``agent``, ``executor``, ``timestamp`` and ``duration_s``, checks the document against the
schema and writes it to the bus. A playbook must finish within ``ctx.remaining()`` seconds; it
is cancelled at the run's timeout.

A playbook is healer's own code and runs unconfined. An external command it runs *on an
agent's behalf* — an operator's argv filled with values from agent logs (``play.actions``) —
goes through ``ctx.run_command``, which runs it in the agent sandbox
(``healer.agents.sandbox``): an empty working folder of the run's, the host read-only, the
allow-listed environment, only ``agents.sandbox_network``. Healer's own commands (ssh, the
fleet's tunnels that must outlive the run on the host's loopback) use ``healer.core.proc``.

Playbooks live next to the capability they serve; the registry imports the modules in
``PLAYBOOK_MODULES`` on first use (a module that does not exist yet is skipped).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.agents.context import RunInfo
from healer.agents.sandbox import Sandbox
from healer.agents.task import AgentTask
from healer.core import proc
from healer.errors import AgentUnavailableError

PLAYBOOK_MODULES = (
    "healer.agents.probes",
    "healer.fleet.playbooks",
    "healer.play.playbooks",
    "healer.selfheal.playbooks",
    "healer.context.playbooks",
)


@dataclass
class PlaybookContext:
    """What a playbook gets: the task, its run, the typed context, settings and a logger."""

    task: AgentTask
    run: RunInfo
    context: Mapping[str, Any]
    settings: Any
    log: logging.Logger
    deadline: float  # time.monotonic() at which the run is cancelled
    sandbox: Sandbox | None = None  # where run_command runs (None: unconfined)
    run_dir: Path | None = None  # the run's folder

    @property
    def vars(self) -> Mapping[str, str]:
        return self.task.vars

    def remaining(self) -> float:
        """Seconds left before the run's timeout."""
        return max(0.0, self.deadline - time.monotonic())

    async def run_command(self, argv: Sequence[str], *, timeout: float,
                          readable: Sequence[str] = ()) -> proc.ProcResult:
        """Run ``argv`` for the agent in its sandbox (module doc), in an empty folder of the
        run's; ``readable`` are host files it may read (the operator's own script — never a
        path that came from the agent's input). Raises ``AgentUnavailableError`` where no
        sandbox can start."""
        ids = {"agent": self.run.agent, "run_id": self.run.run_id}
        if self.sandbox is None:
            return await asyncio.to_thread(proc.run, argv, timeout=timeout)
        why = self.sandbox.unavailable()
        if why:
            raise AgentUnavailableError(f"no sandbox for the command: {why}", **ids)
        if not self.sandbox.confined:
            self.log.warning("%s run %s: %s runs UNCONFINED (agents.sandbox: off)",
                             self.run.agent, self.run.run_id, argv[0] if argv else "?")
        base = self.run_dir or Path(self.run.result_path).parent
        work = base / "work"
        work.mkdir(parents=True, exist_ok=True)
        env = {"HEALER_RUN_ID": self.run.run_id, "HEALER_AGENT": self.run.agent,
               "HEALER_KIND": self.run.kind, "HEALER_TARGET": self.run.target}
        wrapped = self.sandbox.wrap(argv, cwd=str(work), env=env, writable=[str(work)],
                                    readable=readable)
        async with wrapped:
            return await asyncio.to_thread(proc.run, wrapped.argv, timeout=timeout,
                                           cwd=work, env=wrapped.env)


Playbook = Callable[[PlaybookContext], Awaitable[Mapping[str, Any]]]

_REGISTRY: dict[str, Playbook] = {}
_loaded = False


def playbook(agent: str) -> Callable[[Playbook], Playbook]:
    """Register the decorated coroutine function as ``agent``'s playbook."""

    def register(fn: Playbook) -> Playbook:
        _REGISTRY[agent] = fn
        return fn

    return register


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in PLAYBOOK_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise  # the module exists but imports something missing: a real error


def get_playbook(agent: str) -> Playbook | None:
    _load()
    return _REGISTRY.get(agent)


def registered() -> dict[str, Playbook]:
    """Agent name → playbook, for every registered playbook."""
    _load()
    return dict(_REGISTRY)
