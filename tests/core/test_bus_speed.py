"""The results bus stays fast: a finished writer is not waited for, a slow writer holds up no
other file, and a burst costs a few fsyncs per batch rather than two per result."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.core.bus import LEDGER, AgentResult, ResultsBus
from healer.core.bus.ledger import JOURNAL, JOURNAL_KEEP_S
from healer.core.bus.watch import BATCH_MAX
from healer.core.store import FileStore
from healer.core.store.commit import GroupCommit
from healer.testing.loop import drop_result
from healer.testing.wait import wait_for

VALID = {"kind": "diagnose", "target": "mac1", "status": "ok"}
NAME = "heal-diagnose-mac1-1700000000.json"

# Writes the first part of a result in place and holds the file open until told on stdin:
# "finish" writes the rest and closes it.
WRITER = r"""
import sys
path, first, rest = sys.argv[1:4]
fh = open(path, "w")
fh.write(first)
fh.flush()
print("half", flush=True)
if sys.stdin.readline().strip() == "finish":
    fh.write(rest)
    fh.close()
"""


class Bus:
    """A ResultsBus on a file store in ``root``, and what its subscriber got."""

    def __init__(self, root: Path, store: FileStore | None = None, **kw: float):
        self.results = root / "results"
        self.results.mkdir(exist_ok=True)
        self.store = store or FileStore(root / "state")
        self.got: list[AgentResult] = []
        self._lock = threading.Lock()
        self.bus = ResultsBus(self.results, self.store, **kw)
        self.bus.subscribe(self._on)

    def _on(self, result: AgentResult) -> None:
        with self._lock:
            self.got.append(result)

    def count(self) -> int:
        with self._lock:
            return len(self.got)


@pytest.fixture
def buses(tmp_path: Path) -> Iterator[list[Bus]]:
    made: list[Bus] = []
    yield made
    for b in made:
        b.bus.stop()


@pytest.fixture
def half_writer(tmp_path: Path) -> Iterator[Any]:
    """half_writer(path) → a process holding ``path`` open, half written; ``finish(proc)``."""
    procs: list[subprocess.Popen[str]] = []
    text = json.dumps(VALID)

    def start(path: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), text[:20], text[20:]],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "half\n"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


def _finish(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("finish\n")
    proc.stdin.close()
    assert proc.wait(30) == 0


def test_a_finished_writer_is_applied_without_waiting_the_settle_time(
        tmp_path: Path, buses: list[Bus], half_writer: Any) -> None:
    """A result written in place, half of it first: once its writer writes the rest and
    closes the file, it is applied at once — not after the next look, which settle_s puts
    5 s away here."""
    b = Bus(tmp_path, settle_s=20.0, max_wait_s=60.0, rescan_s=60.0)
    buses.append(b)
    b.bus.start()
    proc = half_writer(b.results / NAME)
    wait_for(lambda: b.bus.stats.waits >= 1)  # the bus saw it half written and waits
    assert b.bus._poll_s >= 5.0  # the next look without an event
    finished = time.monotonic()
    _finish(proc)
    wait_for(lambda: b.count() == 1, timeout=4.0)
    assert time.monotonic() - finished < 4.0
    assert b.got[0].data == VALID
    wait_for((b.results / "applied" / NAME).exists)
    assert list((b.results / "rejected").iterdir()) == []


def test_a_slow_writer_does_not_delay_other_files(
        tmp_path: Path, buses: list[Bus], half_writer: Any) -> None:
    """A file held open half written waits for its writer; a burst of 300 results that
    lands meanwhile is applied in full around it, and the slow one after its writer ends."""
    b = Bus(tmp_path, settle_s=20.0, max_wait_s=120.0, rescan_s=60.0)
    buses.append(b)
    b.bus.start()
    proc = half_writer(b.results / NAME)
    wait_for(lambda: b.bus.stats.waits >= 1)
    for i in range(300):
        drop_result(b.results, "diagnose", f"host{i}", epoch=1700000100 + i)
    wait_for(lambda: b.count() == 300, timeout=60)
    assert NAME in b.bus.partials.waiting()  # still waited for, not rejected, not applied
    assert all(r.target != "mac1" for r in b.got)
    _finish(proc)
    wait_for(lambda: b.count() == 301, timeout=10)
    assert list((b.results / "rejected").iterdir()) == []


def test_fsyncs_are_batched(tmp_path: Path, buses: list[Bus],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    """300 results waiting at start-up are applied with two fsyncs per batch (the journal
    record and its folder), not two per result. The applier commits what was checked while
    it was busy as one batch, so there are at most as many batches as the checker's takes
    of BATCH_MAX files (fewer when the checker runs ahead)."""
    b = Bus(tmp_path, rescan_s=60.0)
    buses.append(b)
    n = 300
    for i in range(n):
        (b.results / f"heal-diagnose-host{i}-{1700000100 + i}.json").write_text(
            json.dumps({**VALID, "target": f"host{i}"}))
    calls = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        calls.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    b.bus.start()
    wait_for(lambda: b.count() == n, timeout=60)
    assert b.bus.drain(30)
    rounds = b.bus.stats.commits  # the mover's: one journal record for the batches since
    assert 1 <= rounds <= math.ceil(n / BATCH_MAX)
    assert len(calls) == 2 * rounds, len(calls)  # was 2 * n = 600
    # Each round's journal record, and each batch's own (for a crash during its delivery,
    # not flushed).
    assert len(b.store.keys(LEDGER)) == n and len(b.store.keys(JOURNAL)) > rounds
    assert len(list((b.results / "applied").iterdir())) == n


def test_a_power_loss_after_a_batch_loses_no_result(tmp_path: Path, buses: list[Bus]) -> None:
    """The ledger records of a batch are not flushed one by one: a power loss may take one
    (gone) or leave it empty. The next start puts both back from the batch's journal record
    and delivers them again; the others are not delivered twice."""
    first = Bus(tmp_path, rescan_s=60.0)
    for i in range(5):
        drop_result(first.results, "diagnose", f"host{i}", epoch=1700000100 + i)
    first.bus.start()
    wait_for(lambda: first.count() == 5)
    assert first.bus.drain(10)
    first.bus.stop()
    assert first.bus.stats.commits == 1
    lost, emptied = first.got[1].id, first.got[3].id
    # Files written in one clock tick share an mtime: the batch's order is not the writing order.
    targets = (first.got[1].target, first.got[3].target)
    records = tmp_path / "state" / "records" / LEDGER
    (records / f"{lost}.json").unlink()
    (records / f"{emptied}.json").write_bytes(b"")

    second = Bus(tmp_path, rescan_s=60.0)
    buses.append(second)
    second.bus.start()
    assert sorted(r.id for r in second.got) == sorted([lost, emptied])
    for rid in (lost, emptied):
        rec = second.store.get(LEDGER, rid)
        assert rec is not None and rec.data["target"] in targets
    assert second.store.members(second.bus.pending_set) == []


def test_old_journal_records_are_pruned(tmp_path: Path, buses: list[Bus]) -> None:
    """Journal records go once the kernel has long written their batch's records back."""
    b = Bus(tmp_path, rescan_s=60.0)
    buses.append(b)
    for i in range(3):
        drop_result(b.results, "diagnose", f"host{i}", epoch=1700000100 + i)
    b.bus.start()
    wait_for(lambda: b.count() == 3)
    assert b.bus.drain(10)
    assert len(b.store.keys(JOURNAL)) == 2  # the batch's own, and the mover's round's
    assert b.bus.prune_journal() == 0
    assert b.bus.prune_journal(now=time.time() + JOURNAL_KEEP_S + 1) == 2
    assert b.store.keys(JOURNAL) == [] and len(b.store.keys(LEDGER)) == 3


