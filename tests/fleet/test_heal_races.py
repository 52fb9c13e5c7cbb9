"""Fleet healing without races, on the real local fleet: stale sweep probes start nothing, a
new fault on a peer whose other fault is with a person is its own incident, and repairs are
verified by re-probing until a deadline (a route that comes back slowly is not re-repaired)."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest
from fleet_helpers import human_seeds, results

from healer.agents.executors import PlaybookExecutor
from healer.agents.task import AgentTask, RunOutcome
from healer.core.store import FileStore
from healer.fleet.channels import FleetContext, probe_peer
from healer.fleet.heal import HealLoop
from healer.fleet.service import FleetService

pytestmark = pytest.mark.e2e


def incident_of(seed: Path) -> str:
    found = re.search(r"^incident: (\S+)$", seed.read_text(), re.M)
    return found.group(1) if found else ""


async def sweep_episode(svc: FleetService, peer: str) -> Any:
    """One sweep, as the loop runs it; the episode it started for ``peer`` (None if none)."""
    await svc.sweep_once()
    task = svc.healer.active.get(peer)
    return None if task is None else await asyncio.wait_for(task, 120)


@pytest.fixture
async def service(fleet_settings: Any) -> Any:
    svc = FleetService(fleet_settings, FileStore(fleet_settings.state_path))
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


async def escalate_the_route(fleet: Any, svc: FleetService) -> Any:
    """n3's NATS route is gone and its NATS server cannot be restarted: three attempts of
    the NATS reconnector, then an escalation of the problem ``nats``."""
    fleet.drop_route("n3")
    fleet.break_nats_restart("n3")
    ep = await sweep_episode(svc, "n3")
    assert ep is not None and ep.state == "escalated", ep and ep.to_dict()
    assert [a.agent for a in ep.attempts] == ["nats-reconnector"] * 3
    assert ep.escalated == ["nats"] and ep.incident == "fleet-n3-nats"
    assert svc.healer.cooling("n3", "nats") > 0 and svc.healer.cooling("n3", "daemon") == 0
    return ep


class TestStaleSweepProbes:
    async def test_a_probe_from_before_the_episode_ended_starts_nothing(
            self, fleet: Any, fleet_settings: Any, fctx: Any) -> None:
        """A sweep that probed while an episode was healing the peer finds it broken; once the
        episode healed it, that probe starts no second episode. A probe taken afterwards
        does, when the peer really is broken again."""
        loop = HealLoop(fctx, FileStore(fleet_settings.state_path))
        try:
            fleet.kill_tunnel("n3")
            stale = await probe_peer(fctx, fctx.view.peer("n3"))
            assert stale.broken == ["tunnel"]
            ep = await loop.heal("n3", "test")
            assert ep.state == "healed"
            assert loop.request("n3", "probe found tunnel broken", stale) is False
            assert "n3" not in loop.active
            fleet.kill_tunnel("n3")
            fresh = await probe_peer(fctx, fctx.view.peer("n3"))
            assert loop.request("n3", "probe found tunnel broken", fresh) is True
            again = await asyncio.wait_for(loop.active["n3"], 60)
            assert again.state == "healed" and again.agents == ["tunnel-establisher"]
        finally:
            await loop.stop()


class TestANewFaultOnAnEscalatedPeer:
    async def test_a_different_fault_is_its_own_incident_and_escalated_on_its_own(
            self, fleet: Any, fleet_settings: Any, service: FleetService) -> None:
        """n3's route is escalated (problem ``nats``, cooling down). The same fault seen
        again starts nothing; then its restart command breaks and its daemon dies — a new,
        different fault: it opens its own episode and incident (``fleet-n3-daemon``), gets its
        three attempts and its own escalation, and the route's cooldown keeps running."""
        seen = set(human_seeds(fleet_settings))
        first = await escalate_the_route(fleet, service)
        assert await sweep_episode(service, "n3") is None  # the same fault: left alone
        fleet.break_restart("n3", "unit file missing")
        ep = await sweep_episode(service, "n3")
        assert ep is not None and ep.state == "escalated", "the cooldown swallowed the fault"
        assert [a.agent for a in ep.attempts] == ["daemon-restarter"] * 3
        assert ep.incident == "fleet-n3-daemon" and ep.escalated == ["daemon"]
        assert [r["status"] for r in results(fleet_settings, "daemon", "n3")] == ["failed"] * 3
        new = [p for p in human_seeds(fleet_settings) if p not in seen]
        assert sorted(incident_of(p) for p in new) == ["fleet-n3-daemon", "fleet-n3-nats"]
        daemon_seed = next(p for p in new if incident_of(p) == "fleet-n3-daemon")
        assert daemon_seed == Path(ep.escalation) and Path(first.escalation) != daemon_seed
        assert daemon_seed.read_text().count("daemon-restarter (attempt ") == 3
        assert "unit file missing" in daemon_seed.read_text()
        assert service.healer.cooling("n3", "nats") > 0
        assert service.healer.cooling("n3", "daemon") > 0
        assert await sweep_episode(service, "n3") is None  # both with a person now

    async def test_a_different_fault_is_healed_and_the_escalated_one_left_alone(
            self, fleet: Any, fleet_settings: Any, service: FleetService) -> None:
        """With n3's route escalated, its seed inbox is blocked: the inbox repairer heals it
        in an episode of its own; the route, already with a person, gets no more runs."""
        await escalate_the_route(fleet, service)
        events: list[dict[str, Any]] = []
        service.healer.listen(events.append)
        box = fleet.block_inbox("n3")
        ep = await sweep_episode(service, "n3")
        assert ep is not None and ep.state == "held", ep and ep.to_dict()
        assert ep.agents == ["inbox-repairer"] and ep.held == ["nats"]
        assert box.is_dir()
        assert len(results(fleet_settings, "nats", "n3")) == 3  # none since the escalation
        held = [e for e in events if e["type"] == "held"]
        assert held and held[-1]["broken"] == ["nats"] and held[-1]["problems"] == ["nats"]
        assert service.healer.cooling("n3", "nats") > 0
        assert service.healer.cooling("n3", "inbox") == 0


