"""The detection engine: the labelled corpus, both matchers, time windows, big buffers."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from detect_helpers import by_line
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healer.detect import _files
from healer.detect.catalog import Catalog
from healer.detect.engine import Engine, resolve_engine
from healer.errors import UsageError

T0 = 1714557600.0  # 2024-05-01T10:00:00Z, the corpus's first line


def iso(second: float) -> str:
    whole = int(second)
    return f"2024-05-01T10:{whole // 60:02d}:{whole % 60:02d}.000Z"



def _threads() -> list[str]:
    """The scan's reading threads in this process: Python's and native ones (by name)."""
    names = []
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # (a thread that just ended)
            names.append(Path(f"/proc/self/task/{task}/comm").read_text().strip())
    names += [t.name for t in threading.enumerate()]
    return sorted(n for n in names if n in ("healer-prefetch", "healer-read-ahead"))


class EmitCase:
    """A log big enough for several scan workers, and a sink file the emit functions of a
    test append line numbers to (through one descriptor, shared with the workers)."""

    def __init__(self, log: Path, sink: Path):
        self.log, self.sink = log, sink
        self.fd = os.open(sink, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.parent = os.getpid()

    def in_worker(self) -> bool:
        return os.getpid() != self.parent

    def write(self, line_nos: list[int]) -> None:
        os.write(self.fd, "".join(f"{n}\n" for n in line_nos).encode())

    def printed(self) -> list[int]:
        return [int(n) for n in self.sink.read_text().split()]

    def want(self, engine: Engine) -> list[int]:
        return [a.line_no for a in engine.scan_file(self.log, workers=1)]


@pytest.fixture
def emit_case(corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmitCase]:
    monkeypatch.setattr(_files, "PARALLEL_MIN_BYTES", 0)
    log = tmp_path / "big.log"
    log.write_bytes(corpus.data * 6)
    case = EmitCase(log, tmp_path / "out.txt")
    try:
        yield case
    finally:
        os.close(case.fd)


def _line_nos(alerts: list) -> list[int]:
    return [a.line_no for a in alerts]


class TestCorpus:
    def test_every_label_and_nothing_else(self, engine: Engine, corpus) -> None:
        """Each labelled line raises exactly its codes; every other line raises nothing."""
        got = by_line(engine.scan_file(corpus.path))
        missing = {n: c - got.get(n, set()) for n, c in corpus.expected.items()
                   if c - got.get(n, set())}
        extra = {n: c - corpus.expected.get(n, set()) for n, c in got.items()
                 if c - corpus.expected.get(n, set())}
        assert not missing, f"expected alerts not raised: {missing}"
        assert not extra, f"false positives: {extra}"

    def test_corpus_is_big_and_varied(self, corpus) -> None:
        """The corpus has ≥300 lines with ANSI codes, invalid UTF-8 and very long lines."""
        data = corpus.data
        lines = data.split(b"\n")
        assert len(lines) >= 300
        assert b"\x1b[" in data and max(map(len, lines)) > 10_000
        with pytest.raises(UnicodeDecodeError):
            data.decode("utf-8")

    def test_both_engines_identical(self, corpus) -> None:
        """re and Hyperscan give the very same alerts on the corpus."""
        cat = Catalog.load()
        a = Engine(cat, engine="re").scan_file(corpus.path)
        b = Engine(cat, engine="hyperscan").scan_file(corpus.path)
        assert a == b and len(a) == sum(len(c) for c in corpus.expected.values())

    def test_alert_fields(self, engine: Engine, corpus) -> None:
        """Alerts carry code, id, priority, severity, source, line number, ts and the line."""
        alerts = engine.scan_file(corpus.path, source="pod/x")
        first = alerts[0]
        assert (first.code, first.id, first.priority, first.severity) == (
            "A10", "tool-inventory-mismatch-specific", 1, "critical")
        assert first.source == "pod/x" and first.line_no == 2
        assert first.ts == pytest.approx(T0 + 2.002)
        assert "Tool inventory MISMATCH" in first.line
        d = first.to_dict()
        assert d["ts"] == "2024-05-01T10:00:02.002Z" and d["meaning"] and d["action"]

    def test_lines_cut_and_cleaned(self, engine: Engine, corpus) -> None:
        """Alert lines are cut to max_line_chars, ANSI-free, and decoded despite bad bytes."""
        alerts = engine.scan_file(corpus.path)
        assert max(len(a.line) for a in alerts) == 200
        assert not any("\x1b" in a.line for a in alerts)
        assert any("\ufffd" in a.line for a in alerts)
        short = Engine(Catalog.load(), engine=engine.kind, max_line_chars=40)
        assert max(len(a.line) for a in short.scan_file(corpus.path)) == 40


class TestEnginesAgree:
    WORDS: ClassVar[list[str]] = [
             "timeout", "connection refused", "panicked at", "fatal error", "level=error",
             "level=info", '"level":"error"', "[ERROR]", "error=nil", "errors: 0", "will retry",
             "tool inventory mismatch", "Tool inventory MISMATCH", "prompt", "missing", "role",
             "undefined", "exception:", "Traceback (most recent call last)", "E0501 10:00:00",
             "I0501 10:00:00", "error[E0308]", "\x1b[31m", "\x1b[0m", "cto-config", "invalid",
             "unauthorized", "2024-05-01T10:00:30Z", "--timeout=5", " ", "\t", "x", "\r"]

    @settings(max_examples=150, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.lists(st.one_of(st.sampled_from(WORDS), st.text(max_size=6)),
                             max_size=8), min_size=1, max_size=30),
           st.binary(max_size=4))
    def test_generated_lines(self, lines: list[list[str]], junk: bytes) -> None:
        """Lines built from pattern fragments, noise and bad bytes: both engines agree."""
        data = b"\n".join("".join(parts).encode("utf-8", "surrogatepass") + junk
                          for parts in lines)
        cat = Catalog.load()
        a = Engine(cat, engine="re").scan_bytes(data, start_time=T0, seen_at=T0)
        b = Engine(cat, engine="hyperscan").scan_bytes(data, start_time=T0, seen_at=T0)
        assert a == b

    @settings(max_examples=60, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.sampled_from([
        "ab+c", "a.*z", r"\bfoo\b", "x[0-9]{2,3}y", "(red|green) light", "^start", "end$",
        r"\d+ ms", "[^ ]+=fail", "q?uit", r"c\s+d", "A|B"]), min_size=1, max_size=5,
        unique=True),
        st.lists(st.text(alphabet="abcxyzfo0123 =dtrs\nABquienglhm$^", max_size=40),
                 max_size=20))
    def test_generated_catalogs(self, regexes: list[str], lines: list[str]) -> None:
        """Small generated catalogs over generated text: both engines agree."""
        data = {"patterns": [{"id": f"p{i}", "regex": rx, "code": f"C{i}", "priority": 2,
                              "severity": "high"} for i, rx in enumerate(regexes)]}
        cat = Catalog.from_data(data)
        buf = "\n".join(lines).encode()
        a = Engine(cat, engine="re").scan_bytes(buf, start_time=T0, seen_at=T0)
        b = Engine(cat, engine="hyperscan").scan_bytes(buf, start_time=T0, seen_at=T0)
        assert a == b

    def test_patterns_hyperscan_cannot_take(self) -> None:
        """Backreferences and \\Z go to re inside the Hyperscan engine, with the same result."""
        data = {"patterns": [
            {"id": "double", "regex": r"(\w+) \1 again", "code": "D", "priority": 2,
             "severity": "high"},
            {"id": "tail", "regex": r"the end\Z", "code": "T", "priority": 2, "severity": "low"}]}
        cat = Catalog.from_data(data)
        buf = b"say hello hello again\nsay hello world again\nthis is the end\nthe end is near\n"
        hs = Engine(cat, engine="hyperscan")
        assert by_line(hs.scan_bytes(buf)) == {1: {"D"}, 3: {"T"}}
        assert hs.scan_bytes(buf) == Engine(cat, engine="re").scan_bytes(buf)


def test_resolved_pattern_sets_are_remembered_only_without_suppressions() -> None:
    """Several patterns on one line, no suppression to try: the verdict is remembered by the
    patterns and their order (the first of equal rank wins a code); with suppressions to
    try, each line is judged on its own."""
    import itertools

    engine = Engine(Catalog.load(), engine="re")
    n = len(engine.catalog.patterns)
    rnd = random.Random(4)
    sets = [list(pair) for pair in itertools.permutations(range(n), 2)]
    sets += [rnd.sample(range(n), rnd.randint(3, 6)) for _ in range(300)]
    for _ in range(2):  # the second time from memory
        for matched in sets:
            assert engine._resolve(b"x", matched, []) == engine._resolve_line(b"x", matched, [])
    assert len(engine._resolved) == len({tuple(m) for m in sets})
    refused = b"connection refused; no errors: 0"  # a line a word suppression silences
    everyone = list(range(len(engine.catalog.suppressions)))
    for matched in sets[:50]:
        assert engine._resolve(refused, matched, everyone) == engine._resolve_line(
            refused, matched, everyone)
    assert len(engine._resolved) == len({tuple(m) for m in sets})


class TestPreflightWindow:
    def lines(self, *rows: tuple[float | None, str]) -> bytes:
        return b"".join(((f"{iso(t)} " if t is not None else "") + text + "\n").encode()
                        for t, text in rows)

    def test_window_from_first_line(self, engine: Engine) -> None:
        """Without a start time, priority-1 patterns count within 60 s of the first line."""
        data = self.lines((0, "starting"), (30, "tool inventory mismatch"),
                          (61, "tool inventory mismatch"), (90, "connection refused"))
        assert by_line(engine.scan_bytes(data)) == {2: {"A10"}, 4: {"R2"}}

    def test_window_from_given_start(self, engine: Engine) -> None:
        """A start passed by the caller (the session registry) moves the window."""
        data = self.lines((0, "x"), (30, "tool inventory mismatch"), (100, "cto-config missing"))
        assert by_line(engine.scan_bytes(data, start_time=T0 + 60)) == {3: {"A11"}}

    def test_window_setting(self) -> None:
        """detect.preflight_window_s sets the window length."""
        data = self.lines((0, "x"), (30, "tool inventory mismatch"))
        eng = Engine(Catalog.load(), preflight_window_s=10)
        assert eng.scan_bytes(data) == []

    def test_lines_without_timestamp_borrow_one(self, engine: Engine) -> None:
        """A line without its own timestamp takes the one of the line before it."""
        data = self.lines((0, "x"), (90, "pre-flight report:"), (None, "  tool inventory "
                          "mismatch: github"), (10, "y"), (None, "  mcp github failed to "
                          "initialize"))
        assert by_line(engine.scan_bytes(data)) == {5: {"A12"}}

    def test_no_timestamps_uses_time_seen(self, engine: Engine) -> None:
        """With no timestamps at all, lines count when seen within the window of the start."""
        data = b"hello\ntool inventory mismatch\n"
        assert by_line(engine.scan_bytes(data, seen_at=T0)) == {2: {"A10"}}
        stream = engine.stream("s")
        assert stream.feed(b"hello\n", seen_at=T0) == []
        assert by_line(stream.feed(b"tool inventory mismatch\n", seen_at=T0 + 30)) == {2: {"A10"}}
        assert stream.feed(b"mcp x failed to initialize\n", seen_at=T0 + 61) == []

    def test_pattern_window(self, tmp_path: Path) -> None:
        """A pattern's own window_s applies to any priority."""
        data = {"patterns": [{"id": "boot", "regex": "booting", "code": "B", "priority": 3,
                              "severity": "info", "window_s": 5}]}
        eng = Engine(Catalog.from_data(data))
        buf = self.lines((0, "booting"), (4, "booting"), (6, "booting"))
        assert sorted(by_line(eng.scan_bytes(buf))) == [1, 2]

    def test_since_skips_old_timestamped_lines(self, engine: Engine) -> None:
        """not_before (--since) drops alerts of older timestamped lines, keeps undated ones."""
        data = self.lines((70, "timeout one"), (None, "timeout two"), (200, "timeout three"))
        got = engine.scan_bytes(data, not_before=T0 + 100)
        assert [a.line_no for a in got] == [2, 3]


