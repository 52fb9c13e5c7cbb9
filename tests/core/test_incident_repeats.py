"""Refused repeats are counted in memory and written once a second (``healer.core.repeats``):
never a stale read, never a lost count, whichever process writes the incident meanwhile."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from healer.core import gate
from healer.core.incidents import INCIDENTS, Ledger, Signal
from healer.core.store import FileStore
from healer.errors import StoreError
from healer.testing.wait import wait_for

CAP = gate.Decision(gate.CONCURRENCY_CAP, "Concurrency cap reached")


def sig(**kw: Any) -> Signal:
    return Signal(kind="code", key="k1", source="report_error", trust="trusted", **kw)


def stored(root: Path) -> dict[str, Any]:
    """The incident as another process would read it (a store of its own)."""
    rec = FileStore(root).get(INCIDENTS, "code-k1")
    assert rec is not None
    return rec.data


def test_repeats_cost_no_write_and_count_at_once_in_process(tmp_path: Path) -> None:
    """100 refused repeats: the record is not rewritten for them, this process's reads
    count all of them at once, and within a second every process does."""
    root = tmp_path / "state"
    book = Ledger(FileStore(root))
    book.receive(sig(), decision=CAP)
    book.receive(sig(), decision=CAP)  # reads the record into the cache
    revision = FileStore(root).require(INCIDENTS, "code-k1").revision
    for _ in range(100):
        receipt = book.receive(sig(), decision=CAP)
    assert receipt.action == "duplicate" and receipt.incident is not None
    assert receipt.incident["count"] == 102
    assert FileStore(root).require(INCIDENTS, "code-k1").revision == revision
    mine = book.get("code-k1")
    assert mine is not None and mine["count"] == 102
    assert mine["rejections"][gate.CONCURRENCY_CAP] == 102
    wait_for(lambda: stored(root)["count"] == 102, timeout=10)
    assert stored(root)["rejections"][gate.CONCURRENCY_CAP] == 102
    assert book.stats()["decisions"]["code"][gate.CONCURRENCY_CAP] == 102


def test_another_processes_write_is_seen_by_the_next_repeat(tmp_path: Path) -> None:
    """The cache is checked against the file before each use: an incident another process
    resolved reopens on the next report, it is not counted as a duplicate of a stale copy."""
    root = tmp_path / "state"
    book = Ledger(FileStore(root))
    for _ in range(3):
        book.receive(sig(), decision=CAP)
    subprocess.run([sys.executable, "-c",
                    "import sys; from healer.core.incidents import Ledger; "
                    "from healer.core.store import FileStore; "
                    "Ledger(FileStore(sys.argv[1])).resolve('code-k1', 'elsewhere')", str(root)],
                   check=True, timeout=60)
    receipt = book.receive(sig(), decision=CAP)
    assert receipt.action == "reopened"
    wait_for(lambda: stored(root)["count"] == 4, timeout=10)
    assert stored(root)["status"] == "open"


def test_counts_add_to_what_other_processes_counted(tmp_path: Path) -> None:
    """Counts are written as deltas: two ledgers counting at once lose none."""
    root = tmp_path / "state"
    one, two = Ledger(FileStore(root)), Ledger(FileStore(root))
    one.receive(sig(), decision=CAP)
    for _ in range(10):
        one.receive(sig(), decision=CAP)
        two.receive(sig(), decision=CAP)
    one.repeats.flush()
    two.repeats.flush()
    assert stored(root)["count"] == 21


def test_a_later_verdict_is_not_overwritten_by_counted_repeats(tmp_path: Path) -> None:
    """Repeats counted under one verdict, then this process records another: the repeats
    are written first, and the new verdict stands."""
    root = tmp_path / "state"
    book = Ledger(FileStore(root))
    for _ in range(5):
        book.receive(sig(), decision=CAP)
    book.decided("code-k1", gate.Decision(gate.ACCEPTED, "dispatched", "a1"))
    data = stored(root)
    assert data["gate"]["reason"] == gate.ACCEPTED and data["count"] == 5
    book.repeats.flush()
    assert stored(root)["gate"]["reason"] == gate.ACCEPTED


def test_counts_are_written_when_the_process_exits(tmp_path: Path) -> None:
    root = tmp_path / "state"
    script = ("import sys; from healer.core import gate; "
              "from healer.core.incidents import Ledger, Signal; "
              "from healer.core.store import FileStore; "
              "book = Ledger(FileStore(sys.argv[1])); "
              "s = Signal(kind='code', key='k1', source='report_error', trust='trusted'); "
              "d = gate.Decision(gate.CONCURRENCY_CAP, 'cap'); "
              "[book.receive(s, decision=d) for _ in range(50)]")
    subprocess.run([sys.executable, "-c", script, str(root)], check=True, timeout=60)
    assert stored(root)["count"] == 50


def test_a_symlink_in_place_of_a_record_is_refused(tmp_path: Path) -> None:
    """The stamped read opens the record without following a symlink healer did not make."""
    store = FileStore(tmp_path / "state")
    store.put(INCIDENTS, "other", {"x": 1})
    target = store.root / "records" / INCIDENTS / "other.json"
    (store.root / "records" / INCIDENTS / "code-k1.json").symlink_to(target)
    with pytest.raises(StoreError, match="not a record file"):
        store.get_stamped(INCIDENTS, "code-k1")


def test_stamped_read_names_the_version_read(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "state")
    assert store.get_stamped(INCIDENTS, "nope") == (None, None)
    store.put(INCIDENTS, "a", {"n": 1})
    rec, stamp = store.get_stamped(INCIDENTS, "a")
    assert rec is not None and rec.data == {"n": 1} and stamp == store.stamp(INCIDENTS, "a")
    store.put(INCIDENTS, "a", {"n": 2})
    assert store.stamp(INCIDENTS, "a") != stamp


def test_the_counters_count_while_they_are_being_written(tmp_path: Path) -> None:
    """A flush has taken the counts out of memory and not yet stored them: a read of the
    counters meanwhile waits for it instead of missing them."""
    import threading

    from healer.core.incidents import STATS

    store = FileStore(tmp_path / "state")
    book = Ledger(store)
    book.receive(sig(), decision=CAP)
    writing, release = threading.Event(), threading.Event()
    real_update = store.update

    def slow_update(kind: str, key: str, fn: Any, **kw: Any) -> Any:
        if kind == STATS:
            writing.set()
            release.wait(10)
        return real_update(kind, key, fn, **kw)

    store.update = slow_update  # type: ignore[method-assign]
    flusher = threading.Thread(target=book.flush)
    flusher.start()
    assert writing.wait(10)
    seen: list[int] = []
    reader = threading.Thread(
        target=lambda: seen.append(book.stats()["decisions"]["code"][gate.CONCURRENCY_CAP]))
    reader.start()
    reader.join(0.5)
    assert reader.is_alive()  # waits for the write under way (its counts are in neither)
    release.set()
    flusher.join(10)
    reader.join(10)
    assert seen == [1]
