"""Two healer nodes sharing JetStream see the same broken peer: exactly one heals it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fleet_helpers import results

from healer.core import gate
from healer.core.store import FileStore
from healer.fleet.heal import HealLoop
from healer.fleet.hold import POLICY, PeerHold, claim_key
from healer.fleet.repair import Repairer
from healer.overview import overview, render
from healer.testing.nats import NatsServer, jetstream_store

pytestmark = pytest.mark.e2e


class TestOneHealerPerPeer:
    async def test_broken_peer_healed_by_exactly_one_node(self, fleet: Any, fleet_settings: Any,
                                                           fctx: Any, tmp_path: Any) -> None:
        """Both nodes start healing the peer whose tunnel died; the lease lets one do it and
        the other stand aside, so the tunnel establisher runs once."""
        with NatsServer(jetstream=True, store_dir=tmp_path / "nats") as ns:
            stores = [jetstream_store(ns.url, "fleetlease") for _ in range(2)]
            try:
                loops = [HealLoop(fctx, store) for store in stores]
                fleet.kill_tunnel("n3")
                episodes = await asyncio.gather(*(lp.heal("n3", "both saw it") for lp in loops))
            finally:
                for store in stores:
                    store.close()
        states = sorted(ep.state for ep in episodes)
        assert states == ["elsewhere", "healed"]
        assert len(results(fleet_settings, "tunnel", "n3")) == 1


class TestClaimedAtTheCoreGate:
    async def test_an_episode_is_a_fleet_claim_while_it_runs(self, fleet: Any,
                                                             fleet_settings: Any,
                                                             fctx: Any) -> None:
        """While an episode heals n3 the one admission record holds its claim (kind fleet,
        taking no agent slot of its own); when it ends the claim is gone."""
        store = FileStore(fleet_settings.state_path)
        seen: list[dict[str, Any]] = []
        shown: list[str] = []
        loop = HealLoop(fctx, store)

        def look(ev: dict[str, Any]) -> None:
            if ev["type"] == "episode":
                seen.append(gate.admission(store)["active"].copy())
                shown.append(render(overview(fleet_settings, store)))

        loop.listen(look)
        fleet.kill_tunnel("n3")
        ep = await loop.heal("n3", "tunnel down")
        assert ep.state == "healed"
        [active] = seen
        entry = active[claim_key("n3")]
        assert (entry["kind"], entry["slot"]) == ("fleet", False)
        assert "at the gate: fleet 1 (fleet-episode.n3)" in shown[0].splitlines()
        assert claim_key("n3") not in gate.admission(store)["active"]

    async def test_a_crashed_episodes_claim_is_taken_over(self, fleet: Any,
                                                          fleet_settings: Any,
                                                          fctx: Any) -> None:
        """A claim left by a node that died mid-episode (its lease expired) does not keep
        the peer broken: the next episode releases it, heals, and leaves none behind."""
        store = FileStore(fleet_settings.state_path)
        gate.admit(store, claim_key("n3"), lambda: "run-dead", 1.0, POLICY, lambda: True,
                   record=lambda _: None)
        fleet.kill_tunnel("n3")
        ep = await HealLoop(fctx, store).heal("n3", "tunnel down")
        assert ep.state == "healed"
        assert claim_key("n3") not in gate.admission(store)["active"]

    async def test_a_ladder_and_an_episode_exclude_each_other(self, fleet: Any,
                                                              fleet_settings: Any,
                                                              fctx: Any) -> None:
        """Another process holding n3 (its own store handle and owner) keeps this one's
        episode and repair ladder off it; once it lets go, they may work on n3 again."""
        store = FileStore(fleet_settings.state_path)
        other = PeerHold(FileStore(fleet_settings.state_path), "n3", "node-b-ladder", 30.0)
        assert await other.acquire()
        try:
            ep = await HealLoop(fctx, store).heal("n3", "tunnel down")
            assert ep.state == "elsewhere"
            ladder = await Repairer(fctx, store).repair_with_escalation(
                fctx.view.peer("n3"))
            assert ladder.gate_blocked == "another healer holds the peer (node-b-ladder)"
        finally:
            await other.release()
        assert gate.admission(store)["active"] == {}
        healthy = await Repairer(fctx, store).repair_with_escalation(fctx.view.peer("n3"))
        assert healthy.repaired and healthy.level == "L1"
