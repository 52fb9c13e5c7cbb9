"""The healer page shows agent spend against each budget, today and this month, from a real
`healer serve` reading the spend other processes counted."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import pytest

from healer.agents.budget import Budget
from healer.config import load_settings
from healer.core.store import FileStore
from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env

pytestmark = pytest.mark.e2e


def test_spend_against_day_and_month_budgets(tmp_path: Path) -> None:
    env = healer_env(tmp_path / "state", tmp_path / "results", tmp_path / "fleet",
                     HEALER_EXECUTOR="playbook", HEALER__SELFHEAL__ENABLED="false",
                     HEALER__CONTEXT__ENABLED="false",
                     HEALER__AGENTS__DAILY_BUDGET_USD=json.dumps({"code": 5}),
                     HEALER__AGENTS__MONTHLY_BUDGET_USD=json.dumps({"all": 100}))
    settings = load_settings(env=env)
    Budget(settings, FileStore(settings.state_path)).spend("code", 7.25)
    with closing(ServeProcess(env)) as server:
        page = server.http.get("/ui/healer").text
    assert "Agent spend" in page
    day = page.split('id="spend-today-code"')[1].split("</tr>")[0]
    assert "$7.25" in day and "$5.00" in day and "runs wait until" in day
    month = page.split('id="spend-this-month-all"')[1].split("</tr>")[0]
    assert "$7.25" in month and "$100.00" in month and "runs wait" not in month
