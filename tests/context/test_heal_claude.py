"""The heal loop with the real Claude Code CLI, driven offline by the scripted model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from context_helpers import BUGGY, FLOAT_FIX, GOOD_FIX, REPRO, REPRO_FILE

from healer.agents import get_definition
from healer.agents.executors import claude_cli
from healer.context.layers import Layers
from healer.context.sentry import from_sentry
from healer.testing import ScriptedModel, http_error, text, tool_use
from healer.testing.git import git
from healer.testing.webhooks import sentry_event_alert

pytestmark = [pytest.mark.e2e]

# Fail fast instead of retrying, and never leave the machine (as tests/agents does).
CLAUDE_TEST_ENV = {"CLAUDE_CODE_MAX_RETRIES": "0", "HTTPS_PROXY": "http://127.0.0.1:9",
                   "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost"}


def one_run(old: str, new: str, summary: str, *, repro: bool = True) -> list[Any]:
    """One iteration as Claude Code does it: (``repro``) write a test that reproduces the
    error, edit the file, write the result, stop (healer commits what it left)."""
    result = {"schema_version": 1, "kind": "${kind}", "target": "${target}", "status": "fixed",
              "run_id": "${run_id}", "incident": "${incident}", "executor": "claude",
              "summary": summary, "actions_taken": ["edited app/payment.py"]}
    test = [tool_use("Write", {"file_path": f"${{cwd}}/{REPRO_FILE}", "content": REPRO},
                     text="A test that reproduces the ZeroDivisionError.")] if repro else []
    return [*test,
            tool_use("Edit", {"file_path": "${cwd}/app/payment.py", "old_string": old.strip(),
                              "new_string": new.strip()}, text="Fixing the empty basket."),
            tool_use("Write", {"file_path": "${result_path}", "content": json.dumps(result)}),
            text("Done.")]


class TestClaudeCode:
    async def test_passes_on_iteration_2_with_the_real_cli(self, service_for: Any,
                                                           project: Path,
                                                           context_dir: Path) -> None:
        """Claude Code's first fix casts to float (INV-001) and is rejected; the second run is
        told why in its prompt, fixes it with integer division, and the fix is verified."""
        from healer.agents.claude import ClaudeExecutor

        script = [*one_run(BUGGY, FLOAT_FIX, "cast to float"),
                  *one_run(FLOAT_FIX, GOOD_FIX, "integer division, guarded", repro=False)]
        with ScriptedModel(script) as model:
            svc = service_for()
            if claude_cli(svc.settings) is None:
                pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")
            svc.healer.executor = ClaudeExecutor(svc.settings,
                                                 env={**model.env(), **CLAUDE_TEST_ENV})
            (sig,) = from_sentry("event_alert", sentry_event_alert(line=6), project)
            (receipt,) = await svc.ingest([sig])
            assert receipt.heal
            await svc.drain(240)

        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "fixed", inc.get("escalation")
        assert inc["fix"]["iterations"] == 2
        turns = model.turns
        # iteration 1: the reproduction, the edit, the result, the end; iteration 2: three.
        assert len(turns) == 7, [t.user_text()[:80] for t in turns]
        first, second = turns[0], turns[4]
        definition = get_definition("living-context-healer")
        assert definition.system_prompt.strip()[:200] in first.system_text
        assert "## Self-Healing Context" in first.user_text()
        assert "[CRITICAL] INV-001: money never goes through float" in first.user_text()
        assert "Iteration 1 was rejected" not in first.user_text()
        assert "## Iteration 1 was rejected" in second.user_text()
        assert "critical invariant INV-001 violated" in second.user_text()
        head = git(project, "show", f"{inc['fix']['branch']}:app/payment.py")
        assert GOOD_FIX.strip() in head and "float" not in head
        assert Layers.load(context_dir).incidents[-1].root_cause == "integer division, guarded"


class TestRejectedKey:
    async def test_a_rejected_key_holds_the_heal_without_an_escalation_of_its_own(
            self, service_for: Any, project: Path) -> None:
        """The model answers 401 to the Sentry incident's first run: Claude runs on the node
        stop with the runtime's one escalation, and the attempt is held — no iteration
        after it, no escalation of its own, the incident still healing. With a new key the
        watch resumes the same attempt through the gate and its fix is verified."""
        from healer.agents import limits
        from healer.agents.claude import ClaudeExecutor
        from healer.core import gate, seeds

        script = [http_error(401, "authentication_error", "invalid x-api-key", times=1),
                  *one_run(BUGGY, GOOD_FIX, "integer division, guarded")]
        with ScriptedModel(script) as model:
            svc = service_for()
            if claude_cli(svc.settings) is None:
                pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")
            svc.healer.executor = ClaudeExecutor(svc.settings,
                                                 env={**model.env(), **CLAUDE_TEST_ENV})
            (sig,) = from_sentry("event_alert", sentry_event_alert(line=6), project)
            (receipt,) = await svc.ingest([sig])
            assert receipt.heal
            await svc.drain(240)

            inc = svc.book.get("sentry-4242")
            att = svc.book.attempts.require(receipt.attempt_id)
            assert att["status"] == "held" and att["hold"]["code"] == "X1", att.get("reason")
            assert len(att["iterations"]) == 1  # no second iteration against a rejected key
            assert inc["status"] == "healing" and not inc.get("escalation"), inc
            human = sorted((svc.settings.fleet_path / seeds.HUMAN).glob("*.md"))
            assert len(human) == 1 and "Claude runs stopped" in human[0].read_text()
            events = [e["event"] for e in svc.book.audit.read("sentry-4242")]
            assert "heal_held" in events and "escalated" not in events
            adm = gate.admission(svc.store)
            assert adm["outcomes"] == [] and adm["ended"] == {}

            # The same key: the watch resumes nothing.
            await svc.watch()
            assert svc.book.attempts.require(receipt.attempt_id)["status"] == "held"

            svc.healer.executor = ClaudeExecutor(svc.settings, env={
                **model.env(), **CLAUDE_TEST_ENV, "ANTHROPIC_API_KEY": "sk-ant-rotated"})
            await svc.watch()
            await svc.drain(240)
        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "fixed", inc.get("escalation")
        assert inc["fix"]["attempt_id"] == receipt.attempt_id
        assert len(sorted((svc.settings.fleet_path / seeds.HUMAN).glob("*.md"))) == 1
        assert not limits.disabled_path(svc.settings).exists()
