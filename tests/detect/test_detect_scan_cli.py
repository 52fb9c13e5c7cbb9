"""`healer scan`: the real command in a child process — output, exit codes, following."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from detect_helpers import CORPUS, run_scan, scan_env

pytestmark = pytest.mark.e2e


def log(tmp_path: Path, text: str, name: str = "agent.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


class TestOutput:
    def test_no_alerts_exit_0(self, tmp_path: Path) -> None:
        """A clean log exits 0 and says so."""
        r = run_scan(tmp_path, str(log(tmp_path, "all good\nlevel=info error=nil\n")))
        assert r.code == 0 and "no alerts" in r.out

    def test_alerts_exit_1_with_table(self, tmp_path: Path) -> None:
        """Alerts are listed with file:line, and a summary table by code and severity follows."""
        path = log(tmp_path, "ok\nconnection refused\nfatal error\ntimeout again\n")
        r = run_scan(tmp_path, str(path))
        assert r.code == 1, r.err
        assert f"{path}:2: R2 high [connection-refused] connection refused" in r.out
        assert "3 alert(s)" in r.out and "critical" in r.out and "│ R2" in r.out

    def test_summary_off_a_terminal_is_drawn_without_rich(self, tmp_path: Path) -> None:
        """Off a terminal the summary is healer's own drawing of the same table (importing
        rich would cost more start-up than scanning 50 MB)."""
        path = log(tmp_path, "ok\nconnection refused\nfatal error\n" + "timeout\n" * 5)
        for flags in ([], ["-X", "importtime"]):  # the first fills the cache (compiles)
            proc = subprocess.run([sys.executable, *flags, "-m", "healer", "scan", "--json",
                                   str(path)], cwd=tmp_path, env=scan_env(tmp_path),
                                  capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 1, proc.stderr
        imported = [ln.split("|")[-1].strip() for ln in proc.stderr.splitlines()
                    if ln.startswith("import time:")]
        assert "rich" not in imported and "healer.detect.engine" in imported
        # With the catalog cached: typing and pathlib (with urllib.parse and ipaddress) are
        # ~5 ms of a 50 MB scan's ~60 (healer._runtime_typing; resources.bundle_file), signal's
        # enums and queue ~0.8 ms more (imported where a worker is killed, a log followed).
        assert not {"typing", "pathlib", "dataclasses", "logging", "signal",
                    "queue"} & set(imported)
        table = [ln for ln in proc.stderr.splitlines() if not ln.startswith("import time:")]
        assert table[0] == "7 alert(s) in 1 source(s)"
        assert table[1].startswith("┏━━━━━━┳") and table[-1].startswith("└")
        assert any(ln.startswith("│ R2   │ high") for ln in table)
        assert "service(s) over the thresholds" in proc.stderr

    def test_json_lines(self, tmp_path: Path) -> None:
        """--json prints one JSON alert per line; the summary goes to stderr."""
        r = run_scan(tmp_path, "--json", str(CORPUS / "agent.log"))
        assert r.code == 1
        alerts = [json.loads(line) for line in r.out.splitlines()]
        assert len(alerts) == 96
        assert set(alerts[0]) == {"code", "id", "priority", "severity", "source", "line_no",
                                  "ts", "line", "meaning", "action"}
        assert "96 alert(s)" in r.err

    def test_engines_agree_end_to_end(self, tmp_path: Path) -> None:
        """--engine re and --engine hyperscan print the same alerts."""
        a = run_scan(tmp_path, "--json", "--engine", "re", str(CORPUS / "agent.log"))
        b = run_scan(tmp_path, "--json", "--engine", "hyperscan", str(CORPUS / "agent.log"))
        assert a.out == b.out and a.out

    def test_stdin(self, tmp_path: Path) -> None:
        """- reads stdin."""
        r = run_scan(tmp_path, "-", "--json", "--no-summary",
                     input=b"x\nmax retries exceeded\n")
        assert r.code == 1 and json.loads(r.out)["source"] == "-" and not r.err

    def test_several_files(self, tmp_path: Path) -> None:
        """Each file is its own stream with its own line numbers."""
        a = log(tmp_path, "timeout\n", "a.log")
        b = log(tmp_path, "x\ntimeout\n", "b.log")
        r = run_scan(tmp_path, "--json", str(a), str(b))
        got = [(x["source"], x["line_no"]) for x in map(json.loads, r.out.splitlines())]
        assert got == [(str(a), 1), (str(b), 2)]

    def test_since(self, tmp_path: Path) -> None:
        """--since skips older timestamped lines."""
        path = log(tmp_path, "2020-01-01T00:00:00Z timeout\n2999-01-01T00:00:00Z timeout\n")
        r = run_scan(tmp_path, "--json", "--since", "10m", str(path))
        assert [json.loads(x)["line_no"] for x in r.out.splitlines()] == [2]
        r = run_scan(tmp_path, "--json", "--since", "2019-06-01T00:00:00Z", str(path))
        assert len(r.out.splitlines()) == 2

    def test_start_moves_preflight_window(self, tmp_path: Path) -> None:
        """--start sets the agent's start for the pre-flight window."""
        path = log(tmp_path, "2024-05-01T10:00:00Z x\n2024-05-01T10:05:00Z tool inventory "
                   "mismatch\n")
        assert run_scan(tmp_path, str(path)).code == 0
        r = run_scan(tmp_path, "--json", "--start", "2024-05-01T10:04:30Z", str(path))
        assert r.code == 1 and json.loads(r.out)["code"] == "A10"

    def test_user_catalog(self, tmp_path: Path) -> None:
        """--catalog adds the user's patterns; --catalog-mode replace uses only them."""
        cat = tmp_path / "mine.yaml"
        cat.write_text(yaml.safe_dump({"patterns": [
            {"id": "oom", "regex": "OOMKilled", "code": "X1", "priority": 2,
             "severity": "critical"}]}))
        path = log(tmp_path, "reason: OOMKilled\nconnection refused\n")
        r = run_scan(tmp_path, "--json", "--catalog", str(cat), str(path))
        assert sorted(json.loads(x)["code"] for x in r.out.splitlines()) == ["R2", "X1"]
        r = run_scan(tmp_path, "--json", "--catalog", str(cat), "--catalog-mode", "replace",
                     str(path))
        assert [json.loads(x)["code"] for x in r.out.splitlines()] == ["X1"]

    def test_catalog_setting(self, tmp_path: Path) -> None:
        """The settings detect.catalog and detect.catalog_mode choose the catalog."""
        cat = tmp_path / "mine.yaml"
        cat.write_text(yaml.safe_dump({"patterns": [
            {"id": "oom", "regex": "OOMKilled", "code": "X1", "priority": 2,
             "severity": "critical"}]}))
        path = log(tmp_path, "reason: OOMKilled\nconnection refused\n")
        r = run_scan(tmp_path, "--json", "--set", f"detect.catalog={cat}", "--set",
                     "detect.catalog_mode=replace", str(path))
        assert [json.loads(x)["code"] for x in r.out.splitlines()] == ["X1"]

    def test_settings_apply(self, tmp_path: Path) -> None:
        """detect.* settings from healer.yaml and --set are honoured."""
        path = log(tmp_path, "connection refused " + "x" * 300 + "\n")
        (tmp_path / "healer.yaml").write_text("detect:\n  max_line_chars: 50\n")
        r = run_scan(tmp_path, "--json", str(path))
        assert len(json.loads(r.out)["line"]) == 50
        r = run_scan(tmp_path, "--json", "--set", "detect.max_line_chars=30", str(path))
        assert len(json.loads(r.out)["line"]) == 30

    def test_command(self, tmp_path: Path) -> None:
        """--cmd -- ARGV scans a command's output."""
        r = run_scan(tmp_path, "--json", "--cmd", "--", sys.executable, "-c",
                     "print('ok'); print('role undefined')")
        assert r.code == 1 and json.loads(r.out)["code"] == "L3"


