"""The results bus: valid results applied once, bad files set aside with a reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.core import seeds
from healer.core.bus import LEDGER, AgentResult, ResultsBus
from healer.core.files import atomic_create_bytes, atomic_write_bytes
from healer.testing.loop import drop_result
from healer.testing.wait import wait_for

VALID = {"kind": "diagnose", "target": "mac1", "status": "ok"}
OLD = time.time() - 3600


class Harness:
    def __init__(self, root: Path, backend: tuple[str, Any], *, settle_s: float = 0.3,
                 max_wait_s: float = 20.0):
        self.backend = backend[0]
        self.results = root / "results"
        self.fleet = root / "fleet"
        self.store = backend[1]()
        self.got: list[AgentResult] = []
        self.seeds: list[seeds.Seed] = []
        self.lock = threading.Lock()
        bus_class: Any = ResultsBus
        if backend[0] == "jetstream":
            from healer.core.bus.jetstream import JetStreamResultsBus

            bus_class = JetStreamResultsBus
        self.bus = bus_class(self.results, self.store, settle_s=settle_s, rescan_s=0.5,
                             max_wait_s=max_wait_s, max_file_bytes=64 * 1024,
                             fleet_dir=self.fleet, node="me")
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

    def wait_rejected(self, name: str, timeout: float = 30.0) -> str:
        """Wait until ``name`` is in rejected/ with its .reason (written after the move)."""
        reason = self.results / "rejected" / f"{name}.reason"
        wait_for(reason.exists, timeout=timeout)
        return reason.read_text()


@pytest.fixture
def make(tmp_path: Path, backend) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    """make(**bus options) → a Harness (one per test), stopped afterwards."""
    made: list[Harness] = []

    def _make(**kw: float) -> Harness:
        harness = Harness(tmp_path, backend, **kw)
        harness.results.mkdir()
        made.append(harness)
        return harness

    yield _make
    for harness in made:
        harness.bus.stop()


@pytest.fixture
def h(make: Any) -> Harness:
    return make()


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
        # The subscribers are called before the marker goes and the file moves to applied/.
        wait_for(lambda: not path.exists() and (h.results / "applied" / path.name).exists()
                 and h.store.members(h.bus.pending_set) == [])
        assert h.store.get(LEDGER, r.id) is not None

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
        wait_for(lambda: [p for p in h.results.iterdir()
                          if p.name not in ("applied", "rejected")] == [])


NAME = "heal-diagnose-mac1-1700000000.json"

# A writer as a separate process: writes the first part, says "half", then waits for a line on
# stdin — "finish" writes the rest and closes the file; "die" (or EOF) exits without it.
WRITER = r"""
import os, sys
path, first, rest = sys.argv[1:4]
fh = open(path, "w")
fh.write(first)
fh.flush()
print("half", flush=True)
if sys.stdin.readline().strip() == "finish":
    fh.write(rest)
    fh.close()
else:
    os._exit(1)
