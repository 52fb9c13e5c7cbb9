"""A person's silence on fleet repairs, on the real local fleet (real NATS, real sshd).

n3's SSH tunnel is killed. While a silence of ``node=n3`` is active, the sweep's request
starts nothing (no diagnoser, no repair agent) and a request without a probe ends after the
diagnosis, before any repair; the incident is recorded, counted and ``silenced_by``. When the
silence ends, the next request heals the tunnel and the mark is gone.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from fleet_helpers import result_files

from healer.core.incidents import Ledger
from healer.core.silences import Matcher, Silences
from healer.core.store import FileStore
from healer.fleet import incidents as fleet_incidents
from healer.fleet.channels import probe_peer
from healer.fleet.heal import HealLoop
from healer.testing.wait import until

pytestmark = pytest.mark.e2e


async def test_a_silence_stops_the_repair_of_a_peer_and_expires_on_time(
        fleet: Any, fleet_settings: Any, fctx: Any) -> None:
    store = FileStore(fleet_settings.state_path)
    loop = HealLoop(fctx, store)
    events: list[dict[str, Any]] = []
    loop.listen(events.append)
    made = Silences(store).add([Matcher.parse("node=n3"), Matcher.parse("kind=fleet")],
                               ends_at=time.time() + 4, author="ops", comment="moving n3")
    sid = made["id"]
    iid = fleet_incidents.signal_of("n3", "fleet-n3-tunnel", ["tunnel"], ["tunnel"])
    assert iid is not None
    try:
        fleet.kill_tunnel("n3")
        probe = await probe_peer(fctx, fctx.view.peer("n3"))
        assert probe.broken == ["tunnel"]
        assert loop.request("n3", "probe found tunnel broken", probe) is False
        assert "n3" not in loop.active
        assert [e["silence"] for e in events if e["type"] == "silenced"] == [sid]
        inc = Ledger(store).require(iid.id)
        assert (inc["status"], inc["silenced_by"], inc["gate"]["reason"]) == \
            ("open", sid, "silenced")
        assert inc["attempts"] == 0

        # Without a probe the episode starts, diagnoses, and stops before any repair.
        assert loop.request("n3", "heartbeat silent") is True
        ep = await asyncio.wait_for(loop.active["n3"], 60)
        assert ep.state == "silenced" and ep.attempts == [] and ep.incident == iid.id
        assert result_files(fleet_settings, "tunnel", "n3") == []
        inc = Ledger(store).require(iid.id)
        assert inc["count"] == 2 and inc["rejections"] == {"silenced": 2}

        await until(lambda: not Silences(store).list(), 15)
        fresh = await probe_peer(fctx, fctx.view.peer("n3"))
        assert loop.request("n3", "probe found tunnel broken", fresh) is True
        healed = await asyncio.wait_for(loop.active["n3"], 60)
        assert healed.state == "healed" and healed.agents == ["tunnel-establisher"]
        inc = Ledger(store).require(iid.id)
        assert inc["status"] == "resolved" and "silenced_by" not in inc
    finally:
        await loop.stop()