class TestProgress:
    def run_on_terminal(self, tmp_path: Path, *args: str) -> bytes:
        import os
        import pty
        import select

        master, slave = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "healer", "scan", *args], cwd=tmp_path,
                                env=scan_env(tmp_path), stdout=slave, stderr=slave)
        os.close(slave)
        out = b""
        while select.select([master], [], [], 30)[0]:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        proc.wait(timeout=30)
        os.close(master)
        return out

    def test_bar_on_big_files_on_a_terminal(self, tmp_path: Path) -> None:
        """A 64 MB+ file scanned with stdout on a terminal shows a progress bar."""
        big = tmp_path / "big.log"
        big.write_bytes(b"2024-05-01T10:00:00Z level=info msg=ok\n" * 1_800_000
                        + b"connection refused\n")
        assert "━".encode() in self.run_on_terminal(tmp_path, "--no-summary", str(big))
        r = run_scan(tmp_path, "--no-summary", str(big))
        assert "━" not in r.out + r.err

    @staticmethod
    def screen(out: bytes) -> list[str]:
        """The lines a terminal shows for ``out`` (carriage returns, line erasing and
        cursor-up, as the progress bar uses them; other escape codes dropped)."""
        rows, row, col = [""], 0, 0
        for tok in re.split(rb"(\x1b\[[0-9;?]*[A-Za-z]|\r|\n)", out):
            if tok == b"\r":
                col = 0
            elif tok == b"\n":
                row, col = row + 1, 0
                rows += [""] * (row + 1 - len(rows))
            elif tok == b"\x1b[2K":
                rows[row] = ""
            elif tok == b"\x1b[1A":
                row = max(0, row - 1)
            elif tok and not tok.startswith(b"\x1b["):
                text = tok.decode("utf-8", "replace")
                rows[row] = rows[row][:col] + text + rows[row][col + len(text):]
                col += len(text)
        return [r for r in rows if r]

    def test_the_bar_stops_before_the_first_alert_is_written(self, tmp_path: Path) -> None:
        """Whatever writes the alerts (this process's emit, or the stream) stops the bar
        first, once; a stopped bar is not drawn again by a late progress report."""
        import io
        import os

        from healer.commands._scan_run import _Bar, _Output
        from healer.detect.catalog import Catalog

        events: list[str] = []
        read, write = os.pipe()
        with os.fdopen(write, "w") as stream:
            out = _Output(True, stream, live=False)
            out.before_output = lambda: events.append("stop")
            emit = out.emitter()
            assert emit is not None
            emit(("", {}, {}))
            assert events == []
            emit((b'{"a":1}\n', {}, {}))
            assert events == ["stop"]
        assert os.read(read, 100) == b'{"a":1}\n'
        os.close(read)
        plain = _Output(False, io.StringIO(), live=False)
        plain.before_output = lambda: events.append("stop again")
        plain.write("x\n", {}, Catalog.load())
        assert events == ["stop", "stop again"]

        log = tmp_path / "x.log"
        log.write_bytes(b"x\n")
        bar = _Bar(str(log))
        drawn: list[str] = []
        bar._bar.start = lambda: drawn.append("start")  # type: ignore[method-assign]
        bar._bar.stop = lambda: drawn.append("stop")  # type: ignore[method-assign]
        bar(0, 10)
        bar.stop()
        bar(5, 10)
        bar.stop()
        assert drawn == ["start", "stop"]

    @pytest.mark.parametrize("workers", ["1", "2"])
    def test_alerts_stay_whole_under_the_bar(self, tmp_path: Path, workers: str) -> None:
        """Thousands of alerts printed to the terminal the bar is drawn on: each shows whole
        on its own line, none glued to a frame of the bar or erased by its redrawing."""
        big = tmp_path / "big.log"
        big.write_bytes(b"".join(
            b"2024-05-01T10:00:00Z ERROR connection refused n=%d\n" % k if k % 50 == 0
            else b"2024-05-01T10:00:00Z level=info msg=ok n=%d\n" % k
            for k in range(1_700_000)))
        out = self.run_on_terminal(tmp_path, "--no-summary", "--workers", workers, str(big))
        assert "━".encode() in out
        shown = self.screen(out)
        alert = re.compile(r"\S*/big\.log:\d+: R2 high \[connection-refused\] \S+ ERROR "
                           r"connection refused n=\d+")
        assert [r for r in shown if not alert.fullmatch(r)] == []
        assert len(shown) == 1_700_000 // 50

    @pytest.mark.parametrize("as_json", [True, False])
    def test_workers_write_their_own_output_in_order(self, tmp_path: Path,
                                                     as_json: bool) -> None:
        """A file big enough for two workers: each prints its own region (to a pipe or a
        file), and the bytes are those one process prints."""
        big = tmp_path / "big.log"
        block = "".join(f"2024-05-01T10:00:{k % 60:02d}Z level=info msg=ok n={k}\n" if k % 9
                        else f"2024-05-01T10:00:{k % 60:02d}Z ERROR connection refused é{k}\n"
                        for k in range(40_000))
        big.write_text(block * 20)  # ~40 MB: over PARALLEL_MIN_BYTES
        flags = ["--no-summary", *(["--json"] if as_json else [])]
        one = run_scan(tmp_path, *flags, "--workers", "1", str(big), timeout=120)
        two = run_scan(tmp_path, *flags, "--workers", "2", str(big), timeout=120)
        assert one.code == two.code == 1 and one.out == two.out
        assert one.out.count("\n") == 20 * len(range(0, 40_000, 9))
        with open(tmp_path / "out.txt", "wb") as sink:
            subprocess.run([sys.executable, "-m", "healer", "scan", *flags, "--workers", "2",
                            str(big)], cwd=tmp_path, env=scan_env(tmp_path), stdout=sink,
                           stderr=subprocess.DEVNULL, timeout=120, check=False)
        assert (tmp_path / "out.txt").read_text() == one.out

    def test_no_bar_for_small_files(self, tmp_path: Path) -> None:
        """Small files get no progress bar, even on a terminal."""
        out = self.run_on_terminal(tmp_path, "--no-summary", str(CORPUS / "agent.log"))
        assert b"R2" in out and "━".encode() not in out


