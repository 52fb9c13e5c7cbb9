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


def _claim(store: FileStore, key: str, policy: gate.Policy, now: float, aid: str) -> gate.Decision:
    return gate.admit(store, key, lambda: aid, now, policy, lambda: True, record=lambda _: None)


def test_reconcile_judges_only_its_own_kinds_entries(tmp_path: Path) -> None:
    """A play remediation and a fleet episode outlive 60 s and have no code attempt: the code
    kind's reconcile leaves them (and so the global cap still counts the play run)."""
    store = FileStore(tmp_path)
    play = gate.Policy(kind="play", cooldown_s=0, max_concurrent=100, breaker_window=0)
    fleet = gate.Policy(kind="fleet", cooldown_s=0, max_concurrent=100, breaker_window=0,
                        holds_slot=False)
    code = gate.Policy(kind="code", cooldown_s=0, max_concurrent=100, global_max=1)
    assert _claim(store, "play.k", play, 1000.0, "run-1").accepted
    assert _claim(store, "fleet-episode.n2", fleet, 1000.0, "ep-1").accepted
    assert _claim(store, "code.gone", code, 1000.0 - 1, "att-0").reason == gate.CONCURRENCY_CAP
    gate.reconcile(store, {}, running=frozenset({"investigating"}), now=5000.0)
    assert set(gate.admission(store)["active"]) == {"play.k", "fleet-episode.n2"}
    # The fleet episode takes no slot; the play run does, so code is held at the cap of 1.
    d = gate.decide(gate.admission(store), "code.x", 5000.0, code, lambda: True)
    assert d.reason == gate.CONCURRENCY_CAP and d.message.startswith("Concurrency cap "
                                                                       "reached: 1 ")
    gate.reconcile(store, {}, running=frozenset({"running"}), now=5000.0, kind="play")
    assert set(gate.admission(store)["active"]) == {"fleet-episode.n2"}
    assert gate.decide(gate.admission(store), "code.x", 5000.0, code, lambda: True).accepted


def test_reconcile_drops_a_code_entry_with_no_attempt_after_a_minute(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    code = gate.Policy(kind="code", cooldown_s=0, max_concurrent=100)
    assert _claim(store, "a", code, 1000.0, "att-1").accepted
    gate.reconcile(store, {}, running=frozenset({"investigating"}), now=1030.0)
    assert "a" in gate.admission(store)["active"]
    gate.reconcile(store, {}, running=frozenset({"investigating"}), now=1061.0)
    assert gate.admission(store)["active"] == {}
