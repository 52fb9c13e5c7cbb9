"""The fleet healer inside `python -m healer.loop`: it finds a fault on its own, heals it
through the results bus, and serves the picture on GET /api/v1/fleet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from healer.testing.loop import LoopProcess
from healer.testing.wait import wait_for

pytestmark = pytest.mark.e2e


def applied(results: Path, kind: str, peer: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text())
            for p in sorted((results / "applied").glob(f"heal-{kind}-{peer}-*.json"))]


class TestLoopHeals:
    def test_loop_heals_a_killed_daemon_and_reports_it(self, fleet: Any, tmp_path: Path) -> None:
        """With the loop running, a killed daemon is found by the sweep, restarted by the
        daemon restarter (its result applied by the bus), and /api/v1/fleet shows it healed."""
        results = tmp_path / "results"
        env = fleet.loop_env(state_dir=str(tmp_path / "state"), results_dir=str(results),
                             **{"api.enabled": "true", "api.port": 0})
        loop = LoopProcess(env).start()
        try:
            status = json.loads(loop.status_file.read_text())
            assert "fleet" in status["services"]
            api = wait_for(lambda: json.loads(loop.status_file.read_text()).get("api"), 10)
            fleet.kill_daemon("n2")
            done = wait_for(lambda: [r for r in applied(results, "daemon", "n2")
                                     if r["status"] == "healed"], 60)
            assert done[0]["agent"] == "daemon-restarter"
            assert fleet.health("n2") is not None

            def shows_healed() -> dict[str, Any] | None:
                view = httpx.get(f"{api}/api/v1/fleet", timeout=5, trust_env=False).json()
                healed = [e for e in view["events"] if e["type"] == "healed"
                          and e["peer"] == "n2"]
                return view if healed else None

            view = wait_for(shows_healed, 30)
            assert view["status"] == "live" and set(view["peers"]) == {"n1", "n2", "n3"}
            healed = [e for e in view["events"] if e["type"] == "healed" and e["peer"] == "n2"]
            assert healed[0]["agents"] == ["daemon-restarter"]
            assert view["nats"]["connected"] is True
        finally:
            code = loop.stop()
        assert code == 0, loop.log()[-3000:]
        assert "Traceback" not in loop.log()


class TestResultsBusWakesTheEpisode:
    async def test_result_on_the_bus_ends_the_wait(self, fleet: Any, fleet_settings: Any,
                                                   fctx: Any) -> None:
        """An agent that published its result but whose run has not returned yet (a slow
        process) does not hold the episode: the bus delivers the result, the episode
        re-probes and is healed while the run is still going."""
        import asyncio

        from healer.agents.executors import PlaybookExecutor
        from healer.core.bus import ResultsBus
        from healer.core.store import FileStore
        from healer.fleet.heal import HealLoop

        async def slow_to_return(task: Any) -> Any:
            outcome = await PlaybookExecutor(fleet_settings).run(task)
            if task.agent == "tunnel-establisher":
                await asyncio.sleep(60)  # the result is on the bus; the process lingers
            return outcome

        store = FileStore(fleet_settings.state_path)
        loop = HealLoop(fctx, store, run_agent=slow_to_return)
        bus = ResultsBus(fleet_settings.results_path, store, settle_s=0.2, rescan_s=0.5)
        bus.subscribe(lambda r: loop.result_landed(r.kind, r.target))
        await asyncio.to_thread(bus.start)
        try:
            fleet.kill_tunnel("n3")
            ep = await loop.heal("n3", "bus test")
        finally:
            await asyncio.to_thread(bus.stop)
            for task in asyncio.all_tasks():
                if task.get_name().startswith("tunnel-establisher"):
                    task.cancel()
        # On a loaded box a slow probe may also send another channel's agent; the tunnel's
        # is the one this test is about.
        assert ep.state == "healed" and "tunnel-establisher" in ep.agents, ep.agents
        (tunnel,) = [a for a in ep.attempts if a.agent == "tunnel-establisher"]
        assert tunnel.status == "running"  # healed before the run returned
        assert bus.stats.applied >= 2  # the diagnosis and the tunnel result
