"""Executors: one interface, three ways to run an agent, one result contract.

``await executor.run(task) -> RunOutcome``. Whatever happens — success, the agent's own
failure, a crash, a timeout, a cancellation — the run leaves a result file
``<results dir>/heal-<kind>-<target>-<epoch>.json`` valid against the schema: the agent's own
when it wrote a valid one, else a failed (or ``timeout``) result written by healer. Agents
write under that name in their run's folder (``<state>/agents/runs/<run_id>/``); healer checks
the file and publishes it atomically when the run ends (see ``healer.agents.results``).

- ``playbook``: a registered deterministic Python playbook (``healer.agents.playbooks``).
- ``claude``: Claude Code through claude-agent-sdk (``healer.agents.claude``).
- ``command``: any CLI from ``settings.executor.commands[agent]``.
- ``auto``: ``claude`` when a model is reachable, else ``playbook`` (``explain_auto``).

The modules: ``base`` (``Executor``, ``Prepared``, the shared run), ``playbook``, ``command``,
``auto`` (finding Claude Code, ``explain_auto``) and ``selection`` (``select_executor``, which
loads ``healer.agents.claude`` when it is asked for it; that module builds on ``base`` and
``auto``). Every public name is importable from here.

Invalid tasks (unknown agent, unsafe names, a prompt that does not render) raise
``UsageError`` before anything runs.
"""

from __future__ import annotations

from healer.agents.executors.auto import claude_cli, explain_auto, user_claude_dir
from healer.agents.executors.base import (
    EXECUTORS,
    KEEP_RUN_DIRS,
    Executor,
    Prepared,
    run_env,
    secret_env_names,
)
from healer.agents.executors.command import CommandExecutor
from healer.agents.executors.playbook import PlaybookExecutor
from healer.agents.executors.selection import availability, can_run, select_executor

__all__ = [
    "EXECUTORS",
    "KEEP_RUN_DIRS",
    "CommandExecutor",
    "Executor",
    "PlaybookExecutor",
    "Prepared",
    "availability",
    "can_run",
    "claude_cli",
    "explain_auto",
    "run_env",
    "secret_env_names",
    "select_executor",
    "user_claude_dir",
]