class TestBuffers:
    def test_chunking_does_not_matter(self, engine: Engine, corpus) -> None:
        """Feeding the corpus in random chunks gives the same alerts as one buffer."""
        data = corpus.data
        whole = engine.scan_bytes(data, source="c")
        rnd = random.Random(7)
        for _ in range(3):
            stream = engine.stream("c")
            got, pos = [], 0
            while pos < len(data):
                step = rnd.choice([1, 7, 100, 4096, 70_000])
                got += stream.feed(data[pos:pos + step])
                pos += step
            got += stream.flush()
            assert got == whole

    def test_scan_lines_matches_buffer(self, engine: Engine, corpus) -> None:
        """scan_lines over the corpus lines equals scanning the buffer."""
        data = corpus.data
        lines = data.split(b"\n")[:-1]
        assert engine.scan_lines(lines, source="c") == engine.scan_bytes(data, source="c")

    @pytest.mark.parametrize("workers", [1, 2, 3])
    def test_parallel_file_scan(self, engine: Engine, corpus, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
        """Scanning a file in worker processes gives the same alerts and line numbers."""
        monkeypatch.setattr(_files, "PARALLEL_MIN_BYTES", 0)
        big = tmp_path / "big.log"
        big.write_bytes(corpus.data * 5)
        expected = engine.scan_bytes(corpus.data * 5, source=str(big))
        got = engine.scan_file(big, workers=workers)
        assert got == expected and got[-1].line_no > 1200

    def test_no_fork_beside_other_threads(self, engine: Engine, corpus, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
        """By default a caller running other threads is not forked; a lone one is."""
        import threading

        monkeypatch.setattr(_files, "PARALLEL_MIN_BYTES", 0)
        forks = []
        monkeypatch.setattr(_files.os, "fork", lambda: forks.append(1) or 0 / 0)
        big = tmp_path / "big.log"
        big.write_bytes(corpus.data * 3)
        stop = threading.Event()
        other = threading.Thread(target=stop.wait)
        other.start()
        try:
            assert len(engine.scan_file(big)) == 3 * len(engine.scan_bytes(corpus.data))
        finally:
            stop.set()
            other.join()
        assert forks == []
        # A pytest-xdist worker runs an execnet thread of its own: pretend to be alone.
        monkeypatch.setattr(_files.threading, "active_count", lambda: 1)
        monkeypatch.setattr(_files, "default_workers", lambda: 2)
        with pytest.raises(ZeroDivisionError):
            engine.scan_file(big)
        assert forks == [1]

    def test_parallel_render(self, engine: Engine, corpus, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
        """render_file formats each region in its worker; the parts come back in order."""
        monkeypatch.setattr(_files, "PARALLEL_MIN_BYTES", 0)
        big = tmp_path / "big.log"
        big.write_bytes(corpus.data * 4)
        parts = engine.render_file(big, lambda alerts: [a.line_no for a in alerts], workers=2)
        assert len(parts) == 2
        assert [n for part in parts for n in part] == [
            a.line_no for a in engine.scan_file(big, workers=1)]

    @pytest.mark.parametrize("workers", [2, 3])
    def test_parallel_emit_in_file_order(self, engine: Engine, emit_case: EmitCase,
                                         workers: int) -> None:
        """With emit, each worker writes its own region to the shared descriptor, one after
        the other in file order, and sends back only what emit returns."""
        def emit(line_nos: list[int]) -> tuple[int, bool]:
            emit_case.write(line_nos)
            return len(line_nos), not emit_case.in_worker()

        parts = engine.render_file(emit_case.log, _line_nos, workers=workers, emit=emit)
        want = emit_case.want(engine)
        assert emit_case.printed() == want
        assert len(parts) == workers and sum(n for n, _ in parts) == len(want)
        assert [here for _, here in parts] == [True] + [False] * (workers - 1)

    @pytest.mark.parametrize("workers", [1, 2])
    def test_emit_here_a_slice_of_hits_at_a_time(self, engine: Engine, emit_case: EmitCase,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 workers: int) -> None:
        """Each region is rendered a slice of hits at a time (its memory reused, slice after
        slice), this process's emitted as they are made, a worker's in its turn: the same
        lines in the same order, one result a slice."""
        monkeypatch.setattr(_files, "EMIT_SLICE", 7)
        calls: list[tuple[int, bool]] = []

        def emit(line_nos: list[int]) -> int:
            emit_case.write(line_nos)
            calls.append((len(line_nos), emit_case.in_worker()))
            return len(line_nos)

        parts = engine.render_file(emit_case.log, _line_nos, workers=workers, emit=emit)
        want = emit_case.want(engine)
        assert emit_case.printed() == want and sum(parts) == len(want)
        here = [n for n, _ in calls]  # (a worker's calls are noted in its own process)
        assert len(here) > 2 and parts[:len(here)] == here
        in_worker = parts[len(here):]
        assert len(in_worker) > 1 if workers > 1 else not in_worker

    def test_parallel_emit_redoes_a_failed_worker_in_order(
            self, engine: Engine, emit_case: EmitCase, tmp_path: Path) -> None:
        """A worker that dies before its turn (here: while rendering) is redone here, and
        its region still comes out in file order."""
        died = tmp_path / "died"

        def render(alerts: list) -> list[int]:
            if emit_case.in_worker():
                try:
                    os.close(os.open(died, os.O_CREAT | os.O_EXCL))
                except FileExistsError:
                    pass
                else:
                    os._exit(9)  # the first worker to render dies
            return _line_nos(alerts)

        def emit(line_nos: list[int]) -> int:
            emit_case.write(line_nos)
            return len(line_nos)

        parts = engine.render_file(emit_case.log, render, workers=3, emit=emit)
        want = emit_case.want(engine)
        assert died.exists()
        assert emit_case.printed() == want and sum(parts) == len(want)

    def test_parallel_emit_never_repeats_a_worker_that_died_writing(
            self, engine: Engine, emit_case: EmitCase) -> None:
        """A worker that dies after it began to write is not redone (that would print its
        first lines twice): the scan fails, saying from which line the output is
        incomplete."""
        from healer.errors import UnavailableError

        def emit(line_nos: list[int]) -> int:
            emit_case.write(line_nos[:len(line_nos) // 2])
            if emit_case.in_worker():
                os._exit(9)  # half its lines written
            emit_case.write(line_nos[len(line_nos) // 2:])
            return len(line_nos)

        with pytest.raises(UnavailableError, match=r"from line \d+ on\): the output is "
                                                   r"incomplete"):
            engine.render_file(emit_case.log, _line_nos, workers=2, emit=emit)
        got = emit_case.printed()
        assert len(got) == len(set(got))  # nothing printed twice

    def test_small_blocks(self, engine: Engine, corpus, monkeypatch: pytest.MonkeyPatch) -> None:
        """Lines longer than the read block and many blocks still give the same alerts."""
        import healer.detect.engine as eng_mod

        monkeypatch.setattr(_files, "BLOCK_BYTES", 4096)
        monkeypatch.setattr(eng_mod, "BLOCK_BYTES", 4096)
        assert engine.scan_file(corpus.path) == engine.scan_bytes(
            corpus.data, source=str(corpus.path))

    @pytest.mark.parametrize("kind", ["native", "python"])
    def test_read_ahead_gives_the_same_hits(self, engine: Engine, corpus, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
        """Reading each next block on a thread while one is scanned gives the hits of reading
        them in turn, across many small blocks and a line longer than a block: on the native
        thread, which also finds each block's candidates until the scan asks (the scan finds
        the rest),
        and on a Python one; the thread is gone when the scan returns."""
        if kind == "native" and _files._native.speedups is None:
            pytest.skip("the native module is not built here")
        monkeypatch.setattr(_files, "BLOCK_BYTES", 4096)
        data = corpus.data + b"x" * 10_000 + b" connection refused\n" + corpus.data
        log = tmp_path / "long.log"
        log.write_bytes(data)
        started: list[int] = []
        ready: list[object] = []
        kinds = {"native": _files._Prefetch, "python": _files._ReadAhead}
        real_start, real_result = kinds[kind].start, kinds[kind].result

        class Finishing:
            """The native thread scanning every block whole before the scan takes it (the
            scan finding a part itself: test_scan_block_takes_candidates_found_ahead)."""

            def __init__(self, p: object):
                self._p = p

            def result(self) -> object:
                return self._p.result(True)  # type: ignore[attr-defined]

            def __getattr__(self, name: str) -> object:
                return getattr(self._p, name)

        def start(self, *a):  # type: ignore[no-untyped-def]
            started.append(a[3])
            if kind == "native" and not isinstance(self._p, Finishing):
                self._p = Finishing(self._p)
            return real_start(self, *a)

        def result(self):  # type: ignore[no-untyped-def]
            got = real_result(self)
            ready.append(got[1])
            return got

        monkeypatch.setattr(kinds[kind], "start", start)
        monkeypatch.setattr(kinds[kind], "result", result)
        if kind == "python":
            monkeypatch.setattr(_files, "_read_ahead", lambda e, fd, hi: _files._ReadAhead(fd))
        fd = os.open(log, os.O_RDONLY)
        try:
            plain = _files.scan_region(engine, fd, 0, len(data))
            ahead = _files.scan_region(engine, fd, 0, len(data), read_ahead=True)
        finally:
            os.close(fd)
        assert ahead == plain and len(plain[1]) > 100
        assert len(started) > 5 and started == sorted(set(started))
        if kind == "native" and engine.native_db is not None:  # candidates found ahead
            assert sum(r is not None and r[0] == r[1] for r in ready) > 5  # type: ignore[index]
        else:
            assert ready == [None] * len(ready)
        assert _threads() == []

    @pytest.mark.parametrize("kind", ["native", "python"])
    def test_read_ahead_stops_with_the_scan(self, engine: Engine, corpus, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
        """A scan that fails mid-file, or a file cut short under it, leaves no reading thread
        behind; the cut file's scan ends where its data does."""
        if kind == "native" and _files._native.speedups is None:
            pytest.skip("the native module is not built here")
        if kind == "python":
            monkeypatch.setattr(_files, "_read_ahead", lambda e, fd, hi: _files._ReadAhead(fd))
        monkeypatch.setattr(_files, "BLOCK_BYTES", 4096)
        log = tmp_path / "big.log"
        log.write_bytes(corpus.data * 2)
        fd = os.open(log, os.O_RDONLY)
        real = engine.scan_block
        calls = []

        def failing(*a, **k):  # type: ignore[no-untyped-def]
            calls.append(1)
            if len(calls) == 3:
                raise RuntimeError("scan failed")
            return real(*a, **k)

        def cutting(*a, **k):  # type: ignore[no-untyped-def]
            calls.append(1)
            if len(calls) == 2:
                os.truncate(log, 6000)
            return real(*a, **k)

        try:
            monkeypatch.setattr(engine, "scan_block", failing)
            with pytest.raises(RuntimeError, match="scan failed"):
                _files.scan_region(engine, fd, 0, len(corpus.data) * 2, read_ahead=True)
            assert _threads() == []
            calls.clear()
            monkeypatch.setattr(engine, "scan_block", cutting)
            newlines, _ = _files.scan_region(engine, fd, 0, len(corpus.data) * 2,
                                             read_ahead=True)
        finally:
            os.close(fd)
        assert newlines < corpus.data.count(b"\n")
        assert _threads() == []

    def test_lone_region_emits_as_it_scans(self, engine: Engine, corpus, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
        """One region with emit: its hits are rendered and emitted while later blocks are
        still to be scanned (they never pile up), and the output is that of rendering them
        all at the end."""
        monkeypatch.setattr(_files, "BLOCK_BYTES", 4096)
        monkeypatch.setattr(_files, "STREAM_HITS", 5)
        log = tmp_path / "big.log"
        log.write_bytes(corpus.data * 3)
        events: list[str] = []
        real = engine.scan_block
        monkeypatch.setattr(engine, "scan_block",
                            lambda *a, **k: events.append("scan") or real(*a, **k))

        def emit(line_nos: list[int]) -> list[int]:
            events.append("emit")
            return line_nos

        parts = engine.render_file(log, _line_nos, workers=1, emit=emit)
        assert [n for part in parts for n in part] == _line_nos(engine.scan_file(log))
        scans = [k for k, e in enumerate(events) if e == "scan"]
        emits = [k for k, e in enumerate(events) if e == "emit"]
        assert len(emits) > 3 and emits[0] < scans[len(scans) // 2]

    def test_source_windows_switch_when_a_hit_names_a_source(self, tmp_path: Path) -> None:
        """A log whose head names no source: windows count from the agent's start until a hit
        names one, from then on from each source's own start (asked slice by slice); a log
        whose head names one, always; a region asked once, as its hits say."""
        plain = tmp_path / "plain.log"
        plain.write_bytes(b"2024-05-01T10:00:00Z starting\n" * 3)
        prefixed = tmp_path / "prefixed.log"
        prefixed.write_bytes(b"[pod/a/b] 2024-05-01T10:00:00Z starting\n")
        bare = (0, b"x", (0,), None, None, "", "")
        named = (1, b"x", (0,), None, None, "pod/a/b", "")
        for path, head_named in ((plain, False), (prefixed, True)):
            fd = os.open(path, os.O_RDONLY)
            try:
                sources = _files.FileSources(fd, T0)
                streamed = _files.SourceWindows(sources)
                asked = [streamed.start_of([bare]), streamed.start_of([bare, named]),
                         streamed.start_of([bare])]
                once = _files.SourceWindows(sources).start_of([bare])
            finally:
                os.close(fd)
            want = sources.start_of
            assert asked == [want if head_named else None, want, want]
            assert once == (want if head_named else None)

    def test_reads_ahead_only_with_a_core_to_spare(self, monkeypatch: pytest.MonkeyPatch
                                                   ) -> None:
        """A region per core reads in turn; fewer regions than cores read ahead."""
        monkeypatch.setattr(_files.os, "sched_getaffinity", lambda pid: {0, 1})
        assert _files.spare_cores(1) and not _files.spare_cores(2)
        monkeypatch.setattr(_files.os, "sched_getaffinity", lambda pid: {0})
        assert not _files.spare_cores(1)

    def test_crlf_and_no_final_newline(self, engine: Engine) -> None:
        """CRLF line ends are fine and a last line without newline counts."""
        got = engine.scan_bytes(b"ok\r\nconnection refused\r\nfatal error")
        assert [(a.line_no, a.code, a.line) for a in got] == [
            (2, "R2", "connection refused"), (3, "R1", "fatal error")]

    def test_empty_input(self, engine: Engine, tmp_path: Path) -> None:
        """Empty input gives no alerts."""
        empty = tmp_path / "empty.log"
        empty.write_bytes(b"")
        assert engine.scan_bytes(b"") == [] and engine.scan_file(empty) == []

    def test_fifo_is_streamed(self, engine: Engine, corpus, tmp_path: Path) -> None:
        """A named pipe given as a file is read as a stream, with the same alerts."""
        import os
        import threading

        fifo = tmp_path / "pipe"
        os.mkfifo(fifo)
        writer = threading.Thread(target=fifo.write_bytes, args=(corpus.data,))
        writer.start()
        got = engine.scan_file(fifo)
        writer.join(5)
        assert got == engine.scan_bytes(corpus.data, source=str(fifo))

    def test_missing_file(self, engine: Engine, tmp_path: Path) -> None:
        """A missing file is a usage error."""
        with pytest.raises(UsageError, match="no such file"):
            engine.scan_file(tmp_path / "nope.log")

    def test_suppression_limited_to_codes(self, tmp_path: Path) -> None:
        """A suppression with `codes` drops only those codes from a line."""
        data = {"patterns": [
            {"id": "t", "regex": "timeout", "code": "T", "priority": 2, "severity": "high"},
            {"id": "r", "regex": "refused", "code": "R", "priority": 2, "severity": "high"}],
            "suppress": [{"id": "cfg", "regex": "timeout=\\d", "codes": ["T"]}]}
        eng = Engine(Catalog.from_data(data))
        got = eng.scan_bytes(b"timeout=5 refused\ntimeout happened\n")
        assert by_line(got) == {1: {"R"}, 2: {"T"}}


class TestEngineChoice:
    def test_env_forces_re(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """HEALER_DETECT_ENGINE=re forces the pure-re matcher."""
        monkeypatch.setenv("HEALER_DETECT_ENGINE", "re")
        assert Engine(Catalog.load()).kind == "re"

    def test_auto_prefers_hyperscan(self) -> None:
        """auto picks Hyperscan when the package is installed."""
        assert resolve_engine("auto") == "hyperscan"

    def test_unknown_engine(self) -> None:
        """An unknown engine name is a usage error."""
        with pytest.raises(UsageError, match="unknown detection engine"):
            resolve_engine("grep")

    def test_compiled_database_is_cached(self, _private_cache: Path) -> None:
        """The compiled Hyperscan database is cached and reused."""
        Engine(Catalog.load(), engine="hyperscan")
        blobs = list((_private_cache / "detect").glob("hs-*"))
        assert blobs
        before = {b: b.stat().st_mtime_ns for b in blobs}
        eng = Engine(Catalog.load(), engine="hyperscan")
        assert {b: b.stat().st_mtime_ns for b in blobs} == before
        assert by_line(eng.scan_bytes(b"connection refused\n")) == {1: {"R2"}}

    def test_corrupt_cache_entry_is_rebuilt(self, _private_cache: Path) -> None:
        """A corrupt cache entry is ignored and the database compiled again."""
        Engine(Catalog.load(), engine="hyperscan")
        for blob in (_private_cache / "detect").glob("hs-*"):
            blob.write_bytes(b"garbage")
        eng = Engine(Catalog.load(), engine="hyperscan")
        assert by_line(eng.scan_bytes(b"fatal error\n")) == {1: {"R1"}}


def test_catalog_yaml_roundtrip_file(tmp_path: Path) -> None:
    """A user catalog file drives the engine like the embedded one."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"patterns": [
        {"id": "oom", "regex": "OOMKilled", "code": "X1", "priority": 2, "severity": "critical",
         "case_sensitive": True}]}))
    eng = Engine(Catalog.load(path, "replace"))
    assert by_line(eng.scan_bytes(b"reason: OOMKilled\nreason: oomkilled\n")) == {1: {"X1"}}


def test_regexes_are_compiled_when_they_first_confirm_a_line() -> None:
    """lazy_searches: each entry behaves as the compiled regex's search from its first call,
    when it puts the compiled search in its place; regexes never called are never compiled."""
    from healer.detect import _match

    compiled: list[str] = []

    def compiler(rx: bytes) -> object:
        def compile_() -> object:
            compiled.append(rx.decode())
            return __import__("re").compile(rx)
        return compile_

    table = _match.lazy_searches([compiler(b"time.?out"), compiler(b"refused")])
    assert compiled == []
    assert table[1](b"connection refused") is not None and table[1](b"ok") is None
    assert compiled == ["refused"] and table[1] == __import__("re").compile(b"refused").search
    assert not isinstance(table[0], type(table[1]))  # still waiting


def test_which_regexes_need_no_confirming_is_remembered(_private_cache: Path) -> None:
    """single_line_exact_all: single_line_exact for each regex, from the on-disk cache the
    second time (and the same when the entry is damaged)."""
    from healer.detect import _match

    regexes = [r"connection refused", r"\bOOMKilled\b", r"^fatal", r"a\sb", r"x[^y]z"]
    want = [_match.single_line_exact(r) for r in regexes]
    assert want == [True, True, False, False, False]
    assert _match.single_line_exact_all(regexes) == want
    [entry] = (_private_cache / "detect").glob("exact-*")
    assert _match.single_line_exact_all(regexes) == want
    entry.write_bytes(b"garbage")
    assert _match.single_line_exact_all(regexes) == want



def test_scan_block_takes_candidates_found_ahead(corpus) -> None:  # type: ignore[no-untyped-def]
    """scan_block(collected=(upto, collector)): with the native database's matches in the
    block up to any line's end already collected (by the reading thread), it finds the rest
    and gives what it gives alone."""
    from healer.detect import _native

    engine = Engine(Catalog.load(), engine="hyperscan")
    if engine.native_db is None:
        pytest.skip("the native module or libhs is not here")
    buf = bytearray(corpus.data[: corpus.data.rindex(b"\n", 0, 200_000) + 1])
    alone = engine.scan_block(buf, 0, len(buf), [])
    ends = [0, buf.index(b"\n") + 1, buf.rindex(b"\n", 0, len(buf) // 2) + 1, len(buf)]
    for upto in ends:
        found = _native.speedups.Collector()
        found.reset(-1)
        engine.native_db.scan(buf, 0, upto, found)
        assert engine.scan_block(buf, 0, len(buf), [], 0, (upto, found)) == alone
    assert len(alone[1]) > 20


def test_regions_are_even_and_start_at_lines(tmp_path: Path) -> None:
    """A file is split into regions of about the same size (the caller's too: its workers
    write their own output), each starting at a line; where a cut falls in a line longer than
    the look-ahead, there is one region fewer, never a split line."""
    rng = random.Random(5)
    data = b"".join(b"x" * rng.randrange(1, 300) + b"\n" for _ in range(20_000))
    path = tmp_path / "a.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        for n in (2, 3, 4):
            regions = _files._split(fd, len(data), n)
            assert len(regions) == n and regions[0][0] == 0 and regions[-1][1] == len(data)
            assert all(a == b for (_, b), (a, _) in itertools.pairwise(regions))
            assert all(data[a - 1:a] == b"\n" for a, _ in regions[1:])
            assert all(abs((b - a) - len(data) / n) < 400 for a, b in regions)
    finally:
        os.close(fd)
    half = b"x\n" * 50_000
    path.write_bytes(half + b"y" * 300_000 + b"\n" + half)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        assert _files._split(fd, size, 2) == [(0, size)]  # the middle is one long line
    finally:
        os.close(fd)
