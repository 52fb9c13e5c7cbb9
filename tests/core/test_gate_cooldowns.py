"""One cooldown: keys cooled without an attempt of the gate's own (fleet escalations, repair
ladders) are refused by the same check as a code incident's last attempt."""

from __future__ import annotations

from pathlib import Path

from healer.core import gate
from healer.core.store import FileStore


def test_a_cooled_key_is_refused_by_the_gate_and_clears(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    gate.cool(store, ["fleet.p1.nats", "fleet.p10.http"], now=1000.0)
    adm = gate.admission(store)
    assert gate.cooling(adm, "fleet.p1.", now=1100.0, cooldown_s=300) == {"nats": 200.0}
    assert gate.cooling(adm, "fleet.p1.", now=1300.0, cooldown_s=300) == {}
    policy = gate.Policy(kind="fleet", cooldown_s=300)
    d = gate.decide(adm, "fleet.p1.nats", 1100.0, policy, lambda: True)
    assert d.reason == gate.COOLDOWN
    assert gate.decide(adm, "fleet.p1.http", 1100.0, policy, lambda: True).accepted
    gate.clear_cooldowns(store, "fleet.p1.")
    adm = gate.admission(store)
    assert gate.cooling(adm, "fleet.p1.", now=1100.0, cooldown_s=300) == {}
    assert gate.cooling(adm, "fleet.p10.", now=1100.0, cooldown_s=300) == {"http": 200.0}
