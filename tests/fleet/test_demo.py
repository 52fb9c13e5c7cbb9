"""`healer loop --demo`: a broken local fleet heals itself, ends on its own, leaves nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from healer.testing.fleet import nats_server_binary, sshd_binary


def demo_processes() -> list[str]:
    """Command lines of live processes that belong to a demo fleet."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if b"healer-demo-" in cmd:
                found.append(cmd.decode(errors="replace"))
    return found


def run_demo(tmp_path: Path, faults: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEALER")}
    env.update(HEALER_DEMO_FAULTS=faults, HEALER_STATE_DIR=str(tmp_path / "state"),
               HEALER_DEMO_SUMMARY=str(tmp_path / "summary.json"), COLUMNS="160",
               HEALER_PORT="0")  # the dashboard on any free port: demos may run side by side
    return subprocess.run([sys.executable, "-m", "healer", "loop", "--demo"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)


@pytest.mark.e2e
class TestDemo:
    def test_demo_heals_and_escalates_then_stops(self, tmp_path: Path) -> None:
        """The demo kills a daemon (healed by the daemon restarter), then breaks a restart
        command (three attempts, one escalation), prints the summary and exits 0 with no
        process left behind."""
        if not nats_server_binary() or not sshd_binary():
            pytest.skip("nats-server or sshd missing")
        r = run_demo(tmp_path, "daemon,unhealable")
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        out = r.stdout
        assert "fault: daemon killed on n2" in out and "✓ n2 healed" in out
        assert out.count("→ daemon-restarter for http, tunnel, nats") == 4  # 1 + 3 attempts
        assert "✗ n3 escalated to a person after 3 attempts" in out
        assert "the escalation a person gets" in out and "healer fleet heal n3" in out
        assert "summary" in out and "demo passed" in out
        assert "dashboard: http://127.0.0.1:" in out  # make run says where to watch it
        assert demo_processes() == []
        summary = json.loads((tmp_path / "summary.json").read_text())  # benchmarks read it
        assert summary["passed"] is True and summary["faults"] == ["daemon", "unhealable"]
        assert [(r["key"], r["outcome"]) for r in summary["rows"]] == [
            ("daemon", "healed"), ("unhealable", "escalated")]

    def test_unknown_fault_is_a_usage_error(self, tmp_path: Path) -> None:
        """Asking for a fault the demo does not have exits 2 before anything starts."""
        r = run_demo(tmp_path, "meteor")
        assert r.returncode == 2 and "unknown fault 'meteor'" in r.stderr
