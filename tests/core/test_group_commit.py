"""The file store's group commit: a record is visible to every process the moment ``put``
returns; its fsyncs (the file and its folder) are batched by one flusher; a caller that waits
(``sync()``, or every write under ``store.sync: always``) goes on only once its write is on
disk; a failed fsync is reported to whoever waits, never swallowed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from healer.config import Settings
from healer.core.store import FileStore, open_store
from healer.core.store.commit import GroupCommit
from healer.errors import StoreError


class Recorder:
    """An fsync that notes which file or folder it synced (by the fd's path)."""

    def __init__(self, *, gate: threading.Event | None = None, fail: bool = False):
        self.synced: list[str] = []
        self.gate = gate
        self.fail = fail

    def __call__(self, fd: int) -> None:
        if self.gate is not None:
            self.gate.wait(30)
        if self.fail:
            raise OSError(5, "Input/output error")
        self.synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        os.fsync(fd)


def test_a_burst_of_writes_shares_one_batch_of_fsyncs(tmp_path: Path) -> None:
    """200 durable writes (100 new records, one record rewritten 100 times) cost one fsync per
    distinct file and one per folder — 103 — in one batch, not two per write (400)."""
    rec = Recorder()
    commit = GroupCommit(window_s=60, fsync=rec)  # nothing syncs until someone waits
    store = FileStore(tmp_path, commit=commit)
    for i in range(100):
        store.create("session", f"play-{i}", {"i": i})
        store.put("counter", "all", {"n": i})
    assert commit.batches == 0 and commit.pending() == 200
    store.sync()
    assert commit.batches == 1 and commit.pending() == 0
    assert len(rec.synced) == 103
    assert sorted(set(rec.synced)) == sorted(rec.synced)  # each path once
    assert str(tmp_path / "records" / "session") in rec.synced
    assert str(tmp_path / "records" / "counter" / "all.json") in rec.synced


def test_under_always_a_write_returns_only_once_it_is_on_disk(tmp_path: Path) -> None:
    rec = Recorder()
    store = FileStore(tmp_path, sync="always", commit=GroupCommit(window_s=60, fsync=rec))
    store.create("session", "play-1", {"a": 1})
    assert str(tmp_path / "records" / "session" / "play-1.json") in rec.synced
    assert str(tmp_path / "records" / "session") in rec.synced


def test_concurrent_waiters_share_their_fsyncs(tmp_path: Path) -> None:
    """Eight threads writing under ``always`` at once: fewer fsyncs than two per write."""
    rec = Recorder()
    commit = GroupCommit(window_s=0.05, fsync=rec)
    store = FileStore(tmp_path, sync="always", commit=commit)
    threads = [threading.Thread(target=lambda t=t: [store.create("s", f"t{t}-{i}", {})
                                                    for i in range(20)]) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(store.keys("s")) == 160
    assert commit.pending() == 0
    assert len(rec.synced) < 2 * 160


def test_readers_in_another_process_see_a_write_before_it_is_synced(tmp_path: Path) -> None:
    gate = threading.Event()  # the flusher's fsync is held until the reader answered
    rec = Recorder(gate=gate)
    store = FileStore(tmp_path, commit=GroupCommit(window_s=0, fsync=rec))
    store.create("session", "play-1", {"status": "active"})
    store.put("session", "play-1", {"status": "done"}, expected_revision=1)
    code = ("import sys; from healer.core.store import FileStore; "
            "r = FileStore(sys.argv[1]).get('session', 'play-1'); "
            "print(r.revision, r.data['status'])")
    try:
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                             text=True, timeout=60, check=True).stdout
        assert out.split() == ["2", "done"]
        assert rec.synced == []  # not on disk yet, and visible all the same
    finally:
        gate.set()
    store.sync()
    assert str(tmp_path / "records" / "session" / "play-1.json") in rec.synced


CHILD = r"""
import os, signal, sys
from healer.core.store import FileStore
from healer.core.store.commit import GroupCommit

def fsync(fd):
    os.fsync(fd)
    print("SYNCED", os.readlink(f"/proc/self/fd/{fd}"), flush=True)

store = FileStore(sys.argv[1], commit=GroupCommit(window_s=60, fsync=fsync))
for i in range(50):
    store.create("attempts", f"a{i}", {"i": i})
store.sync()
print("ACK", flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no atexit, no flush: the acknowledgement must hold
"""


def test_a_write_acknowledged_as_durable_survives_its_writer_killed(tmp_path: Path) -> None:
    """The writer waits for ``sync()``, says so, and is killed at once: every record it wrote
    was fsynced (file and folder) before the acknowledgement, and reads back whole."""
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    lines = proc.stdout.splitlines()
    assert "ACK" in lines
    before_ack = {line.split(" ", 1)[1] for line in lines[:lines.index("ACK")]
                  if line.startswith("SYNCED ")}
    folder = tmp_path / "records" / "attempts"
    assert str(folder) in before_ack
    assert {str(folder / f"a{i}.json") for i in range(50)} <= before_ack
    store = FileStore(tmp_path)
    assert [store.require("attempts", f"a{i}").data for i in range(50)] == [
        {"i": i} for i in range(50)]


def test_a_failed_fsync_is_an_error_for_whoever_waits(tmp_path: Path) -> None:
    store = FileStore(tmp_path, commit=GroupCommit(window_s=60, fsync=Recorder(fail=True)))
    store.create("session", "play-1", {})
    with pytest.raises(StoreError, match="could not be synced"):
        store.sync()
    assert store.get("session", "play-1") is not None  # visible: only durability is in doubt


def test_the_sync_setting_chooses_the_mode_and_refuses_nonsense(tmp_path: Path) -> None:
    settings = Settings(state_dir=str(tmp_path))
    assert settings.store.sync == "batched"
    settings.store.sync = "always"
    assert open_store(settings).writes_wait
    with pytest.raises(StoreError, match=r"store\.sync must be one of batched, always"):
        FileStore(tmp_path, sync="sometimes")
