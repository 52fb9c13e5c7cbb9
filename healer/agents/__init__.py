"""Agents: definitions (``agents/*.md``), task prompts (``prompts/*.j2``) and executors.

The rest of healer starts agents through ``dispatcher(settings, bus=...)`` — the core
``Dispatcher`` over the one ``AgentRunner`` — giving an ``AgentTask`` and getting a
``RunOutcome`` whose result is the run's result file on the results bus. Executors
(``select_executor``) are this package's business: nothing outside it runs one directly
(``tests/test_architecture.py`` holds that).
"""

from typing import TYPE_CHECKING

from healer.core.lazy import exports

# Each name is imported from its module at first use: importing one submodule (say the
# sandbox, for `healer status`) must not import every executor, jinja2 and the bus.
_WHERE = {name: module for module, names in {
    "healer.agents.context": ("Alert", "ChannelStatus", "ErrorReport", "LivingContext", "Peer",
                              "RunInfo", "Session", "context_from_vars"),
    "healer.agents.definitions": ("KNOWN_TOOLS", "AgentDefinition", "get_definition",
                                  "load_definitions", "parse_definition"),
    "healer.agents.executors": ("CommandExecutor", "Executor", "PlaybookExecutor",
                                "explain_auto", "select_executor"),
    "healer.agents.playbooks": ("PlaybookContext", "get_playbook", "playbook", "registered"),
    "healer.agents.prompts": ("PromptError", "fence", "render", "render_string", "render_task"),
    "healer.agents.runtime": ("AgentRunner", "RunHandle", "dispatcher"),
    "healer.agents.task": ("AgentTask", "RunOutcome"),
}.items() for name in names}


if TYPE_CHECKING:
    from healer.agents.context import (
        Alert,
        ChannelStatus,
        ErrorReport,
        LivingContext,
        Peer,
        RunInfo,
        Session,
        context_from_vars,
    )
    from healer.agents.definitions import (
        KNOWN_TOOLS,
        AgentDefinition,
        get_definition,
        load_definitions,
        parse_definition,
    )
    from healer.agents.executors import (
        CommandExecutor,
        Executor,
        PlaybookExecutor,
        explain_auto,
        select_executor,
    )
    from healer.agents.playbooks import PlaybookContext, get_playbook, playbook, registered
    from healer.agents.prompts import PromptError, fence, render, render_string, render_task
    from healer.agents.runtime import AgentRunner, RunHandle, dispatcher
    from healer.agents.task import AgentTask, RunOutcome


__all__ = [  # noqa: RUF022 - grouped by purpose, like claude_agent_sdk
    # the contract
    "AgentTask",
    "RunOutcome",
    # running
    "dispatcher",
    "AgentRunner",
    "RunHandle",
    "Executor",
    "PlaybookExecutor",
    "CommandExecutor",
    "select_executor",
    "explain_auto",
    # definitions
    "AgentDefinition",
    "KNOWN_TOOLS",
    "load_definitions",
    "get_definition",
    "parse_definition",
    # prompts and their context
    "render",
    "render_string",
    "render_task",
    "fence",
    "PromptError",
    "RunInfo",
    "Peer",
    "ChannelStatus",
    "Alert",
    "Session",
    "ErrorReport",
    "LivingContext",
    "context_from_vars",
    # playbooks
    "playbook",
    "PlaybookContext",
    "get_playbook",
    "registered",
]

__getattr__, __dir__ = exports(__name__, _WHERE, globals())
