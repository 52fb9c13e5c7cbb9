"""The executor a name (or ``auto``) stands for."""

from __future__ import annotations

import logging
from typing import Any

from healer.agents.executors.auto import explain_auto
from healer.agents.executors.base import EXECUTORS, Executor
from healer.agents.executors.command import CommandExecutor
from healer.agents.executors.playbook import PlaybookExecutor
from healer.errors import UsageError

log = logging.getLogger("healer.agents.executors")  # one logger for the package


def select_executor(settings: Any, name: str | None = None, **kw: Any) -> Executor:
    """The executor called ``name`` (default ``settings.executor.default``); ``auto`` resolves."""
    choice = name or settings.executor.default
    if choice == "auto":
        choice, reason = explain_auto(settings)
        log.debug("executor auto → %s: %s", choice, reason)
    if choice == "playbook":
        return PlaybookExecutor(settings, **kw)
    if choice == "command":
        return CommandExecutor(settings, **kw)
    if choice == "claude":
        from healer.agents.claude import ClaudeExecutor

        return ClaudeExecutor(settings, **kw)
    raise UsageError(f"unknown executor {choice!r} (auto, {', '.join(EXECUTORS)})")
