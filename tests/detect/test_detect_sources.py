"""Log sources: followed files (rotation, truncation), pipes, commands, the Follower."""

from __future__ import annotations

import io
import os
import queue
import sys
import threading
from pathlib import Path

import pytest

from healer.detect.catalog import Catalog
from healer.detect.engine import Engine
from healer.detect.sources import CommandSource, Event, FileFollower, Follower
from healer.errors import UsageError


def data_of(events: list[Event]) -> bytes:
    return b"".join(e.data for e in events if e.kind == "data")


class TestFileFollower:
    def test_reads_appended_data(self, tmp_path: Path) -> None:
        """Each poll returns what was appended since the last one."""
        log = tmp_path / "a.log"
        log.write_bytes(b"one\n")
        f = FileFollower(log)
        assert data_of(f.poll()) == b"one\n"
        assert f.poll() == []
        with log.open("ab") as fh:
            fh.write(b"two\nthr")
        assert data_of(f.poll()) == b"two\nthr"

    def test_from_end(self, tmp_path: Path) -> None:
        """from_start=False skips what was there before (tail -F without -n +1)."""
        log = tmp_path / "a.log"
        log.write_bytes(b"old\n")
        f = FileFollower(log, from_start=False)
        assert f.poll() == []
        with log.open("ab") as fh:
            fh.write(b"new\n")
        assert data_of(f.poll()) == b"new\n"

    def test_rotation_drains_old_file_first(self, tmp_path: Path) -> None:
        """After rename + new file, the rest of the old file comes before the new one."""
        log = tmp_path / "a.log"
        log.write_bytes(b"1\n")
        f = FileFollower(log)
        f.poll()
        with log.open("ab") as fh:
            fh.write(b"2\n")
        log.rename(tmp_path / "a.log.1")
        log.write_bytes(b"3\n")
        events = f.poll()
        assert [e.kind for e in events] == ["data", "restart", "data"]
        assert events[1].reason == "rotated" and data_of(events) == b"2\n3\n"

    def test_truncation_restarts_at_top(self, tmp_path: Path) -> None:
        """A file that got shorter is read again from its start."""
        log = tmp_path / "a.log"
        log.write_bytes(b"first line\nsecond line\n")
        f = FileFollower(log)
        f.poll()
        log.write_bytes(b"new\n")
        events = f.poll()
        assert [e.kind for e in events] == ["restart", "data"]
        assert events[0].reason == "truncated" and data_of(events) == b"new\n"

    def test_missing_then_created(self, tmp_path: Path) -> None:
        """A file that does not exist yet is picked up once it appears."""
        log = tmp_path / "later.log"
        f = FileFollower(log)
        assert f.poll() == []
        log.write_bytes(b"hello\n")
        assert data_of(f.poll()) == b"hello\n"

    def test_rotated_away_keeps_reading_old(self, tmp_path: Path) -> None:
        """While the path is gone, the old file is still read."""
        log = tmp_path / "a.log"
        log.write_bytes(b"")
        f = FileFollower(log)
        f.poll()
        with log.open("ab") as fh:
            log.rename(tmp_path / "a.log.1")
            fh.write(b"late\n")
        assert data_of(f.poll()) == b"late\n"


    def test_an_append_wakes_the_follower_at_once(self, tmp_path: Path) -> None:
        """inotify, not a poll: with a 60 s poll interval an appended line still arrives (and
        so does one in a file that is rotated in), well before the next poll."""
        log = tmp_path / "a.log"
        log.write_bytes(b"zero\n")
        stop = threading.Event()
        got: queue.Queue[Event] = queue.Queue()

        def run() -> None:
            for ev in FileFollower(log).follow(stop, poll_s=60):
                got.put(ev)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        try:
            assert got.get(timeout=10).data == b"zero\n"  # it has read; next it waits
            with open(log, "ab") as fh:
                fh.write(b"one\n")
            assert got.get(timeout=10).data == b"one\n"
            fresh = tmp_path / "b.log"
            fresh.write_bytes(b"two\n")
            os.replace(fresh, log)
            events = [got.get(timeout=10), got.get(timeout=10)]
            assert [e.kind for e in events] == ["restart", "data"]
            assert events[1].data == b"two\n"
        finally:
            stop.set()
            with open(log, "ab") as fh:  # wakes it, so it sees stop
                fh.write(b"\n")
            t.join(timeout=10)


