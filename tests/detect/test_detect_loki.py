"""Loki as a source, against a fake Loki on 127.0.0.1 speaking the real wire format."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from detect_helpers import run_scan, scan_env

from healer.detect.catalog import Catalog
from healer.detect.engine import Engine
from healer.detect.loki import LokiSource, parse_streams
from healer.detect.sources import Follower
from healer.errors import UnavailableError, UsageError
from healer.testing.fake_loki import FakeLoki

NOW = time.time()
POD_A = {"namespace": "cto", "pod": "play-task-4-impl-a", "app": "coderun"}
POD_B = {"namespace": "cto", "pod": "play-task-4-test-b", "app": "coderun"}


def ns(offset_s: float) -> int:
    return int((NOW + offset_s) * 1e9)


def fill(loki: FakeLoki, n: int = 30) -> None:
    for i in range(n):
        line = "connection refused" if i % 3 == 0 else f"processing {i}"
        loki.push(POD_A if i % 2 else POD_B, ns(-600 + i), line)
    loki.push({"namespace": "other", "pod": "x"}, ns(-300), "fatal error elsewhere")


class TestWireFormat:
    def test_parse_streams(self) -> None:
        """query_range results and tail messages become entries, oldest first."""
        doc = [{"stream": {"pod": "a"}, "values": [["20", "second"], ["10", "first"]]},
               {"stream": {"pod": "b"}, "values": [["15", "middle"]]}]
        entries = parse_streams(doc)
        assert [(e.ts_ns, e.line, e.labels["pod"]) for e in entries] == [
            (10, "first", "a"), (15, "middle", "b"), (20, "second", "a")]
        assert entries[0].source == 'loki:{pod="a"}'

    def test_bad_url(self) -> None:
        """Only http(s) URLs are accepted."""
        with pytest.raises(UsageError, match="http"):
            LokiSource("ftp://127.0.0.1:1", '{a="b"}')


class TestBackfill:
    def test_pages_through_everything(self, fake_loki: FakeLoki) -> None:
        """query_range is paged (here 7 a page) without losing or repeating entries."""
        fill(fake_loki)
        src = LokiSource(fake_loki.url, '{namespace="cto"}', since=NOW - 3600, page_limit=7)
        entries = list(src.query_range(ns(-3600), ns(0)))
        assert len(entries) == 30 and len(fake_loki.requests) >= 5
        assert [e.ts_ns for e in entries] == sorted(e.ts_ns for e in entries)
        assert fake_loki.requests[0]["direction"] == "forward"

    def test_same_nanosecond_across_pages(self, fake_loki: FakeLoki) -> None:
        """Entries sharing one timestamp across a page boundary are all kept, once."""
        for i in range(5):
            fake_loki.push(POD_A, ns(-10), f"same ts {i}")
        src = LokiSource(fake_loki.url, '{namespace="cto"}', page_limit=3)
        assert sorted(e.line for e in src.query_range(ns(-20), ns(0))) == [
            f"same ts {i}" for i in range(5)]

    def test_alerts_keep_labels(self, fake_loki: FakeLoki) -> None:
        """Alerts from Loki carry the stream labels and the entry's timestamp."""
        fill(fake_loki)
        got = []
        follower = Follower(Engine(Catalog.load()), got.append)
        src = LokiSource(fake_loki.url, '{namespace="cto"}', since=NOW - 3600)
        follower.add_events("loki", src.events)
        follower.run()
        assert len(got) == 10 and {a.code for a in got} == {"R2"}
        assert {a.labels["pod"] for a in got} == {POD_A["pod"], POD_B["pod"]}
        assert all(a.source.startswith("loki:{") and a.ts for a in got)
        assert got[0].ts == pytest.approx(NOW - 600, abs=1e-3)

    def test_unreachable(self) -> None:
        """An unreachable Loki is an UnavailableError (exit 3)."""
        src = LokiSource("http://127.0.0.1:9", '{a="b"}', timeout_s=2)
        with pytest.raises(UnavailableError, match="unreachable"):
            list(src.query_range(0, 10))


