"""The daily agent budget: counted from what runs report, per UTC day, held where runs start.

A run over its kind's budget (or the budget over all kinds) does not start: it ends
``deferred`` with ``retry_at`` at the next UTC midnight, and a person is told once per day and
budget. The clock is passed in; one test drives the real Claude Code CLI, whose own cost report
is what counts.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from healer.agents import AgentTask
from healer.agents.budget import ALL, Budget, budget_kind, clean_usd, day_of, next_midnight
from healer.agents.executors import CommandExecutor, PlaybookExecutor
from healer.config import load_settings
from healer.core.store import FileStore

NOON = datetime(2026, 12, 5, 12, 0, tzinfo=UTC).timestamp()
MIDNIGHT = datetime(2026, 12, 6, 0, 0, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, now: float = NOON):
        self.now = now

    def __call__(self) -> float:
        return self.now


def with_budget(settings: Any, budgets: dict[str, float]) -> Any:
    settings.agents.daily_budget_usd = budgets
    return settings


class TestTheCount:
    def test_kinds_and_days(self) -> None:
        assert budget_kind("healing-agent") == "code"
        assert budget_kind("living-context-healer") == "code"
        assert budget_kind("remediation-agent") == "play"
        assert budget_kind("master-healer") == budget_kind("channel-diagnoser") == "fleet"
        assert budget_kind("my-agent") == "my_agent"
        assert day_of(NOON) == "2026-12-05" and next_midnight(NOON) == MIDNIGHT
        assert next_midnight(MIDNIGHT) == MIDNIGHT + 86400

    @pytest.mark.parametrize("value", [None, "3", True, -1, float("nan"), float("inf")])
    def test_odd_reports_count_nothing(self, value: Any) -> None:
        assert clean_usd(value) == 0.0

    def test_no_budget_holds_nothing(self, settings: Any) -> None:
        budget = Budget(settings, FileStore(settings.state_path), clock=Clock())
        budget.spend("code", 500.0)
        assert budget.over("code") is None

    def test_a_kind_is_held_when_its_budget_is_reached(self, settings: Any) -> None:
        clock = Clock()
        budget = Budget(with_budget(settings, {"code": 2.0}), FileStore(settings.state_path),
                        clock=clock)
        budget.spend("code", 1.5)
        assert budget.over("code") is None
        budget.spend("code", 0.5)
        over = budget.over("code")
        assert over is not None and over.budget == "code" and over.retry_at == MIDNIGHT
        assert over.spent == 2.0 and over.limit == 2.0 and over.day == "2026-12-05"
        assert "agents.daily_budget_usd.code" in over.message("code")
        assert budget.over("play") is None  # another kind runs on

    def test_all_covers_every_kind(self, settings: Any) -> None:
        budget = Budget(with_budget(settings, {"all": 3.0}), FileStore(settings.state_path),
                        clock=Clock())
        budget.spend("code", 2.0)
        budget.spend("fleet", 1.0)
        over = budget.over("play")
        assert over is not None and over.budget == ALL and over.spent == 3.0

    def test_the_next_utc_day_starts_at_zero(self, settings: Any) -> None:
        clock = Clock()
        budget = Budget(with_budget(settings, {"code": 1.0}), FileStore(settings.state_path),
                        clock=clock)
        budget.spend("code", 1.0)
        assert budget.over("code") is not None
        clock.now = MIDNIGHT - 1
        assert budget.over("code") is not None
        clock.now = MIDNIGHT
        assert budget.over("code") is None
        assert budget.today()["budgets"]["code"]["spent_usd"] == 0.0

    def test_processes_add_to_one_sum(self, settings: Any) -> None:
        """Two budgets over one state dir (two processes) count into the same day record."""
        clock = Clock()
        a = Budget(with_budget(settings, {"play": 10.0}), FileStore(settings.state_path),
                   clock=clock)
        b = Budget(settings, FileStore(settings.state_path), clock=clock)

        async def many() -> None:
            await asyncio.gather(*(asyncio.to_thread(x.spend, "play", 0.25)
                                   for x in (a, b) * 10))

        asyncio.run(many())
        view = a.today()["budgets"]
        assert view["play"]["spent_usd"] == 5.0 and view["play"]["runs"] == 20
        assert view[ALL]["spent_usd"] == 5.0 and view["play"]["limit_usd"] == 10.0

    def test_a_person_is_told_once_per_day_and_budget(self, settings: Any) -> None:
        clock = Clock()
        a = Budget(with_budget(settings, {"code": 1.0}), FileStore(settings.state_path),
                   clock=clock)
        b = Budget(settings, FileStore(settings.state_path), clock=clock)
        a.spend("code", 1.0)
        over = a.over("code")
        assert over is not None
        assert a.first_notice(over) is True
        assert b.first_notice(over) is False and a.first_notice(over) is False
        clock.now = MIDNIGHT + 10
        b.spend("code", 1.0)
        again = b.over("code")
        assert again is not None and a.first_notice(again) is True

    def test_old_days_are_forgotten(self, settings: Any) -> None:
        clock = Clock()
        store = FileStore(settings.state_path)
        budget = Budget(settings, store, clock=clock)
        budget.spend("code", 1.0)
        clock.now += 10 * 86400
        budget.spend("code", 1.0)
        assert store.keys("agent-spend") == [day_of(clock.now)]


# -- where runs start ---------------------------------------------------------------------

# A command agent that reports what it cost and leaves a mark each time it really runs.
AGENT = r'''
import json, os, sys
result, marks, cost = sys.argv[1], sys.argv[2], float(sys.argv[3])
open(marks, "a").write("ran\n")
open(result, "w").write(json.dumps({
    "schema_version": 1, "kind": os.environ["HEALER_KIND"], "target": os.environ["HEALER_TARGET"],
    "run_id": os.environ["HEALER_RUN_ID"], "status": "diagnosed", "summary": "probed",
    "cost_usd": cost}))
'''


def command(settings: Any, tmp_path: Path, cost: float, budget: Budget) -> tuple[Any, Path]:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    marks = tmp_path / "marks"
    argv = [sys.executable, str(script), "{result_file}", str(marks), str(cost)]
    return CommandExecutor(settings, commands={"*": argv}, budget=budget), marks


def seeds(settings: Any) -> list[Path]:
    human = settings.fleet_path / "human"
    return sorted(human.glob("*.md")) if human.exists() else []


class TestHeldWhereRunsStart:
    async def test_over_budget_runs_wait_for_the_next_day(self, settings: Any,
                                                          tmp_path: Path) -> None:
        """The first run reports $1.50 against a $1 fleet budget; the next does not start:
        it ends deferred until midnight UTC, the command never runs, and a person hears of
        it once. After midnight runs start again."""
        clock = Clock()
        settings = with_budget(settings, {"fleet": 1.0})
        budget = Budget(settings, FileStore(settings.state_path), clock=clock)
        ex, marks = command(settings, tmp_path, 1.5, budget)
        task = AgentTask("channel-diagnoser", "mac1", vars={"host": "127.0.0.1"},
                         cwd=str(tmp_path))
        first = await ex.run(task)
        assert first.status == "diagnosed" and first.cost_usd == 1.5
        assert budget.today()["budgets"]["fleet"]["spent_usd"] == 1.5

        held = await ex.run(task)
        assert held.status == "deferred" and held.cost_usd == 0.0
        assert held.result is not None and held.result["retry_at"] == MIDNIGHT
        assert "failure" not in held.result
        assert "agents.daily_budget_usd.fleet" in held.error
        assert marks.read_text() == "ran\n"  # the command did not start
        (told,) = seeds(settings)
        text = told.read_text()
        assert "Daily agent budget spent" in text and "agents.daily_budget_usd.fleet" in text

        again = await ex.run(task)
        assert again.status == "deferred" and len(seeds(settings)) == 1  # told once

        clock.now = MIDNIGHT + 1
        after = await ex.run(task)
        assert after.status == "diagnosed" and marks.read_text() == "ran\nran\n"

    async def test_playbooks_cost_nothing_and_are_never_held(self, settings: Any) -> None:
        clock = Clock()
        settings = with_budget(settings, {ALL: 1.0})
        budget = Budget(settings, FileStore(settings.state_path), clock=clock)
        budget.spend("fleet", 5.0)
        ex = PlaybookExecutor(settings, budget=budget)
        out = await ex.run(AgentTask("channel-diagnoser", "mac1",
                                     vars={"host": "127.0.0.1", "port": "1"}))
        assert out.status != "deferred" and out.cost_usd == 0.0

    async def test_a_claimed_cost_must_fit_the_schema(self, settings: Any,
                                                      tmp_path: Path) -> None:
        """A negative cost is no valid result (the schema says so): it counts nothing."""
        budget = Budget(settings, FileStore(settings.state_path), clock=Clock())
        ex, _ = command(settings, tmp_path, -5.0, budget)
        out = await ex.run(AgentTask("channel-diagnoser", "mac1", vars={"host": "127.0.0.1"},
                                     cwd=str(tmp_path)))
        assert out.status == "failed" and out.cost_usd == 0.0


class TestShown:
    def test_status_and_its_json_show_the_spend(self, cli: Any, dirs: Any) -> None:
        settings = load_settings(env=dirs.env)
        Budget(settings, FileStore(dirs.state)).spend("code", 12.5)
        env = {**dirs.env, "HEALER__AGENTS__DAILY_BUDGET_USD": json.dumps({"code": 10,
                                                                            "all": 50})}
        res = cli("status", "--json", env=env)
        spend = json.loads(res.out)["overview"]["agent_spend"]
        assert spend["budgets"]["code"] == {"spent_usd": 12.5, "limit_usd": 10.0,
                                            "over": True, "runs": 1}
        assert spend["budgets"]["all"]["limit_usd"] == 50.0
        assert not spend["budgets"]["all"]["over"]
        text = cli("status", env=env).out
        assert "agent spend today" in text and "code $12.50 of $10.00 — SPENT" in text
        assert "all $12.50 of $50.00" in text


class TestARealRun:
    async def test_claude_codes_own_cost_report_is_what_counts(
            self, settings: Any, claude_executor: Any, tmp_path: Path) -> None:
        """The real Claude Code CLI against the scripted model: its ResultMessage's
        total_cost_usd is the run's cost; over the budget, the next run never reaches the
        model."""
        from healer.agents.executors import claude_cli
        from healer.testing import ScriptedModel, text, tool_use

        if claude_cli(settings) is None:
            pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")
        settings = with_budget(settings, {"fleet": 1e-7})
        budget = Budget(settings, FileStore(settings.state_path), clock=Clock())
        doc = {"schema_version": 1, "kind": "${kind}", "target": "${target}",
               "status": "diagnosed", "run_id": "${run_id}", "summary": "probed"}
        script = [tool_use("Write", {"file_path": "${result_path}", "content": json.dumps(doc)}),
                  text("done")]
        task = AgentTask("channel-diagnoser", "mac1", vars={"host": "127.0.0.1"},
                         cwd=str(tmp_path))
        with ScriptedModel(script) as model:
            ex = claude_executor(model, budget=budget)
            first = await ex.run(task)
            assert first.status == "diagnosed", first.error
            asked = len(model.requests)
            held = await ex.run(task)
        assert held.status == "deferred" and len(model.requests) == asked
        reported = [json.loads(line).get("total_cost_usd") for line in
                    (settings.state_path / "agents" / "runs" / first.run_id / "transcript.jsonl")
                    .read_text().splitlines() if '"ResultMessage"' in line]
        assert first.cost_usd > 0 and first.cost_usd == pytest.approx(sum(reported))
        assert budget.today()["budgets"]["fleet"]["spent_usd"] == pytest.approx(first.cost_usd)


def test_metrics_show_the_spend_against_each_budget(dirs: Any) -> None:
    """/metrics of a real `healer serve` reads the day's spend from the store (any process
    may have spent it) and shows each budget beside it."""
    from healer.testing.api import ServeProcess

    settings = load_settings(env=dirs.env)
    Budget(settings, FileStore(dirs.state)).spend("play", 0.75)
    s = ServeProcess({**dirs.env, "HEALER__AGENTS__DAILY_BUDGET_USD": '{"play": 2, "all": 5}'})
    try:
        text = s.http.get("/metrics").text
    finally:
        s.close()
    assert 'healer_agent_spend_usd{kind="play"} 0.75' in text
    assert 'healer_agent_spend_usd{kind="all"} 0.75' in text
    assert 'healer_agent_budget_usd{kind="play"} 2.0' in text
    assert 'healer_agent_budget_usd{kind="all"} 5.0' in text


async def test_a_play_remediation_waits_out_a_spent_budget(settings: Any) -> None:
    """A remediation held back by the budget is not a failed attempt: the remediation waits
    until the reset (a day away at most, not the 15-minute cap of a model API's limit) and
    then runs; the issue resolves without an escalation."""
    from healer.agents.task import RunOutcome
    from healer.play.remediate import Remediator
    from healer.play.sessions import SessionRegistry

    clock = Clock()
    settings.play.reevaluate_after_s = 0
    store = FileStore(settings.state_path)
    registry = SessionRegistry(store, clock=clock)
    registry.start({"play_id": "p-1", "repository": "a/b", "cto_config": {"agents": {}}})
    issue, _ = registry.add_issue("p-1", {"issue_type": "build_failure", "severity": "critical",
                                          "description": "the build fails", "agent": "rex"})
    slept: list[float] = []
    statuses = iter(["diagnosed", "deferred", "fixed"])

    async def run_agent(task: AgentTask) -> RunOutcome:
        status = next(statuses)
        result: dict[str, Any] = {"status": status, "summary": "s"}
        if status == "deferred":
            result["retry_at"] = MIDNIGHT
        return RunOutcome(run_id="r", agent=task.agent, executor="command", status=status,
                          result_path="", result=result, error="", duration_s=0.0)

    async def sleep(s: float) -> None:
        slept.append(s)
        clock.now += s

    rem = Remediator(settings, store, registry, run_agent=run_agent,
                     still_broken=lambda *a: False, clock=clock, sleep=sleep)
    final = await rem.handle("p-1", issue)
    assert final["status"] == "resolved"
    assert slept == [MIDNIGHT - NOON]
    assert seeds(settings) == []
