"""The ledger's shared counters (``incident-stats/all``) and recently-changed ring
(``incident-index/recent``) are folded in memory and written as deltas: two processes
opening and moving incidents at once lose none of each other's counts or ring entries, every
ledger of one process shows the unwritten counts at once, and what was gathered is written
within the window even if nothing else happens."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

from healer.core.incidents import HEALING, INDEX, RECENT, STATS, STATS_KEY, Ledger, Signal
from healer.core.store import FileStore
from healer.testing.wait import wait_for


def _open_many(root: str, tag: str, n: int, ready: Any, go: Any) -> None:
    store = FileStore(root)
    book = Ledger(store)
    ready.put(tag)
    go.wait(60)
    for i in range(n):
        sig = Signal(kind="code", key=f"{tag}-{i}", source="race")
        book.receive(sig)
        if i % 3 == 0:
            book.started(sig.id, f"run-{tag}-{i}", "healing")
        if i % 5 == 0:
            book.flush()  # interleave compare-and-sets with the other process
    # exit: the rest is written by the atexit hook


def test_two_processes_lose_none_of_each_others_counts(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, go = ctx.Queue(), ctx.Event()
    n = 60
    procs = [ctx.Process(target=_open_many, args=(str(tmp_path), tag, n, ready, go))
             for tag in ("a", "b")]
    for p in procs:
        p.start()
    assert {ready.get(timeout=60) for _ in procs} == {"a", "b"}
    go.set()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs)
    store = FileStore(tmp_path)
    stats = store.require(STATS, STATS_KEY).data
    healing = 2 * len(range(0, n, 3))
    assert stats["opened"] == {"code": 2 * n}
    assert stats["status"]["code"] == {"open": 2 * n - healing, "healing": healing}
    ring = store.require(INDEX, RECENT).data["ids"]
    assert sorted(ring) == sorted(f"code-{t}-{i}" for t in "ab" for i in range(n))
    assert len(Ledger(store).ids(HEALING)) == healing


def test_every_ledger_of_the_process_counts_at_once(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    writer = Ledger(store)
    writer.receive(Signal(kind="code", key="k1", source="t"))
    reader = Ledger(FileStore(tmp_path))  # another object on the same state dir
    assert store.get(STATS, STATS_KEY) is None  # not written yet
    assert reader.stats()["status"]["code"] == {"open": 1}
    assert reader.list().total == 1 and reader.list().items[0]["id"] == "code-k1"


def test_gathered_counts_are_written_within_the_window(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    Ledger(store).receive(Signal(kind="code", key="k1", source="t"))
    wait_for(lambda: store.get(STATS, STATS_KEY) is not None, timeout=10)
    assert store.require(STATS, STATS_KEY).data["status"]["code"] == {"open": 1}
    assert store.require(INDEX, RECENT).data["ids"] == ["code-k1"]