class TestRepairsAreVerifiedByReprobing:
    async def test_a_route_that_comes_back_slowly_is_restored_in_one_attempt(
            self, fleet: Any, tmp_path: Path) -> None:
        """After the NATS reconnector restarts n3's server its route takes 9 s to come back.
        The reconnector pings until fleet.restart_verify_s instead of a fixed few seconds, so
        one attempt heals it — no second restart resetting the route again — and it stops
        pinging as soon as the route is back, not at the deadline."""
        settings = fleet.settings(state_dir=str(tmp_path / "state"),
                                  results_dir=str(tmp_path / "results"),
                                  **{"fleet.restart_verify_s": 40})
        ctx = FleetContext.open(settings)
        try:
            fleet.drop_route("n3")
            fleet.slow_route("n3", 9)
            loop = HealLoop(ctx, FileStore(settings.state_path))
            ep = await loop.heal("n3", "slow route")
        finally:
            await ctx.aclose()
        assert ep.state == "healed", ep.to_dict()
        assert [a.agent for a in ep.attempts] == ["nats-reconnector"]
        [done] = results(settings, "nats", "n3")
        assert done["status"] == "healed"
        actions = done["actions_taken"]
        assert sum("nats-restart.sh over SSH" in a for a in actions) == 1
        assert "ping after restarting its server: pong from n3" in actions
        assert 9 <= ep.attempts[0].duration_s < 40

    async def test_an_agents_healed_is_checked_until_a_deadline(
            self, fleet: Any, tmp_path: Path) -> None:
        """An agent reports ``healed`` the moment it restarted n3's NATS server, while the
        route needs a few seconds more. The episode re-probes until fleet.heal_wait_s instead
        of trusting one probe: healed with that one run, no second run."""
        settings = fleet.settings(state_dir=str(tmp_path / "state"),
                                  results_dir=str(tmp_path / "results"),
                                  **{"fleet.heal_wait_s": 20})
        runs: list[str] = []

        async def hasty(task: AgentTask) -> RunOutcome:
            if task.agent != "nats-reconnector":
                return await PlaybookExecutor(settings).run(task)
            runs.append(task.run_id)
            fleet.slow_route("n3", 4)
            await asyncio.to_thread(fleet.restart_nats, "n3")
            return RunOutcome(run_id=task.run_id, agent=task.agent, executor="test",
                              status="healed", result_path="", error="", duration_s=0.1,
                              result={"status": "healed", "summary": "restarted its server"},
                              kind=task.kind, target=task.target)

        ctx = FleetContext.open(settings)
        try:
            fleet.drop_route("n3")
            loop = HealLoop(ctx, FileStore(settings.state_path), run_agent=hasty)
            start = time.monotonic()
            ep = await loop.heal("n3", "hasty agent")
            took = time.monotonic() - start
        finally:
            await ctx.aclose()
        assert ep.state == "healed", ep.to_dict()
        assert len(runs) == 1 and ep.agents == ["nats-reconnector"]
        assert took < 20 + 10  # it stopped re-probing once the route was back
