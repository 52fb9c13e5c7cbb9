"""The executor a name (or ``auto``) stands for."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from healer.agents.executors.auto import explain_auto
from healer.agents.executors.base import EXECUTORS, Executor
from healer.agents.executors.command import CommandExecutor
from healer.agents.executors.playbook import PlaybookExecutor
from healer.errors import UsageError

log = logging.getLogger("healer.agents.executors")  # one logger for the package


def can_run(settings: Any, agent: str, env: Mapping[str, str] | None = None,
            executor: str | None = None) -> bool:
    """Whether ``agent`` can run here with the configured executor (``auto`` resolved): a
    command for it, Claude Code with a model to talk to, or a playbook of that name — the
    gate's "executor available" question — and, for a command or Claude run, a sandbox that
    starts (``availability`` says which is missing). While Claude runs are disabled here (a
    rejected key, ``healer.agents.limits``), a Claude run can only be the agent's playbook."""
    return availability(settings, agent, env, executor) == ""


def availability(settings: Any, agent: str, env: Mapping[str, str] | None = None,
                 executor: str | None = None) -> str:
    """"" when ``agent`` can run here (``can_run``), else the gate's reason why not:
    ``no_sandbox`` (its executor runs commands and no sandbox can start here; ``healer
    doctor`` says why) or ``no_model``."""
    from healer.agents.executors.auto import claude_cli
    from healer.agents.playbooks import get_playbook
    from healer.agents.sandbox import sandbox_for
    from healer.core.gate import NO_MODEL, NO_SANDBOX

    environ = {**os.environ, **(env or {})}
    kind = executor or settings.executor.default
    if kind == "auto":
        kind = explain_auto(settings, environ)[0]
    if kind == "command":
        cmds = settings.executor.commands
        argv = cmds.get(agent) or cmds.get("*")
        found = bool(argv) and (shutil.which(argv[0]) is not None or Path(argv[0]).is_file())
        if not found:
            return NO_MODEL
    elif kind == "claude":
        from healer.agents.limits import holds

        if holds(settings, environ) is not None:
            # what a disabled Claude run falls back to
            return "" if get_playbook(agent) is not None else NO_MODEL
        if claude_cli(settings) is None or explain_auto(settings, environ)[0] != "claude":
            return NO_MODEL
    else:
        return "" if get_playbook(agent) is not None else NO_MODEL
    return NO_SANDBOX if sandbox_for(settings).unavailable() else ""


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
