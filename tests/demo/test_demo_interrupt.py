"""The demo's own words, and Ctrl-C.

* Ctrl-C (SIGINT to the demo's whole process group, as a terminal sends it) ends the demo:
  "interrupted", the running fault marked ``interrupted`` (not "timed out"), exit 130, its
  folder removed and no process of its group left.
* Without a terminal the demo's tables are wide enough for whole agent names.
* A fault's time to heal is one figure, from the same two instants, in the live line and the
  summary.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from healer.testing.fleet import nats_server_binary, sshd_binary
from healer.testing.wait import wait_for


def group_members(pgid: int) -> list[str]:
    """Command lines of live processes in process group ``pgid`` (zombies excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
            cmd = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(cmd.decode(errors="replace"))
    return found


def start_demo(tmp_path: Path, faults: str, **extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEALER")
           and k != "COLUMNS"}
    env.update(HEALER_DEMO_FAULTS=faults, HEALER_STATE_DIR=str(tmp_path / "state"),
               HEALER_DEMO_SUMMARY=str(tmp_path / "summary.json"), HEALER_PORT="0",
               PYTHONUNBUFFERED="1", **extra)
    # A session of its own: the test sends SIGINT to the group, as a terminal's Ctrl-C does.
    return subprocess.Popen([sys.executable, "-m", "healer", "loop", "--demo"], env=env,
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


class Output:
    """Every line the demo printed so far (read by a thread: the pipe never fills)."""

    def __init__(self, proc: subprocess.Popen[str]):
        self.lines: list[str] = []
        assert proc.stdout is not None
        self._thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream: io.TextIOBase) -> None:
        for line in stream:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def close(self) -> None:
        self._thread.join(10)


@pytest.mark.e2e
def test_ctrl_c_interrupts_cleanly(tmp_path: Path) -> None:
    if not nats_server_binary() or not sshd_binary():
        pytest.skip("nats-server or sshd missing")
    proc = start_demo(tmp_path, "unhealable")
    out = Output(proc)
    pgid = proc.pid
    try:
        wait_for(lambda: "fault: restart command fails" in out.text or proc.poll() is not None,
                 timeout=120)
        root = re.search(r"under (/\S*healer-demo-\S+)", out.text)
        assert root and proc.poll() is None, out.text
        os.killpg(pgid, signal.SIGINT)
        code = proc.wait(90)
    finally:
        if proc.poll() is None:
            os.killpg(pgid, signal.SIGKILL)
            proc.wait(10)
        out.close()
    text = out.text
    assert code == 130, text
    assert "demo interrupted" in text and "FAILED" not in text and "Traceback" not in text
    assert not Path(root.group(1)).exists()
    wait_for(lambda: not group_members(pgid), timeout=10)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert [r["outcome"] for r in summary["rows"]] == ["interrupted"]


def test_without_a_terminal_tables_keep_whole_agent_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from healer.demo.run import _console
    from healer.fleet.render import episodes_table

    monkeypatch.delenv("COLUMNS", raising=False)
    sink = io.StringIO()
    console = _console(sink)
    console.print(episodes_table([{
        "fault": "node moved (address+port)", "peer": "n3",
        "channels": ["http", "tunnel", "nats", "ssh", "seed"],
        "agents": ["address-reconciler", "tunnel-establisher", "daemon-restarter"],
        "seconds": 4.2, "outcome": "healed"}], title="summary"))
    assert "address-reconciler, tunnel-establisher, daemon-restarter" in sink.getvalue()
    assert "node moved (address+port)" in sink.getvalue()


def test_one_heal_time_in_the_live_line_and_the_summary() -> None:
    """The live "healed" line and the summary's seconds are one measure: injection → healed."""
    from healer.demo.run import _heal_seconds, _Printer

    sink = io.StringIO()
    from healer.demo.run import _console

    printer = _Printer(_console(sink), started=0.0)
    printer.injected = 1000.0
    healed = {"type": "healed", "peer": "n2", "at": 1004.4, "duration_s": 3.8}
    printer(healed)
    assert f"healed {_heal_seconds(healed, 1000.0):.1f} s after the fault" in sink.getvalue()
    assert "4.4 s after the fault" in sink.getvalue()