class TestTail:
    def test_tail_after_backfill(self, fake_loki: FakeLoki) -> None:
        """With follow, the backfill is followed by live entries over WebSocket."""
        fill(fake_loki, 3)
        got = []
        follower = Follower(Engine(Catalog.load()), got.append)
        src = LokiSource(fake_loki.url, '{app="coderun"}', since=NOW - 3600, follow=True)
        follower.add_events("loki", src.events)
        stop = threading.Event()
        thread = threading.Thread(target=follower.run, args=(stop,))
        thread.start()
        try:
            _wait(lambda: len(got) == 1)
            time.sleep(0.3)  # the tail is connected once the backfill is done
            fake_loki.push(POD_A, time.time_ns(), "max retries exceeded")
            fake_loki.push({"app": "other"}, time.time_ns(), "fatal error")
            _wait(lambda: len(got) == 2)
        finally:
            stop.set()
            thread.join(5)
        assert [a.code for a in got] == ["R2", "R3"]

    def test_dropped_entries_are_counted(self, fake_loki: FakeLoki) -> None:
        """dropped_entries in a tail message are counted, not silently lost."""
        src = LokiSource(fake_loki.url, '{app="coderun"}', follow=True)
        stop = threading.Event()
        got = []

        def run() -> None:
            for entry in src.tail(time.time_ns(), stop):
                got.append(entry)

        thread = threading.Thread(target=run)
        thread.start()
        try:
            time.sleep(0.5)
            fake_loki.push(POD_A, time.time_ns(), "ok", dropped=3)
            _wait(lambda: got)
        finally:
            stop.set()
            thread.join(5)
        assert src.dropped == 3


@pytest.mark.e2e
class TestCli:
    def test_scan_loki(self, fake_loki: FakeLoki, tmp_path: Path) -> None:
        """healer scan --loki URL --query LOGQL --since 1h prints the alerts as JSON."""
        fill(fake_loki)
        r = run_scan(tmp_path, "--loki", fake_loki.url, "--query", '{namespace="cto"}',
                     "--since", "1h", "--json")
        assert r.code == 1, r.err
        alerts = [json.loads(x) for x in r.out.splitlines()]
        assert len(alerts) == 10 and alerts[0]["labels"]["namespace"] == "cto"

    def test_scan_loki_follow(self, fake_loki: FakeLoki, tmp_path: Path) -> None:
        """--follow keeps tailing until stopped."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "healer", "scan", "--loki", fake_loki.url, "--query",
             '{app="coderun"}', "--follow", "--json", "--duration", "20"],
            cwd=tmp_path, env=scan_env(tmp_path), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        try:
            assert proc.stdout is not None
            deadline = time.monotonic() + 15
            line = b""
            while not line and time.monotonic() < deadline:
                fake_loki.push(POD_A, time.time_ns(), "template not found: x")
                time.sleep(0.3)
                line = proc.stdout.readline() if _readable(proc.stdout) else b""
            assert json.loads(line)["code"] == "L1"
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=15)
        assert proc.returncode == 1, err

    def test_loki_needs_query(self, tmp_path: Path) -> None:
        """--loki without --query is a usage error."""
        r = run_scan(tmp_path, "--loki", "http://127.0.0.1:9")
        assert r.code == 2 and "--query" in r.err

    def test_loki_down_exit_3(self, tmp_path: Path) -> None:
        """An unreachable Loki exits 3 with a one-line reason."""
        r = run_scan(tmp_path, "--loki", "http://127.0.0.1:9", "--query", '{a="b"}')
        assert r.code == 3 and "unreachable" in r.err and "Traceback" not in r.err


def _readable(stream) -> bool:  # type: ignore[no-untyped-def]
    import select

    return bool(select.select([stream], [], [], 0.5)[0])


def _wait(cond, timeout: float = 10) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)
