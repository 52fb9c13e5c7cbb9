"""Two healer nodes sharing JetStream see the same broken peer: exactly one heals it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fleet_helpers import results

from healer.fleet.heal import HealLoop
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
