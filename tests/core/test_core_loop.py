"""The loop as a real process: applies results, survives kill -9, stops cleanly."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from healer.testing.loop import LoopProcess, drop_result
from healer.testing.wait import wait_for

pytestmark = pytest.mark.e2e


def ledger(state: Path) -> list[dict]:  # type: ignore[type-arg]
    folder = state / "records" / "results"
    if not folder.exists():
        return []
    out = []
    for p in folder.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            out.append(json.loads(p.read_text())["data"])
    return out


class TestLoop:
    def test_applies_results_and_stops_cleanly(self, dirs) -> None:  # type: ignore[no-untyped-def]
        """Results dropped into the results dir are applied; SIGTERM stops with exit 0."""
        loop = LoopProcess(dirs.env).start()
        try:
            for i in range(20):
                drop_result(dirs.results, "diagnose", f"mac{i}", status="diagnosed")
            wait_for(lambda: len(ledger(dirs.state)) == 20)
        finally:
            code = loop.stop()
        assert code == 0
        status = json.loads((dirs.state / "loop.json").read_text())
        assert status["state"] == "stopped" and status["bus"]["applied"] == 20
        assert sorted(p.name for p in dirs.results.iterdir()) == ["applied", "rejected"]

    def test_kill9_during_burst(self, dirs) -> None:  # type: ignore[no-untyped-def]
        """kill -9 in the middle of 1,000 results: after a restart each is applied exactly once."""
        total = 1000
        loop = LoopProcess(dirs.env).start()
        written: list[str] = []

        def writer() -> None:
            for i in range(total):
                written.append(drop_result(dirs.results, "diagnose", f"n{i:04d}",
                                           epoch=1700000000 + i).name)

        t = threading.Thread(target=writer)
        t.start()
        wait_for(lambda: len(ledger(dirs.state)) >= 150)
        loop.kill9()
        t.join()
        applied_before = len(ledger(dirs.state))
        assert applied_before < total, "the kill came too late to test anything"
        loop2 = LoopProcess(dirs.env).start()
        try:
            wait_for(lambda: len(ledger(dirs.state)) >= total, timeout=60)
            assert loop2.proc is not None
        finally:
            assert loop2.stop() == 0
        records = ledger(dirs.state)
        names = [r["name"] for r in records]
        assert len(names) == total and len(set(names)) == total
        assert sorted(names) == sorted(written)
        # (``.member`` is the set's hard-link source, not a member)
        assert [p for p in (dirs.state / "sets" / "results-pending").iterdir()
                if not p.name.startswith(".")] == []
        assert sorted(p.name for p in (dirs.results / "applied").iterdir()) == sorted(written)
        assert list((dirs.results / "rejected").iterdir()) == []

    def test_once(self, dirs) -> None:  # type: ignore[no-untyped-def]
        """--once processes what is pending and exits 0."""
        for i in range(3):
            drop_result(dirs.results, "tunnel", f"mac{i}", status="healed")
        proc = subprocess.run([sys.executable, "-m", "healer.loop", "--once"], env=dirs.env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert len(ledger(dirs.state)) == 3

    def test_duration(self, dirs) -> None:  # type: ignore[no-untyped-def]
        """--duration S stops by itself."""
        proc = subprocess.run([sys.executable, "-m", "healer.loop", "--duration", "1"],
                              env=dirs.env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "duration of 1 s reached" in proc.stderr

    def test_json_logs(self, dirs) -> None:  # type: ignore[no-untyped-def]
        """--log-format json writes one JSON object per log line."""
        drop_result(dirs.results, "nats", "mac1", status="healed")
        proc = subprocess.run(
            [sys.executable, "-m", "healer.loop", "--once", "--log-format", "json"],
            env=dirs.env, capture_output=True, text=True, timeout=60)
        lines = [json.loads(x) for x in proc.stderr.splitlines() if x.strip()]
        assert any(x.get("result_id") and x["level"] == "info" for x in lines)

    def test_second_loop_refused(self, dirs) -> None:  # type: ignore[no-untyped-def]
        """A second loop on the same state dir is refused with exit 2, the first unharmed."""
        with LoopProcess(dirs.env) as first:
            proc = subprocess.run([sys.executable, "-m", "healer.loop", "--once"],
                                  env=dirs.env, capture_output=True, text=True, timeout=60)
            assert proc.returncode == 2
            assert "another healer loop is running" in proc.stderr
            assert first.proc is not None and first.proc.poll() is None

    def test_sigint(self, dirs) -> None:  # type: ignore[no-untyped-def]
        """Ctrl-C stops the loop cleanly too."""
        loop = LoopProcess(dirs.env).start()
        loop.signal(signal.SIGINT)
        assert loop.proc is not None and loop.proc.wait(20) == 0

    def test_bad_settings_exit_2(self, dirs) -> None:  # type: ignore[no-untyped-def]
        env = {**dirs.env, "HEALER__BUS__SETTLE_S": "soon"}
        proc = subprocess.run([sys.executable, "-m", "healer.loop", "--once"], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        assert "HEALER__BUS__SETTLE_S" in proc.stderr and "Traceback" not in proc.stderr
        assert os.path.exists(dirs.state)
