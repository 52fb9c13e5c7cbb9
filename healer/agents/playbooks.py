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

Playbooks live next to the capability they serve; the registry imports the modules in
``PLAYBOOK_MODULES`` on first use (a module that does not exist yet is skipped).
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from healer.agents.context import RunInfo
from healer.agents.task import AgentTask

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

    @property
    def vars(self) -> Mapping[str, str]:
        return self.task.vars

    def remaining(self) -> float:
        """Seconds left before the run's timeout."""
        return max(0.0, self.deadline - time.monotonic())


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
