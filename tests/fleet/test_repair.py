"""The repair ladder (repair_with_escalation): its gate, its levels, the interactive-session
rule, and the escalation when it runs out, on the real local fleet."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fleet_helpers import human_seeds

from healer.core.store import FileStore
from healer.fleet.service import FleetService
from healer.testing.wait import until

pytestmark = pytest.mark.e2e


@pytest.fixture
async def service(fleet: Any, tmp_path: Path, request: Any) -> AsyncIterator[FleetService]:
    """A fleet service (heartbeats, ladder, healer) with fast ladder waits."""
    extra = getattr(request, "param", {})
    settings = fleet.settings(state_dir=str(tmp_path / "state"),
                              results_dir=str(tmp_path / "results"),
                              **{"fleet.ladder_wait_s": 0.5, **extra})
    svc = FleetService(settings, FileStore(settings.state_path))
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


def only(*levels: str) -> Any:
    return pytest.mark.parametrize("service", [{"fleet.allowed_actions": ",".join(levels)}],
                                   indirect=True)


class TestGate:
    async def test_gates_in_order(self, service: FleetService) -> None:
        """Stale diagnosis, a repair already running, and the 5-minute cooldown each block."""
        node = service.view.peer("n2")
        rep = service.repairer
        old = await rep.repair_with_escalation(node, diagnosed_at=time.time() - 3600)
        assert not old.repaired and "stale diagnosis" in old.gate_blocked
        service.healer.busy_peers.add("n2")
        busy = await rep.repair_with_escalation(node)
        assert "already running" in busy.gate_blocked
        service.healer.busy_peers.discard("n2")
        first = await rep.repair_with_escalation(node)  # healthy: L1 already "works"
        assert first.repaired and first.level == "L1" and first.escalation == ""
        again = await rep.repair_with_escalation(node)
        assert "cooldown" in again.gate_blocked
        assert set(again.to_dict()) == {"repaired", "level", "gate_blocked", "steps"}

    @only("daemon", "tunnel")
    async def test_nothing_allow_listed_blocks(self, service: FleetService) -> None:
        """When no ladder level is allow-listed the gate refuses."""
        result = await service.repairer.repair_with_escalation(service.view.peer("n2"))
        assert "allowed_actions" in result.gate_blocked


class TestLevels:
    @pytest.mark.parametrize("service", [{}], indirect=True)
    async def test_messages_then_recovery_script(self, fleet: Any, tmp_path: Path,
                                                 service: FleetService) -> None:
        """A dead daemon ignores L1-L3 (delivered to its inbox, nothing changes); the L3.5
        recovery script brings it back."""
        script = str(fleet.root / "nodes" / "{node}" / "restart.sh")
        service.settings.fleet.recovery_script = [script]
        fleet.kill_daemon("n2")
        result = await service.repairer.repair_with_escalation(service.view.peer("n2"))
        assert result.repaired and result.level == "L3.5", result.to_dict()
        levels = [s["level"] for s in result.steps]
        assert levels == ["L1", "L2", "L3", "L3.5"]
        assert all(s["delivered"] for s in result.steps[:3])
        await until(lambda: fleet.health("n2"), 10)

    @only("restart", "peer_assist")
    async def test_interactive_session_stops_the_ladder_at_l4(self, fleet: Any,
                                                              service: FleetService) -> None:
        """L4 with a person's interactive session on the node: a notice, no restart, and
        the ladder ends there (no L5, no escalation: the person at the node has the notice)."""
        seen = set(human_seeds(service.settings))
        fleet.set_interactive("n2")
        fleet.kill_daemon("n2")
        result = await service.repairer.repair_with_escalation(service.view.peer("n2"))
        assert (result.repaired, result.level) == (False, "L4")
        assert "interactive session" in result.reason
        assert [s["level"] for s in result.steps if not s["outcome"].startswith("skipped")] \
            == ["L4"]
        assert fleet.pid("n2") is None
        assert result.escalation == ""
        assert [p for p in human_seeds(service.settings) if p not in seen] == []

    @only("restart")
    async def test_l4_restarts_the_daemon(self, fleet: Any, service: FleetService) -> None:
        """L4 restarts a dead daemon over SSH and the peer is healthy again."""
        fleet.kill_daemon("n3")
        result = await service.repairer.repair_with_escalation(service.view.peer("n3"))
        assert (result.repaired, result.level) == (True, "L4")
        assert fleet.health("n3") is not None

    @only("restart", "peer_assist")
    async def test_l5_asks_a_healthy_peer_once(self, fleet: Any,
                                               service: FleetService) -> None:
        """When the restart fails, L5 asks a healthy peer to assist — and not again within
        fleet.assist_interval_s."""
        await until(lambda: service.heartbeats.age("n1") is not None, 10)
        before = fleet.health("n1")["messages_received"]
        fleet.break_restart("n3")
        result = await service.repairer.repair_with_escalation(service.view.peer("n3"))
        assert (result.repaired, result.level) == (False, "L5")
        assert result.reason == "asked n1 to assist"
        await until(lambda: fleet.health("n1")["messages_received"] == before + 1, 10)
        fleet.break_restart("n2")
        second = await service.repairer.repair_with_escalation(service.view.peer("n2"))
        assert second.steps[-1]["outcome"].startswith("skipped: a peer was asked")


class TestEscalation:
    @only("restart", "peer_assist")
    async def test_exhausted_ladder_escalates_once_per_peer(self, fleet: Any,
                                                            service: FleetService) -> None:
        """L5 without recovery: one seed file for a person naming the peer, every rung and
        how it ended, and the commands; a local forge issue. The next exhausted ladder of the
        same peer rewrites that file instead of writing another."""
        seen = set(human_seeds(service.settings))
        # L5 asks a healthy peer: one whose heartbeat this service has heard (a busy machine
        # may not have delivered the first ones yet).
        stale = service.settings.fleet.stale_s
        await until(lambda: all((service.heartbeats.age(n) or 1e9) < stale
                                for n in ("n1", "n2")), 30)
        fleet.break_restart("n3", "unit file missing")
        first = await service.repairer.repair_with_escalation(service.view.peer("n3"))
        assert (first.repaired, first.level) == (False, "L5")
        new = [p for p in human_seeds(service.settings) if p not in seen]
        assert len(new) == 1 and str(new[0]) == first.escalation
        assert first.to_dict()["escalation"] == first.escalation
        text = new[0].read_text()
        assert "type: escalation" in text and "Target:** `n3`" in text
        assert "Fleet: n3 " in text and "repair ladder ran out" in text
        assert "L4 restart" in text and "L5 peer_assist" in text
        assert "asked n1 to assist" in text
        assert "healer fleet heal n3" in text and "healer fleet probe n3" in text
        issues = list((service.settings.state_path / "forge" / "issues").glob("*.md"))
        assert len(issues) == 1 and "Fleet: n3 " in issues[0].read_text()

        service.settings.fleet.repair_cooldown_s = 0  # the watchdog's next ladder
        second = await service.repairer.repair_with_escalation(service.view.peer("n3"))
        assert not second.repaired and second.escalation == first.escalation
        assert [p for p in human_seeds(service.settings) if p not in seen] == new
        assert "Escalated 2 times" in new[0].read_text()
