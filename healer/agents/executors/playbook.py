"""``playbook``: a registered deterministic Python playbook (``healer.agents.playbooks``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from healer.agents.executors.base import Executor, Prepared
from healer.agents.playbooks import PlaybookContext, get_playbook, registered
from healer.errors import AgentResultError, AgentUnavailableError


class PlaybookExecutor(Executor):
    """Runs the agent's registered playbook; no model, no subprocess of its own."""

    name = "playbook"
    agent_writes_result = False
    runs_commands = False  # healer's own code; commands for an agent: ctx.run_command
    spends = False  # no model: a playbook costs nothing and no budget holds it back

    async def _execute(self, prep: Prepared) -> Mapping[str, Any] | None:
        fn = get_playbook(prep.run.agent)
        if fn is None:
            known = ", ".join(sorted(registered())) or "none"
            raise AgentUnavailableError(
                f"no playbook registered for agent {prep.run.agent!r} (playbooks exist for: "
                f"{known}); run it with --executor claude or command",
                agent=prep.run.agent, run_id=prep.run.run_id)
        ctx = PlaybookContext(task=prep.task, run=prep.run, context=prep.context,
                              settings=self.settings,
                              log=logging.getLogger(f"healer.playbook.{prep.run.agent}"),
                              deadline=prep.started + prep.timeout_s,
                              sandbox=self.sandbox, run_dir=prep.run_dir)
        produced = await fn(ctx)
        if not isinstance(produced, Mapping) or "status" not in produced:
            raise AgentResultError("the playbook returned no result fields with a status",
                                   agent=prep.run.agent, run_id=prep.run.run_id)
        return produced