class SlowDisk:
    """A bus whose every fsync waits until the test lets the disk go."""

    def __init__(self, root: Path, buses: list[Bus]):
        self.disk = threading.Event()
        self.synced: list[int] = []
        self.store = FileStore(root / "state", commit=GroupCommit(fsync=self._fsync))
        self.b = Bus(root, self.store, rescan_s=60.0)
        self.results = self.b.results
        buses.append(self.b)
        self.b.bus.start()

    def _fsync(self, fd: int) -> None:
        assert self.disk.wait(30), "the test never let the disk go"
        os.fsync(fd)
        self.synced.append(fd)


def test_a_slow_disk_delays_only_the_move_never_the_delivery(tmp_path: Path,
                                                             buses: list[Bus]) -> None:
    """Subscribers get a batch as soon as its ledger records exist; the files move to
    ``applied/`` only once its journal is on disk (so a power loss meanwhile finds them in the
    results dir, to be applied again)."""
    slow = SlowDisk(tmp_path, buses)
    b, results, store, disk, synced = slow.b, slow.results, slow.store, slow.disk, slow.synced
    for i in range(5):
        drop_result(results, "diagnose", f"host{i}", epoch=1700000100 + i)
    wait_for(lambda: b.count() == 5, timeout=30)  # delivered, the disk still busy
    assert not synced
    assert len(list(results.glob("heal-*.json"))) == 5  # not moved before the journal is down
    assert not list((results / "applied").iterdir())
    assert len(store.keys(LEDGER)) == 5
    disk.set()
    wait_for(lambda: len(list((results / "applied").iterdir())) == 5, timeout=30)
    assert b.bus.drain(30)
    assert synced and store.members(b.bus.pending_set) == []
    assert b.count() == 5  # nothing delivered twice


def test_a_file_replaced_before_its_move_is_applied_in_turn(tmp_path: Path,
                                                            buses: list[Bus]) -> None:
    """An agent writes its result again under the same name while the first one waits for
    the disk: the new file is not moved to ``applied/`` unread in the first one's place; it
    is checked and applied in turn."""
    slow = SlowDisk(tmp_path, buses)
    drop_result(slow.results, "diagnose", "host1", epoch=1700000100, summary="first")
    wait_for(lambda: slow.b.count() == 1, timeout=30)
    path = drop_result(slow.results, "diagnose", "host1", epoch=1700000100, summary="second")
    slow.disk.set()
    wait_for(lambda: slow.b.count() == 2, timeout=30)
    assert slow.b.bus.drain(30)
    assert [r.data["summary"] for r in slow.b.got] == ["first", "second"]
    assert not path.exists()
    assert json.loads((slow.results / "applied" / path.name).read_text())["summary"] == "second"
