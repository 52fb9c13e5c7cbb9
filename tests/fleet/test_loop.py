"""The fleet healer inside `python -m healer.loop`: it finds a fault on its own, heals it
through the results bus, and serves the picture on GET /api/v1/fleet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fleet_helpers import wait_for

from healer.testing.loop import LoopProcess

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
                ep = view["peers"]["n2"]["episode"]
                return view if ep and ep["state"] == "healed" else None

            view = wait_for(shows_healed, 30)
            assert view["status"] == "live" and set(view["peers"]) == {"n1", "n2", "n3"}
            assert view["peers"]["n2"]["episode"]["agents"] == ["daemon-restarter"]
            assert view["nats"]["connected"] is True
        finally:
            code = loop.stop()
        assert code == 0, loop.log()[-3000:]
        assert "Traceback" not in loop.log()
