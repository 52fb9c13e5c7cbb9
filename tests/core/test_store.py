"""The file store: revisions, compare-and-set, safe names, and many writers at once."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pytest

from healer.core.store import FileStore
from healer.errors import ConflictError, UnsafeNameError


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "state")


class TestRecords:
    def test_put_get_revision(self, store: FileStore) -> None:
        """Every write bumps the revision; get returns the latest data."""
        r1 = store.put("incidents", "inc-1", {"n": 1})
        r2 = store.put("incidents", "inc-1", {"n": 2})
        assert (r1.revision, r2.revision) == (1, 2)
        got = store.get("incidents", "inc-1")
        assert got is not None and got.data == {"n": 2} and got.revision == 2

    def test_missing_is_none(self, store: FileStore) -> None:
        assert store.get("incidents", "nope") is None
        assert store.keys("incidents") == []

    def test_create_only_once(self, store: FileStore) -> None:
        """create() wins once; the second creator gets a ConflictError."""
        store.create("attempts", "fp1", {"who": "a"})
        with pytest.raises(ConflictError):
            store.create("attempts", "fp1", {"who": "b"})
        assert store.require("attempts", "fp1").data == {"who": "a"}

    def test_cas_mismatch(self, store: FileStore) -> None:
        """A write naming a stale revision is refused and changes nothing."""
        store.put("sessions", "p1", {"v": 1})
        store.put("sessions", "p1", {"v": 2})
        with pytest.raises(ConflictError) as info:
            store.put("sessions", "p1", {"v": 3}, expected_revision=1)
        assert info.value.actual == 2
        assert store.require("sessions", "p1").data == {"v": 2}

    def test_update_read_modify_write(self, store: FileStore) -> None:
        """update() applies a function to the current data; None leaves it alone."""
        store.update("c", "k", lambda d: {"n": (d or {"n": 0})["n"] + 1})
        store.update("c", "k", lambda d: {"n": d["n"] + 1})
        assert store.update("c", "k", lambda d: None).data == {"n": 2}  # type: ignore[union-attr]

    def test_delete_and_keys(self, store: FileStore) -> None:
        for k in ("b", "a"):
            store.put("x", k, {})
        assert store.keys("x") == ["a", "b"]
        assert store.delete("x", "a") is True
        assert store.delete("x", "a") is False
        assert store.keys("x") == ["b"]

    def test_sets(self, store: FileStore) -> None:
        """Member sets index records without reading them (e.g. the active sessions)."""
        store.add_member("active", "p1")
        store.add_member("active", "p2")
        store.add_member("active", "p1")
        store.remove_member("active", "p2")
        store.remove_member("active", "never")
        assert store.members("active") == ["p1"]

    @pytest.mark.parametrize("key", ["..", "../x", "a/b", "", "a\x00b", "a\nb", ".hidden",
                                     "x" * 200, "a b", "a;b"])
    def test_unsafe_keys_refused(self, store: FileStore, key: str) -> None:
        """Keys that could escape the state dir or confuse a shell are refused."""
        with pytest.raises(UnsafeNameError):
            store.put("incidents", key, {})
        assert not any((store.root.parent).glob("x*"))

    def test_written_atomically(self, store: FileStore) -> None:
        """No temp files are left behind and the record file is complete JSON."""
        store.put("k", "r", {"big": "x" * 100_000})
        files = list((store.root / "records" / "k").iterdir())
        assert [f.name for f in files] == ["r.json"]
        assert json.loads(files[0].read_text())["data"]["big"] == "x" * 100_000


def _increment(root: str, n: int, worker: int, q: mp.Queue) -> None:  # type: ignore[type-arg]
    st = FileStore(root)
    wins = 0
    for i in range(n):
        st.update("counters", "shared", lambda d: {"n": (d or {"n": 0})["n"] + 1,
                                                     "pad": "y" * 5000})
        st.put("own", f"w{worker}-{i}", {"w": worker, "i": i})
        try:
            st.create("races", f"r{i}", {"winner": worker})
            wins += 1
        except ConflictError:
            pass
    q.put(wins)


class TestConcurrency:
    def test_eight_processes(self, tmp_path: Path) -> None:
        """8 processes writing at once: no lost update, no torn record, one winner per race."""
        root = str(tmp_path / "state")
        n = 40
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        procs = [ctx.Process(target=_increment, args=(root, n, w, q)) for w in range(8)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            assert p.exitcode == 0
        wins = sum(q.get(timeout=5) for _ in procs)
        st = FileStore(root)
        assert st.require("counters", "shared").data["n"] == 8 * n
        assert st.require("counters", "shared").revision == 8 * n
        assert len(st.keys("own")) == 8 * n
        assert wins == n and len(st.keys("races")) == n
        for rec in st.list("own"):
            assert rec.data["w"] in range(8)
