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
_WHERE = {
    "Alert": "healer.agents.context",
    "ChannelStatus": "healer.agents.context",
    "ErrorReport": "healer.agents.context",
    "LivingContext": "healer.agents.context",
    "Peer": "healer.agents.context",
    "RunInfo": "healer.agents.context",
    "Session": "healer.agents.context",
    "context_from_vars": "healer.agents.context",
    "KNOWN_TOOLS": "healer.agents.definitions",
    "AgentDefinition": "healer.agents.definitions",
    "get_definition": "healer.agents.definitions",
    "load_definitions": "healer.agents.definitions",
    "parse_definition": "healer.agents.definitions",
    "CommandExecutor": "healer.agents.executors",
    "Executor": "healer.agents.executors",
    "PlaybookExecutor": "healer.agents.executors",
    "explain_auto": "healer.agents.executors",
    "select_executor": "healer.agents.executors",
    "PlaybookContext": "healer.agents.playbooks",
    "get_playbook": "healer.agents.playbooks",
    "playbook": "healer.agents.playbooks",
    "registered": "healer.agents.playbooks",
    "PromptError": "healer.agents.prompts",
    "fence": "healer.agents.prompts",
    "render": "healer.agents.prompts",
    "render_string": "healer.agents.prompts",
    "render_task": "healer.agents.prompts",
    "AgentRunner": "healer.agents.runtime",
    "RunHandle": "healer.agents.runtime",
    "dispatcher": "healer.agents.runtime",
    "AgentTask": "healer.agents.task",
    "RunOutcome": "healer.agents.task",
}


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
