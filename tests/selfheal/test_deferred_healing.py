"""A healing run the model API keeps refusing (529) is deferred: the attempt is held, not failed.

The real Claude Code CLI runs against the scripted model on 127.0.0.1, which answers every
request with 529 overloaded. The run ends ``deferred``; the attempt ends without commits,
``held`` until the limit's ``retry_at``: no cooldown starts for its fingerprint, the breaker
learns nothing, nobody is paged about an outage that heals itself, and a new report of the
error joins the held attempt; once the retry time has passed the retry pass resumes it.
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
    assert att["status"] == "held", att
    assert att["hold"]["code"] == "T2" and att["hold"]["until"] is not None
    assert "deferred" in att["reason"] and not att.get("escalation_due")
    adm = svc.store.get(gate.ADMISSION, gate.GATE_KEY)
    assert adm is not None
    assert adm.data["outcomes"] == []  # the breaker learnt nothing
    assert att["fingerprint"] not in adm.data["ended"]  # no cooldown
    again = svc.report({"error_type": "ValueError", "error_message": "bad input",
                        "traceback": "Traceback (most recent call last):\n  File \"app.py\"",
                        "call_site": "app.py:3"})
    assert again["reason"] == gate.ALREADY_INVESTIGATING, again
    assert again["attempt_id"] == att["attempt_id"]
    assert not (Path(settings.fleet_path) / "human").exists()
    # Before the retry time nothing resumes; after it, the same attempt does.
    def at(when: float) -> SelfHealService:
        return SelfHealService(settings, svc.store, runner=runner, launcher=lambda _a: None,
                               env={}, clock=lambda: when)

    assert at(att["hold"]["until"] - 0.5).resume_held(launch=False) == []
    later = SelfHealService(settings, svc.store, runner=runner, launcher=lambda _a: None,
                            env={}, clock=lambda: att["hold"]["until"] + 1)
    assert later.resume_held(launch=False) == [att["attempt_id"]]
    assert later.attempts.require(att["attempt_id"])["status"] == "dispatch_pending"
