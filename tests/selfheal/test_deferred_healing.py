"""A healing run the model API keeps refusing (529) is deferred: not a failed attempt.

The real Claude Code CLI runs against the scripted model on 127.0.0.1, which answers every
request with 529 overloaded. The attempt ends without commits, marked deferred: no cooldown
starts for its fingerprint, the breaker learns nothing, and nobody is paged about an outage
that heals itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from healer.core import gate
from healer.core.store import FileStore
from healer.selfheal.service import SelfHealService

pytestmark = [pytest.mark.e2e]
GATES = {"cooldown_s": 3600, "breaker_window": 1, "timeout_s": 8}


async def test_an_overloaded_model_defers_the_attempt(make_settings: Callable[..., Any]) -> None:
    from test_claude import CLAUDE_TEST_ENV

    from healer.agents.executors import claude_cli
    from healer.selfheal.dispatch import Dispatcher
    from healer.selfheal.runner import ExecutorRunner
    from healer.testing import ScriptedModel, http_error

    settings = make_settings(None, **GATES)
    if claude_cli(settings) is None:
        pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")
    settings = dataclasses.replace(settings, executor=dataclasses.replace(
        settings.executor, claude=dataclasses.replace(settings.executor.claude,
                                                      defer_base_s=0.2, defer_cap_s=1)))
    with ScriptedModel([http_error(529)], when_exhausted=http_error(529)) as model:
        runner = ExecutorRunner(settings, executor="claude",
                                env={**model.env(), **CLAUDE_TEST_ENV})
        svc = SelfHealService(settings, FileStore(settings.state_path), runner=runner,
                              launcher=lambda _a: None, env={})
        out = svc.report({"error_type": "ValueError", "error_message": "bad input",
                          "traceback": "Traceback (most recent call last):\n  File \"app.py\"",
                          "call_site": "app.py:3"})
        assert out["accepted"], out
        att = await Dispatcher(settings, svc.store, runner=runner).run(out["attempt_id"])
        assert len([r for r in model.requests if r.method == "POST"]) >= 2  # tried again
    assert att["status"] == "failed" and att.get("deferred") is True, att
    assert "deferred" in att["reason"] and not att.get("escalation_due")
    adm = svc.store.get(gate.ADMISSION, gate.GATE_KEY)
    assert adm is not None
    assert adm.data["outcomes"] == []  # the breaker learnt nothing
    assert att["fingerprint"] not in adm.data["ended"]  # no cooldown: the next report may try
    again = svc.report({"error_type": "ValueError", "error_message": "bad input",
                        "traceback": "Traceback (most recent call last):\n  File \"app.py\"",
                        "call_site": "app.py:3"})
    assert again["accepted"], again
    assert not (Path(settings.fleet_path) / "human").exists()
