"""Where no sandbox can start, a reported error waits at the gate (``no_sandbox``) — no agent
starts unconfined — and is healed once a sandbox starts again (the loop's retry)."""

from __future__ import annotations

from typing import Any

import pytest

from healer.agents.sandbox import BwrapSandbox
from healer.core.store import FileStore
from healer.selfheal.service import SelfHealService


def test_a_report_waits_for_a_sandbox_then_is_healed(make_settings: Any) -> None:
    settings = make_settings("fix")
    settings.agents.sandbox_bwrap = "/nonexistent/bwrap"
    launched: list[str] = []
    held = SelfHealService(settings, FileStore(settings.state_path), launcher=launched.append)
    out = held.report({"error_type": "KeyError", "error_message": "'user_id'",
                       "call_site": "src/app/tools.py:lookup"})
    assert out["accepted"] is False and out["reason"] == "no_sandbox"
    assert "healer doctor" in out["message"] and launched == []
    (inc,) = held.ledger.active("code")
    assert inc["gate"]["reason"] == "no_sandbox"  # what `healer status` shows beside it

    fixed = make_settings("fix")  # bubblewrap is back (a new loop, the same state)
    if BwrapSandbox(fixed).unavailable():
        pytest.skip("no working bubblewrap here to heal with")
    again = SelfHealService(fixed, FileStore(fixed.state_path), launcher=launched.append)
    started = again.retry_held(launch=False)
    assert len(started) == 1