class TestFollower:
    def test_alerts_keep_line_numbers_across_rotation(self, tmp_path: Path) -> None:
        """Lines count from 1 again in a rotated file; a partial last line is flushed."""
        log = tmp_path / "a.log"
        log.write_bytes(b"ok\nconnection refused\npartial timeout")
        engine = Engine(Catalog.load())
        got = []
        follower = Follower(engine, got.append, poll_s=0.01)
        follower.add_file(log)
        stop = threading.Event()
        thread = threading.Thread(target=follower.run, args=(stop,))
        thread.start()
        try:
            _wait(lambda: len(got) == 1)
            log.rename(tmp_path / "a.log.1")
            log.write_bytes(b"fatal error\n")
            _wait(lambda: len(got) == 3)
        finally:
            stop.set()
            thread.join(5)
        assert [(a.line_no, a.code) for a in got] == [(2, "R2"), (3, "R2"), (1, "R1")]

    def test_stream_source(self) -> None:
        """A pipe is read to its end; the last line without newline counts."""
        engine = Engine(Catalog.load())
        got = []
        follower = Follower(engine, got.append)
        follower.add_stream(io.BytesIO(b"a\nmax retries exceeded\nfatal error"), "pipe")
        follower.run()
        assert [(a.source, a.line_no, a.code) for a in got] == [("pipe", 2, "R3"),
                                                                ("pipe", 3, "R1")]

    @pytest.mark.e2e
    def test_command_output(self) -> None:
        """A command's stdout and stderr are scanned; it runs from an argv list."""
        engine = Engine(Catalog.load())
        got = []
        follower = Follower(engine, got.append)
        code = ("import sys; print('ok'); print('connection refused', flush=True); "
                "print('invalid token', file=sys.stderr)")
        follower.add_command([sys.executable, "-c", code])
        follower.run()
        assert sorted(a.code for a in got) == ["R2", "R5"]
        assert follower.failures == []

    @pytest.mark.e2e
    def test_failing_command_is_reported(self) -> None:
        """A command that exits non-zero is a failure the caller can report."""
        follower = Follower(Engine(Catalog.load()), lambda a: None)
        follower.add_command([sys.executable, "-c", "raise SystemExit(4)"])
        follower.run()
        assert len(follower.failures) == 1 and "status 4" in str(follower.failures[0])

    def test_unknown_command(self) -> None:
        """A command that does not exist is a usage error, before anything runs."""
        with pytest.raises(UsageError, match="command not found"):
            CommandSource(["no-such-binary-for-healer-tests"])

    def test_shell_strings_refused(self) -> None:
        """A command must be an argv list, never a shell string."""
        with pytest.raises(UsageError, match="argv list"):
            CommandSource("kubectl logs -f")  # type: ignore[arg-type]

    @pytest.mark.e2e
    def test_stop_kills_command(self) -> None:
        """Stopping the follower ends a command that would run forever, and its children."""
        follower = Follower(Engine(Catalog.load()), lambda a: None)
        cmd = follower.add_command([sys.executable, "-c",
                                    "import time\nwhile True: print('x', flush=True); "
                                    "time.sleep(0.05)"])
        follower.run(duration=0.5)
        assert cmd.proc.poll() is not None
        with pytest.raises(ProcessLookupError):
            os.kill(cmd.proc.pid, 0)


def _wait(cond, timeout: float = 10) -> None:  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)
