"""The results bus: valid results applied once, bad files set aside with a reason."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.core import seeds
from healer.core.bus import LEDGER, AgentResult, ResultsBus
from healer.testing.loop import drop_result
from healer.testing.wait import wait_for

VALID = {"kind": "diagnose", "target": "mac1", "status": "ok"}
OLD = time.time() - 3600


class Harness:
    def __init__(self, root: Path, backend: tuple[str, Any], *, settle_s: float = 0.3):
        self.results = root / "results"
        self.fleet = root / "fleet"
        self.store = backend[1]()
        self.got: list[AgentResult] = []
        self.seeds: list[seeds.Seed] = []
        self.lock = threading.Lock()
        bus_class: Any = ResultsBus
        if backend[0] == "jetstream":
            from healer.core.jetstream import JetStreamResultsBus

            bus_class = JetStreamResultsBus
        self.bus = bus_class(self.results, self.store, settle_s=settle_s, rescan_s=0.5,
                             max_file_bytes=64 * 1024, fleet_dir=self.fleet, node="me")
        self.bus.subscribe(self._on)
        self.bus.subscribe_seeds(self.seeds.append)

    def _on(self, r: AgentResult) -> None:
        with self.lock:
            self.got.append(r)

    def rejected(self) -> list[str]:
        d = self.results / "rejected"
        return sorted(p.name for p in d.iterdir() if not p.name.endswith(".reason"))

    def reason(self, name: str) -> str:
        return (self.results / "rejected" / f"{name}.reason").read_text()


@pytest.fixture
def h(tmp_path: Path, backend) -> Iterator[Harness]:  # type: ignore[no-untyped-def]
    harness = Harness(tmp_path, backend)
    harness.results.mkdir()
    yield harness
    harness.bus.stop()


class TestApplied:
    def test_rename_into_dir(self, h: Harness) -> None:
        """A result written as temp file + rename is applied and moved to applied/."""
        h.bus.start()
        path = drop_result(h.results, "diagnose", "mac1", status="diagnosed",
                           channels={"nats": {"ok": False, "detail": "refused"}})
        wait_for(lambda: len(h.got) == 1)
        r = h.got[0]
        assert (r.kind, r.target, r.status) == ("diagnose", "mac1", "diagnosed")
        assert r.data["channels"]["nats"]["ok"] is False
        assert not path.exists() and (h.results / "applied" / path.name).exists()
        assert h.store.get(LEDGER, r.id) is not None
        assert h.store.members(h.bus.pending_set) == []

    def test_slow_writer(self, h: Harness) -> None:
        """A file written in pieces is applied once it is whole, not rejected half-way."""
        h.bus.start()
        path = h.results / "heal-diagnose-mac1-1700000000.json"
        text = json.dumps(VALID)
        with open(path, "w") as fh:
            fh.write(text[:10])
            fh.flush()
            time.sleep(0.15)
            fh.write(text[10:])
        wait_for(lambda: len(h.got) == 1)
        assert h.rejected() == []

    def test_startup_scan(self, h: Harness) -> None:
        """Files that arrived while the loop was down are applied at start, oldest first."""
        for i in range(5):
            p = drop_result(h.results, "diagnose", f"mac{i}", epoch=1700000000 + i)
            os.utime(p, (OLD + i, OLD + i))
        h.bus.start()
        wait_for(lambda: len(h.got) == 5)
        assert [r.target for r in h.got] == [f"mac{i}" for i in range(5)]

    def test_duplicate_applied_once(self, h: Harness) -> None:
        """The same file (name and bytes) dropped twice is applied once."""
        h.bus.start()
        drop_result(h.results, "diagnose", "mac1", epoch=1700000000)
        wait_for(lambda: len(h.got) == 1)
        drop_result(h.results, "diagnose", "mac1", epoch=1700000000)
        wait_for(lambda: h.bus.stats.duplicates == 1)
        assert len(h.got) == 1

    def test_interrupted_delivery_recovered(self, h: Harness) -> None:
        """A result whose delivery a crash interrupted is delivered again at start-up."""
        h.store.add_member(h.bus.pending_set, "abc123")
        h.store.create(LEDGER, "abc123", {"name": "heal-diagnose-mac1-1700000000.json",
                                           "kind": "diagnose", "target": "mac1",
                                           "epoch": 1700000000, "received_at": 1.0,
                                           "data": VALID})
        h.bus.start()
        assert [r.id for r in h.got] == ["abc123"]
        assert h.store.members(h.bus.pending_set) == []

    def test_in_progress_files_left_alone(self, h: Harness) -> None:
        """Dot-files and *.tmp are writes in progress: neither applied nor rejected."""
        (h.results / ".heal-diagnose-mac1-1700000000.json.x1").write_text("{")
        (h.results / "heal-diagnose-mac1-1700000000.json.tmp").write_text("{")
        (h.results / "heal-diagnose-mac1-1700000000.json.tmp.4242.9f3a1c").write_text("{")
        h.bus.start()
        h.bus.rescan()
        assert h.bus.drain(5)
        assert h.got == [] and h.rejected() == []

    def test_subscriber_error_does_not_stop_bus(self, h: Harness) -> None:
        """A failing subscriber is logged; other subscribers and later files still run."""
        def boom(r: AgentResult) -> None:
            raise RuntimeError("subscriber bug")

        h.bus.subscribe(boom)
        h.bus.start()
        drop_result(h.results, "diagnose", "a1", epoch=1700000001)
        drop_result(h.results, "diagnose", "a2", epoch=1700000002)
        wait_for(lambda: len(h.got) == 2)
        assert h.bus.stats.subscriber_errors == 2


def _bad_corpus(results: Path, outside: Path) -> dict[str, str]:
    """name → expected fragment of the reason. Written with old mtimes (not in progress)."""
    def obj(**kw: object) -> bytes:
        return json.dumps({**VALID, **kw}).encode()

    def nested(depth: int) -> bytes:
        return ("[" * depth + "]" * depth).encode()

    n = "heal-diagnose-mac1-17000000{:02d}.json"
    files: dict[str, tuple[bytes, str]] = {
        n.format(1): (b'{"kind": "diagnose", ', "not valid JSON"),
        n.format(2): (b"", "empty"),
        n.format(3): (b"   \n\t", "empty"),
        n.format(4): (b"[]", "expected object"),
        n.format(5): (b'"hello"', "expected object"),
        n.format(6): (b"null", "expected object"),
        n.format(7): (b"42", "expected object"),
        n.format(8): (json.dumps({"target": "mac1", "status": "ok"}).encode(), "'kind'"),
        n.format(9): (json.dumps({"kind": "diagnose", "status": "ok"}).encode(), "'target'"),
        n.format(10): (json.dumps({"kind": "diagnose", "target": "mac1"}).encode(), "'status'"),
        n.format(11): (obj(status="great"), "status: expected one of"),
        n.format(12): (obj(kind=7), "kind: expected string"),
        n.format(13): (obj(target="../etc"), "target"),
        n.format(14): (obj(surprise=True), "unknown key"),
        n.format(15): (obj(actions_taken="restart"), "actions_taken: expected array"),
        n.format(16): (obj(channels={"nats": {"detail": "x"}}), "'ok' is a required"),
        n.format(17): (obj(summary="s" * 5000), "summary"),
        n.format(18): (obj(kind="tunnel"), "name says diagnose/mac1"),
        n.format(19): (obj(target="mac2"), "name says diagnose/mac1"),
        n.format(20): (obj(notes="x" * 70_000), "larger than"),
        n.format(21): (nested(10_000), "nested deeper"),
        n.format(22): (b'{"kind": "diagnose\xff\xfe"}', "not UTF-8"),
        n.format(23): ('{"kind": "diagnose"}'.encode("utf-16"), "not UTF-8"),
        n.format(24): (b"\xef\xbb\xbf" + obj(), "not valid JSON"),
        n.format(25): (obj(actions_taken=["a"] * 201), "actions_taken"),
        n.format(26): (obj(data=[1, 2]), "data: expected object"),
        n.format(27): (obj(timestamp="t" * 100), "timestamp"),
        n.format(28): (obj(status=None), "status"),
        "evil.json": (obj(), "name is not"),
        "heal-diagnose--1700000000.json": (obj(), "name is not"),
        "heal-diagnose-mac 1-1700000000.json": (obj(), "name is not"),
        "heal-diagnose-mac1\n-1700000000.json": (obj(), "name is not"),
        "heal-diagnose-mac1.json": (obj(), "name is not"),
        "heal-DIAGNOSE-mac1-1700000000.json": (obj(), "name is not"),
        "heal-diagnose-mac1-1700000000.json.bak": (obj(), "name is not"),
        "heal-" + "x" * 240 + ".json": (obj(), "name is not"),
        "README": (b"hello", "name is not"),
    }
    expected: dict[str, str] = {}
    for name, (data, fragment) in files.items():
        p = results / name
        p.write_bytes(data)
        os.utime(p, (OLD, OLD))
        expected[name] = fragment
    # A symlink to a file outside the results dir: rejected, and the target untouched.
    link = results / "heal-diagnose-mac1-1700000090.json"
    link.symlink_to(outside)
    expected[link.name] = "symlink"
    os.utime(link, (OLD, OLD), follow_symlinks=False)
    passwd = results / "heal-diagnose-mac1-1700000091.json"
    passwd.symlink_to("/etc/passwd")
    expected[passwd.name] = "symlink"
    fifo = results / "heal-diagnose-mac1-1700000092.json"
    os.mkfifo(fifo)
    os.utime(fifo, (OLD, OLD))
    expected[fifo.name] = "not a regular file"
    return expected


class TestRejected:
    def test_bad_corpus(self, h: Harness, tmp_path: Path) -> None:
        """Every kind of bad file goes to rejected/ with a .reason; the bus keeps working."""
        outside = tmp_path / "outside.json"
        outside.write_text(json.dumps(VALID))
        expected = _bad_corpus(h.results, outside)
        assert len(expected) >= 30
        h.bus.start()
        assert h.bus.drain(20)
        wait_for(lambda: h.bus.stats.rejected == len(expected), timeout=10)
        assert h.got == []
        rejected_dir = h.results / "rejected"
        reasons = {p.read_text().split("\nfile: ")[1].strip(): p.read_text()
                   for p in rejected_dir.glob("*.reason")}
        for name, fragment in expected.items():
            assert repr(name) in reasons, f"{name!r} was not rejected"
            assert fragment in reasons[repr(name)], (name, reasons[repr(name)])
        assert json.loads(outside.read_text()) == VALID  # not moved, not changed
        # Still alive: a good file after all that is applied.
        drop_result(h.results, "diagnose", "mac1")
        wait_for(lambda: len(h.got) == 1)
        assert [p for p in h.results.iterdir() if p.name not in ("applied", "rejected")] == []


class TestSeeds:
    def test_seed_inbox(self, h: Harness) -> None:
        """A seed file for this node is handed over and archived; a bad one is set aside."""
        h.bus.start()
        seeds.write(h.fleet, seeds.Seed(sender="mac2", to="me", subject="hello",
                                        body="Please check the tunnel."))
        wait_for(lambda: len(h.seeds) == 1)
        assert h.seeds[0].subject == "hello" and "tunnel" in h.seeds[0].body
        wait_for(lambda: len(list(h.fleet.glob("me/archive/*.md"))) == 1)
        bad = h.fleet / "me" / "20261129-120000-from-mac2.md"
        bad.write_text("no front matter here\n")
        wait_for(lambda: (h.fleet / "me" / "rejected" / bad.name).exists())
        assert len(h.seeds) == 1
