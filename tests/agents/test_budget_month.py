"""The monthly agent budget: counted with the daily one, held where runs start, told once per
month, shown against its limit; a held code attempt resumes once the budget has room."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from test_budget import Clock, command, seeds

from healer.agents import AgentTask
from healer.agents.budget import Budget, next_month
from healer.agents.limits import held_by, resumable
from healer.config import load_settings
from healer.core.store import FileStore

NOON = datetime(2026, 12, 5, 12, 0, tzinfo=UTC).timestamp()
JANUARY = datetime(2027, 1, 1, tzinfo=UTC).timestamp()


async def test_over_the_month_runs_wait_for_the_next_month(settings: Any,
                                                           tmp_path: Path) -> None:
    clock = Clock(NOON)
    settings.agents.monthly_budget_usd = {"fleet": 2.0}
    budget = Budget(settings, FileStore(settings.state_path), clock=clock)
    ex, marks = command(settings, tmp_path, 1.5, budget)
    task = AgentTask("channel-diagnoser", "mac1", vars={"host": "127.0.0.1"},
                     cwd=str(tmp_path))
    assert (await ex.run(task)).status == "diagnosed"
    clock.now += 86400  # another day: the month still counts it
    assert (await ex.run(task)).status == "diagnosed"
    assert budget.today()["month"]["budgets"]["fleet"]["spent_usd"] == 3.0

    held = await ex.run(task)
    assert held.status == "deferred" and held.result is not None
    assert held.result["retry_at"] == JANUARY == next_month(clock.now)
    assert "agents.monthly_budget_usd.fleet" in (held.error or "")
    hold = held_by(held.result)
    assert hold is not None and hold["code"] == "budget"
    (told,) = seeds(settings)
    assert "Monthly agent budget spent" in told.read_text()
    clock.now += 86400
    assert (await ex.run(task)).status == "deferred" and len(seeds(settings)) == 1

    # Waiting: not over until January, unless the budget is raised.
    open_now = lambda: budget.over("fleet") is None  # noqa: E731
    assert not resumable(hold, now=clock.now, budget_open=open_now)
    settings.agents.monthly_budget_usd = {"fleet": 10.0}
    assert resumable(hold, now=clock.now, budget_open=open_now)
    settings.agents.monthly_budget_usd = {"fleet": 2.0}
    clock.now = JANUARY + 1
    assert resumable(hold, now=clock.now, budget_open=open_now)
    assert (await ex.run(task)).status == "diagnosed"
    assert marks.read_text() == "ran\n" * 3


def test_status_shows_the_month_against_its_budget(cli: Any, dirs: Any) -> None:
    settings = load_settings(env=dirs.env)
    Budget(settings, FileStore(dirs.state)).spend("code", 12.5)
    env = {**dirs.env, "HEALER__AGENTS__MONTHLY_BUDGET_USD": json.dumps({"code": 100})}
    spend = json.loads(cli("status", "--json", env=env).out)["overview"]["agent_spend"]
    assert spend["month"]["budgets"]["code"] == {"spent_usd": 12.5, "limit_usd": 100.0,
                                                 "over": False, "runs": 1}
    assert spend["budgets"]["code"]["limit_usd"] is None  # no daily budget set
    text = cli("status", env=env).out
    assert "agent spend this month" in text and "code $12.50 of $100.00" in text