class TestErrors:
    @pytest.mark.parametrize(("args", "needle"), [
        ((), "nothing to scan"),
        (("missing.log",), "missing.log: no such file"),
        ((".",), "is a directory"),
        (("--since", "yesterday", "-"), "--since"),
        (("--start", "soon", "-"), "--start"),
        (("--cmd",), "--cmd needs a command"),
        (("--cmd", "--", "no-such-binary-for-healer"), "command not found"),
        (("--engine", "grep", "-"), "invalid choice"),
        (("--catalog", "nope.yaml", "-"), "catalog file not found"),
    ])
    def test_usage_errors_exit_2(self, tmp_path: Path, args: tuple[str, ...],
                                 needle: str) -> None:
        """User mistakes exit 2 with a clear line and no traceback."""
        r = run_scan(tmp_path, *args, input=b"")
        assert r.code == 2, (r.out, r.err)
        assert needle in r.err and "Traceback" not in r.err

    def test_bad_catalog_regex(self, tmp_path: Path) -> None:
        """A regex that does not compile names file, pattern and problem; exit 2."""
        cat = tmp_path / "bad.yaml"
        cat.write_text(yaml.safe_dump({"patterns": [
            {"id": "broken", "regex": "a(b", "code": "X", "priority": 2, "severity": "low"}]}))
        r = run_scan(tmp_path, "--catalog", str(cat), str(log(tmp_path, "x\n")))
        assert r.code == 2
        assert f"{cat}: pattern 'broken' (patterns[0]): regex 'a(b' does not compile" in r.err

    def test_failing_command_exit_3(self, tmp_path: Path) -> None:
        """A command that fails exits 3 and says why."""
        r = run_scan(tmp_path, "--cmd", "--", sys.executable, "-c", "raise SystemExit(5)")
        assert r.code == 3 and "exited with status 5" in r.err

    def test_ctrl_c_in_a_file_is_an_interrupted_scan(self, tmp_path: Path) -> None:
        """Ctrl-C while a file is being scanned exits 130 and says the output is incomplete,
        with no summary (a summary of half a file's alerts once said "no alerts", exit 0)."""
        fifo = tmp_path / "agent.log"
        os.mkfifo(fifo)
        proc = subprocess.Popen([sys.executable, "-m", "healer", "scan", "--json", str(fifo)],
                                cwd=tmp_path, env=scan_env(tmp_path), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            with fifo.open("wb") as writer:  # opens once the scan has opened it: inside it
                writer.write(b"connection refused\n" * 10)
                writer.flush()
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        text = err.decode()
        assert proc.returncode == 130, text
        assert f"interrupted while scanning {fifo}: the output is incomplete" in text
        assert "alerts in" not in text and "alert(s)" not in text and "Traceback" not in text

    def test_ctrl_c_ends_a_follow_with_its_summary(self, tmp_path: Path) -> None:
        """Ctrl-C is how a follow ends: the summary of what it saw, exit 1 with alerts."""
        path = tmp_path / "agent.log"
        path.write_text("connection refused\n" * 3)
        proc = subprocess.Popen([sys.executable, "-m", "healer", "scan", "--follow", "--json",
                                 str(path)], cwd=tmp_path, env=scan_env(tmp_path),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        seen: list[bytes] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                seen.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            _wait(lambda: len(seen) >= 3)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert proc.returncode == 1 and "3 alert(s) in 1 source(s)" in err.decode()


class TestFollow:
    def test_rotation_and_truncation_lose_nothing(self, tmp_path: Path) -> None:
        """Following a log through rename-rotation and truncation sees every line once."""
        path = tmp_path / "agent.log"
        path.write_text("")
        proc = subprocess.Popen(
            [sys.executable, "-m", "healer", "scan", "--follow", "--json", "--no-summary",
             str(path)], cwd=tmp_path, env=scan_env(tmp_path), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        seen: list[int] = []
        reader = threading.Thread(target=_collect, args=(proc, seen), daemon=True)
        reader.start()
        n = 0

        def write(count: int, target: Path = path, mode: str = "a") -> None:
            nonlocal n
            with target.open(mode) as fh:
                for _ in range(count):
                    n += 1
                    fh.write(f"2024-05-01T10:00:00Z connection refused #{n}\n")
                    fh.flush()

        try:
            write(50)
            _wait(lambda: len(seen) >= 50)
            write(20)  # written just before the rename: must be drained from the old file
            path.rename(tmp_path / "agent.log.1")
            write(30, path, "w")
            _wait(lambda: len(seen) >= 100)
            path.write_text("")  # truncate (copytruncate style), then keep writing
            time.sleep(0.5)
            write(40)
            _wait(lambda: len(seen) >= 140)
            write(10, tmp_path / "agent.log.1")  # the old file no longer counts
            write(15)
            _wait(lambda: len(seen) >= 155)
        finally:
            proc.terminate()
            proc.wait(timeout=15)
            reader.join(5)
        assert sorted(seen) == list(range(1, 71)) + list(range(71, 141)) + list(range(151, 166))
        assert len(seen) == len(set(seen)), "a line was reported twice"
        assert proc.returncode == 1


def _collect(proc: subprocess.Popen[bytes], seen: list[int]) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        seen.append(int(json.loads(raw)["line"].rsplit("#", 1)[1]))


def _wait(cond, timeout: float = 20) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)
