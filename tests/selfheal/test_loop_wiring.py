"""What the loop gets from self-healing: recovery, periodic jobs, the API service, results."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from healer.selfheal.service import SelfHealService, create_loop_service


class FakeHealer:
    """The loop's Healer as create_loop_service sees it (settings, store, hooks)."""

    def __init__(self, settings: Any, store: Any):
        self.settings = settings
        self.store = store
        self.extras: dict[str, Any] = {}
        self.recovery: list[Any] = []
        self.jobs: dict[str, tuple[float, Any]] = {}
        self.subscribers: list[Any] = []
        self.bus = SimpleNamespace(subscribe=self.subscribers.append)

    def every(self, name: str, interval_s: float, fn: Any) -> None:
        self.jobs[name] = (interval_s, fn)

    once = every  # on one replica only: the same registration, as far as wiring goes


class TestLoopWiring:
    async def test_factory_registers_everything(self, service: Any) -> None:
        """The factory registers the API service, start-up recovery, refresh/recover/reap/
        retry-held/after-merge jobs and a results subscriber; each job runs off the event
        loop."""
        svc = service()
        healer = FakeHealer(svc.settings, svc.store)
        assert create_loop_service(healer) is None
        assert isinstance(healer.extras["api_services"]["selfheal"], SelfHealService)
        assert set(healer.jobs) == {"selfheal-refresh", "selfheal-recover", "selfheal-reap",
                                    "selfheal-retry", "code-aftermerge"}
        assert healer.jobs["selfheal-refresh"][0] == svc.settings.selfheal.refresh_interval_s
        for fn in [*healer.recovery, *(fn for _i, fn in healer.jobs.values())]:
            out = fn()
            assert asyncio.iscoroutine(out)
            await out
        assert len(healer.subscribers) == 1

    def test_agent_result_is_noted_on_the_attempt(self, service: Any) -> None:
        """A healing result from the bus is attached (sanitised) to its attempt."""
        svc = service()
        aid = svc.report({"error_type": "KeyError", "error_message": "x"})["attempt_id"]
        result = SimpleNamespace(kind="healing", data={
            "run_id": aid, "status": "fixed", "summary": "fixed it for bob@corp-mail.com"})
        svc.on_result(result)
        svc.on_result(SimpleNamespace(kind="daemon", data={"run_id": aid}))
        noted = svc.attempts.require(aid)["agent_result"]
        assert noted == {"status": "fixed", "summary": "fixed it for [REDACTED-EMAIL]"}
