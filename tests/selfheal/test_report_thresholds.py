"""gate.thresholds for report_error: below N occurrences (or N users) recorded, no agent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from selfheal_helpers import SEED_REPORT, serve

from healer.config import load_settings
from healer.core.incidents import public_view
from healer.core.store import FileStore
from healer.errors import ConfigError
from healer.selfheal.service import SelfHealService

RULE = {"report_error": {"occurrences": 3, "window_s": 600}}


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def thresholded(tmp_path: Path, repo: Path, agent_script: Callable[[str], list[str]]
                ) -> Callable[..., tuple[SelfHealService, list[str], Clock]]:
    def make(rule: dict[str, Any] | None = None) -> tuple[SelfHealService, list[str], Clock]:
        settings = load_settings(env={}, overrides={
            "state_dir": str(tmp_path / "state"), "results_dir": str(tmp_path / "results"),
            "fleet_dir": str(tmp_path / "fleet"), "cto_config": str(tmp_path / "none.json"),
            "fleet": {"config": str(tmp_path / "none.json")}, "selfheal": {"repo": str(repo)},
            "executor": {"default": "command",
                         "commands": {"healing-agent": agent_script("fix")}},
            "gate": {"thresholds": RULE if rule is None else rule}})
        launched: list[str] = []
        clock = Clock()
        svc = SelfHealService(settings, FileStore(settings.state_path), clock=clock,
                              launcher=launched.append, env={})
        return svc, launched, clock

    return make


def test_the_third_occurrence_within_the_window_starts_the_agent(thresholded: Any) -> None:
    svc, launched, clock = thresholded()
    for n in (1, 2):
        out = svc.report(SEED_REPORT)
        assert out["accepted"] is False and out["reason"] == "awaiting_occurrences"
        assert f"seen {n} of 3 times within 10 min" in out["message"]
        clock.now += 60
    assert launched == []
    inc = public_view(svc.ledger.require(f"code-{out['fingerprint']}"))
    assert inc["status"] == "open" and inc["count"] == 2
    assert inc["gate"]["reason"] == "awaiting_occurrences"
    assert svc.ledger.stats()["decisions"]["code"]["awaiting_occurrences"] == 2
    assert svc.retry_held() == []  # not retried on its own: the next occurrence asks

    third = svc.report(SEED_REPORT)
    assert third["accepted"] is True and launched == [third["attempt_id"]]


def test_occurrences_outside_the_window_count_no_more(thresholded: Any) -> None:
    svc, launched, clock = thresholded()
    svc.report(SEED_REPORT)
    svc.report(SEED_REPORT)
    clock.now += 601  # both fell out of the window
    out = svc.report(SEED_REPORT)
    assert out["reason"] == "awaiting_occurrences" and "seen 1 of 3" in out["message"]
    clock.now += 10
    assert svc.report(SEED_REPORT)["reason"] == "awaiting_occurrences"
    clock.now += 10
    assert svc.report(SEED_REPORT)["accepted"] is True
    assert len(launched) == 1


def test_no_rule_is_one_occurrence_as_before(thresholded: Any) -> None:
    svc, launched, _ = thresholded(rule={})
    assert svc.report(SEED_REPORT)["accepted"] is True and len(launched) == 1


def test_a_bad_rule_is_a_clear_settings_error(tmp_path: Path) -> None:
    for bad, words in (({"fleet-probe": {"users": 2}}, "expected one of"),
                       ({"loki": {"window_s": 60}}, "a window needs occurrences above 1"),
                       ({"loki": {"occurrences": 0}}, "minimum")):
        with pytest.raises(ConfigError) as err:
            load_settings(env={}, overrides={"state_dir": str(tmp_path),
                                             "gate": {"thresholds": bad}})
        assert words in str(err.value) and "gate.thresholds" in str(err.value)


@pytest.mark.e2e
async def test_through_the_http_report_route(thresholded: Any) -> None:
    """Over the real route: 200 with the reason twice, the incident visible, then 202."""
    svc, launched, clock = thresholded()
    async with serve(svc) as c:
        for _ in range(2):
            r = await c.post("/api/v1/errors", json=SEED_REPORT)
            assert r.status_code == 200 and r.json()["reason"] == "awaiting_occurrences"
            clock.now += 30
        listed = (await c.get("/api/v1/incidents", params={"kind": "code"})).json()
        (inc,) = listed["incidents"]
        assert inc["gate"]["reason"] == "awaiting_occurrences" and inc["count"] == 2
        assert inc["threshold"]["n"] == 2
        r = await c.post("/api/v1/errors", json=SEED_REPORT)
        assert r.status_code == 202 and launched == [r.json()["attempt_id"]]
