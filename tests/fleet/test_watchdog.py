"""The heartbeat watchdog: thresholds from the reference, and no repair storm."""

from __future__ import annotations

from typing import Any

import pytest

from healer.config import load_settings
from healer.fleet.watchdog import ALERT_CHIEF, READDRESS, REPAIR_HTTP, REPAIR_NATS, Watchdog


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def dog(clock: Clock) -> Watchdog:
    """A watchdog with the reference defaults, booted at the clock's start."""
    return Watchdog(load_settings(env={}).fleet, clock=clock)


def check(dog: Watchdog, ages: dict[str, float | None]) -> dict[str, Any]:
    return {f.peer: f for f in dog.check(list(ages), ages.get)}


class TestThresholds:
    def test_quiet_before_it_starts(self, dog: Watchdog, clock: Clock) -> None:
        """Nothing is reported in the first 60 s after boot."""
        clock.t += 59
        assert dog.check(["a"], lambda p: 500.0) == []
        clock.t += 1
        assert dog.check(["a"], lambda p: 500.0) != []

    @pytest.mark.parametrize("age,state,actions", [
        (10.0, "ok", []),
        (45.0, "ok", []),
        (46.0, "slow", []),
        (91.0, "stale", [REPAIR_NATS]),
        (301.0, "silent", [REPAIR_NATS, READDRESS]),
        (601.0, "silent", [REPAIR_NATS, READDRESS, ALERT_CHIEF]),
    ])
    def test_states_and_actions_by_age(self, dog: Watchdog, clock: Clock, age: float,
                                       state: str, actions: list[str]) -> None:
        """Slow after 45 s, stale (repair NATS) after 90 s, re-address after 300 s, alert the
        chief after 600 s."""
        clock.t += 120
        found = check(dog, {"a": age})["a"]
        assert (found.state, found.actions) == (state, actions)

    def test_never_seen_peer_is_repaired_after_300s_uptime(self, dog: Watchdog,
                                                            clock: Clock) -> None:
        """A peer never heard gets NATS and HTTP repairs once uptime passes 300 s."""
        clock.t += 200
        assert check(dog, {"a": None})["a"].actions == []
        clock.t += 101
        found = check(dog, {"a": None})["a"]
        assert (found.state, found.actions) == ("never_seen", [REPAIR_NATS, REPAIR_HTTP])


class TestNoStorm:
    def test_a_stale_hour_gives_twelve_repairs_not_one_per_check(self, dog: Watchdog,
                                                                 clock: Clock) -> None:
        """A peer stale for an hour, checked every 30 s (120 checks), is repaired once per
        300 s cooldown: 12 times — never the 55-in-a-row of the original incident."""
        clock.t += 60
        repairs = 0
        for i in range(120):
            age = 100.0 + 30 * i
            repairs += REPAIR_NATS in check(dog, {"a": age})["a"].actions
            clock.t += 30
        assert repairs == 12

    def test_chief_is_alerted_at_most_every_15_minutes(self, dog: Watchdog,
                                                       clock: Clock) -> None:
        """Alerts to the chief about one silent peer are 15 minutes apart."""
        clock.t += 60
        alerts = 0
        for i in range(120):  # one hour, every 30 s
            alerts += ALERT_CHIEF in check(dog, {"a": 700.0 + 30 * i})["a"].actions
            clock.t += 30
        assert alerts == 4

    def test_cooldowns_are_per_peer(self, dog: Watchdog, clock: Clock) -> None:
        """One peer's repair does not hold back another's."""
        clock.t += 60
        first = check(dog, {"a": 100.0, "b": 100.0})
        assert REPAIR_NATS in first["a"].actions and REPAIR_NATS in first["b"].actions
        clock.t += 30
        again = check(dog, {"a": 130.0, "b": 130.0})
        assert again["a"].actions == [] and again["b"].actions == []
