"""An attempt on hold (healer's own model access is held) keeps its key but no slot, feeds
nothing to the breaker, starts no cooldown, and comes back only through the gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from healer.core import gate
from healer.core.store import FileStore

POLICY = gate.Policy(kind="code", cooldown_s=3600, max_concurrent=1, breaker_window=1)


def _held(tmp_path: Path) -> FileStore:
    """Key ``k1`` admitted as attempt ``a1`` (1000 s), then put on hold (1010 s)."""
    store = FileStore(tmp_path)
    assert gate.admit(store, "k1", lambda: "a1", 1000.0, POLICY, lambda: True,
                      record=lambda _: None).accepted
    gate.settle(store, "k1", "a1", now=1010.0, kind="code", ended=False, on_hold=True)
    return store


def test_a_held_key_takes_no_slot_and_teaches_nothing(tmp_path: Path) -> None:
    adm = gate.admission(_held(tmp_path))
    assert adm["active"] == {} and gate.holding(adm) == {"k1": "a1"}
    assert adm["outcomes"] == [] and adm["ended"] == {}
    assert gate.decide(adm, "k2", 1020.0, POLICY, lambda: True).accepted  # the slot is free


def test_a_duplicate_joins_the_held_attempt(tmp_path: Path) -> None:
    d = gate.decide(gate.admission(_held(tmp_path)), "k1", 1020.0, POLICY, lambda: True)
    assert d.reason == gate.ALREADY_INVESTIGATING and d.attempt_id == "a1"


def test_resume_asks_the_gate_and_keeps_the_hold_when_it_says_no(tmp_path: Path) -> None:
    store = _held(tmp_path)
    d = gate.resume(store, "k1", "a1", 1020.0, POLICY, lambda: False, record=lambda _: None)
    assert d.reason == gate.NO_MODEL
    assert gate.holding(gate.admission(store)) == {"k1": "a1"}
    seen: list[str] = []
    d = gate.resume(store, "k1", "a1", 1030.0, POLICY, lambda: True, record=seen.append)
    assert d.accepted and d.attempt_id == "a1" and seen == ["a1"]
    adm = gate.admission(store)
    assert gate.holding(adm) == {} and adm["active"]["k1"]["attempt_id"] == "a1"


def test_resume_is_held_by_the_cap_like_any_start(tmp_path: Path) -> None:
    store = _held(tmp_path)
    assert gate.admit(store, "k2", lambda: "a2", 1020.0, POLICY, lambda: True,
                      record=lambda _: None).accepted
    d = gate.resume(store, "k1", "a1", 1030.0, POLICY, lambda: True, record=lambda _: None)
    assert d.reason == gate.CONCURRENCY_CAP
    assert gate.holding(gate.admission(store)) == {"k1": "a1"}


def test_a_failed_record_puts_it_back_on_hold(tmp_path: Path) -> None:
    store = _held(tmp_path)

    def broken(_: str) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError):
        gate.resume(store, "k1", "a1", 1030.0, POLICY, lambda: True, record=broken)
    adm = gate.admission(store)
    assert adm["active"] == {} and gate.holding(adm) == {"k1": "a1"}