"""


class Writer:
    """A writer process holding a result file open half-written until told what to do."""

    def __init__(self, path: Path, first: str, rest: str):
        self.proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), first, rest],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "half\n"

    def tell(self, what: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.close()
        assert self.proc.wait(30) == (0 if what == "finish" else 1)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


class TestSlowWriters:
    def test_pause_longer_than_settle_s(self, make: Any) -> None:
        """A writer that pauses mid-file for longer than bus.settle_s, holding the file open,
        is waited for: its result is applied once it finishes, nothing is rejected."""
        h = make(settle_s=0.3, max_wait_s=30.0)
        h.bus.start()
        text = json.dumps(VALID)
        with Writer(h.results / NAME, text[:20], text[20:]) as w:
            seen = wait_for(lambda: h.bus.stats.waits)
            paused = time.monotonic()
            # The pause: several settle_s long, while the bus keeps looking at the half file.
            wait_for(lambda: time.monotonic() - paused > 4 * h.bus.settle_s
                     and h.bus.stats.waits >= seen + 4)
            assert h.rejected() == [] and h.got == []
            assert NAME in h.bus.partials.waiting()
            w.tell("finish")
        wait_for(lambda: len(h.got) == 1)
        assert h.got[0].data == VALID and h.rejected() == []
        wait_for((h.results / "applied" / NAME).exists)  # moved once the subscribers return
        assert h.bus.partials.waiting() == {}

    def test_writer_that_never_finishes(self, make: Any) -> None:
        """A writer that stops forever with the file open is rejected as incomplete once
        bus.max_wait_s has passed (not after settle_s), and nothing is applied."""
        h = make(settle_s=0.3, max_wait_s=2.0)
        h.bus.start()
        text = json.dumps(VALID)
        started = time.monotonic()
        with Writer(h.results / NAME, text[:20], text[20:]):
            reason = h.wait_rejected(NAME)
            waited = time.monotonic() - started
        assert "incomplete: the writer stopped after 20 bytes for" in reason, reason
        assert "left it unfinished" in reason
        assert waited >= 2.0 - 0.2, waited  # max_wait_s, give or take the mtime's granularity
        assert h.got == [] and h.store.keys(LEDGER) == []

    def test_writer_that_dies_mid_file(self, make: Any) -> None:
        """A writer that dies (closing the file) half-way is rejected as incomplete after
        settle_s, without waiting for max_wait_s."""
        h = make(settle_s=0.3, max_wait_s=60.0)
        h.bus.start()
        text = json.dumps(VALID)
        started = time.monotonic()
        with Writer(h.results / NAME, text[:20], text[20:]) as w:
            w.tell("die")
            reason = h.wait_rejected(NAME)
        assert time.monotonic() - started < 30
        assert "incomplete: the writer stopped after 20 bytes" in reason, reason
        assert "closed it unfinished" in reason and "not valid JSON" in reason
        assert h.got == []

    def test_file_still_changing_at_the_deadline(self, make: Any) -> None:
        """A file that keeps changing but never becomes whole is rejected after max_wait_s
        as still being written."""
        h = make(settle_s=0.3, max_wait_s=1.5)
        h.bus.start()
        stop = threading.Event()

        def trickle() -> None:
            with open(h.results / NAME, "w") as fh:
                fh.write('{"kind": ')
                while not stop.wait(0.05):
                    fh.write(" ")
                    fh.flush()

        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        try:
            reason = h.wait_rejected(NAME)
        finally:
            stop.set()
            t.join(10)
        assert "still being written after" in reason, reason
        assert h.got == []


class TestLinks:
    def test_hard_link_to_outside_file(self, h: Harness, tmp_path: Path) -> None:
        """A hard link to a file outside the results dir is rejected like a symlink, and the
        file it shares is left as it was."""
        outside = tmp_path / "outside.json"
        outside.write_text(json.dumps(VALID))
        h.bus.start()
        os.link(outside, h.results / NAME)
        reason = h.wait_rejected(NAME)
        assert "hard link" in reason, reason
        assert h.got == [] and h.store.keys(LEDGER) == []
        assert json.loads(outside.read_text()) == VALID and outside.stat().st_nlink == 2

    def test_link_then_unlink_writer_is_applied(self, h: Harness) -> None:
        """A create-only writer (temp file, link(2), unlink: healer's atomic_create_bytes)
        passes through two names and is applied; applied/ holds a file of its own."""
        h.bus.start()
        assert atomic_create_bytes(h.results / NAME, json.dumps(VALID).encode())
        wait_for(lambda: len(h.got) == 1)
        assert h.rejected() == []
        wait_for((h.results / "applied" / NAME).exists)  # moved once the subscribers return
        assert (h.results / "applied" / NAME).stat().st_nlink == 1


class TestStrictJSON:
    def test_non_strict_json_rejected(self, h: Harness) -> None:
        """NaN, Infinity, 1e400, integers past the digit limit and lone surrogates are
        rejected with a reason naming them — never applied."""
        base = '{"kind": "diagnose", "target": "mac1", "status": "ok", "data": {%s}}'
        files = {
            "heal-diagnose-mac1-1700000101.json": ('"x": NaN', "NaN"),
            "heal-diagnose-mac1-1700000102.json": ('"x": Infinity', "Infinity"),
            "heal-diagnose-mac1-1700000103.json": ('"x": -Infinity', "-Infinity"),
            "heal-diagnose-mac1-1700000104.json": ('"x": 1e400', "1e400"),
            "heal-diagnose-mac1-1700000105.json": ('"x": -1e400', "out of range"),
            "heal-diagnose-mac1-1700000106.json": ('"x": ' + "7" * 5000, "5000 digits"),
            "heal-diagnose-mac1-1700000107.json": ('"x": "\\ud800"', "lone surrogate"),
            "heal-diagnose-mac1-1700000108.json": ('"\\udfff": 1', "lone surrogate"),
        }
        h.bus.start()
        for name, (inner, _) in files.items():
            atomic_write_bytes(h.results / name, (base % inner).encode())
        wait_for(lambda: h.bus.stats.rejected == len(files))
        for name, (_, fragment) in files.items():
            assert fragment in h.reason(name), (name, h.reason(name))
        assert h.got == [] and h.store.keys(LEDGER) == []
        drop_result(h.results, "diagnose", "mac1", data={"x": 1e300})  # still fine
        wait_for(lambda: len(h.got) == 1)

    def test_jetstream_message_parsed_strictly(self, h: Harness) -> None:
        """On the JetStream bus a published message that is not strict JSON (NaN) is dropped
        and never applied; the consumer keeps applying the next results."""
        if h.backend != "jetstream":
            pytest.skip("JetStream bus only")
        h.bus.start()
        envelope = {"id": "0123abcd", "name": NAME, "kind": "diagnose", "target": "mac1",
                    "epoch": 1700000000, "received_at": 1.0,
                    "data": {**VALID, "data": {"x": "@nan@"}}}
        bad = json.dumps(envelope).replace('"@nan@"', "NaN").encode()
        js = h.bus.js_store
        js._io.run(js.js.publish(f"{h.bus.subject}.diagnose", bad))
        drop_result(h.results, "diagnose", "mac2", epoch=1700000001)
        wait_for(lambda: len(h.got) == 1)
        assert h.got[0].target == "mac2" and h.store.get(LEDGER, "0123abcd") is None


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


class TestRejectionReasons:
    def test_a_reason_is_whole_when_it_appears_and_an_empty_one_reads_as_unknown(
            self, tmp_path: Path) -> None:
        """The .reason beside a rejected file is written whole before it appears (a reader
        following the move at once never sees it empty); one that is empty anyway (an older
        healer's) reads as "?" instead of failing the reader."""
        from healer.core import safedirs
        from healer.core.bus.results import read_result

        results = tmp_path / "results"
        (results / "rejected").mkdir(parents=True)
        (results / "a.json").write_text("{")
        safedirs.move_aside(results, "a.json", "rejected", reason="not JSON\nfile: a.json\n")
        # no temp file left beside them
        assert sorted(p.name for p in (results / "rejected").iterdir()) == ["a.json",
                                                                            "a.json.reason"]
        assert read_result(results / "a.json") == (
            None, "the bus rejected the agent's result: not JSON")
        (results / "rejected" / "a.json.reason").write_text("")
        assert read_result(results / "a.json") == (
            None, "the bus rejected the agent's result: ?")


def test_a_result_moved_while_it_is_read_is_read_where_it_went(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bus moves a result to ``applied/`` once its batch is on disk, which may be just
    after a reader found it in the results dir: the reader finds it again where it went."""
    from healer.core.bus import results as found

    results = tmp_path / "results"
    (results / "applied").mkdir(parents=True)
    path = drop_result(results, "diagnose", "mac1", epoch=1700000000)
    real_find = found.find_result

    def find_then_move(p: Path) -> Path | None:
        where = real_find(p)
        if where == path:  # the bus's move lands between finding and reading
            path.rename(results / "applied" / path.name)
        return where

    monkeypatch.setattr(found, "find_result", find_then_move)
    doc, why = found.read_result(path)
    assert why == "" and doc is not None and doc["target"] == "mac1"
