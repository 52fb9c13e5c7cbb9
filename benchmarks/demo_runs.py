"""How reliably `make run` (`python -m healer.loop --demo`) passes, idle and under CPU load.

Runs the demo N times on an idle machine and N times beside four CPU-bound busy loops, one
run after another, and prints one row per run (pass/fail, exit code, duration, the faults that
did not end as expected) and the totals, e.g. ``idle 10/10, loaded 9/10``.

Bounded: every run has a hard timeout (SIGTERM, then SIGKILL of its process group and of
every process carrying its fleet's marker); the busy loops are killed when the loaded runs
end, and each one also stops on its own after a time limit, so nothing outlives the benchmark
for long even if it is killed itself. Every run gets its own temp folder (the demo's fleet,
state, results and seed-file folders live under it); ``--keep-failed`` keeps a failed run's
folder with the demo's debug log and the fleet's node/NATS logs.

    .venv/bin/python benchmarks/demo_runs.py [--runs 10] [--mode idle|loaded|both]
        [--faults route,unhealable] [--timeout 420] [--busy 4] [--keep-failed] [--json]
        [--smoke]

Target: every run passes, idle and loaded. Exit code: 0 when every run passed, 1 otherwise.
``--smoke`` runs the demo once, idle, with one fault (``daemon``): it checks that the demo
runs to its summary, not that it passes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _bench import add_smoke_flag, bench_for

MARKER = "HEALER_TEST_FLEET"  # healer.demo.fleet marks every process of a fleet with it
BUSY_CODE = ("import sys, time\n"
             "end = time.monotonic() + float(sys.argv[1])\n"
             "while time.monotonic() < end:\n"
             "    sum(range(1000))\n")


@dataclass
class Run:
    mode: str
    number: int
    passed: bool
    exit_code: int | None
    duration_s: float
    failed: list[str] = field(default_factory=list)  # "fault → outcome" of what went wrong
    kept: str = ""
    note: str = ""
    summarised: bool = False  # the demo wrote its summary: it ran to its end


def _marked(root: Path) -> list[int]:
    """Live processes of a run: its fleet's marker points under ``root`` (daemons, NATS
    servers, sshd), or their command line names a path under it (tunnels healer started)."""
    found = []
    prefix = f"{MARKER}={root}".encode()
    where = str(root).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            env = Path("/proc", entry, "environ").read_bytes().split(b"\0")
            cmd = Path("/proc", entry, "cmdline").read_bytes()
            if any(e.startswith(prefix) for e in env) or where in cmd:
                found.append(int(entry))
    return found


def _kill_all(proc: subprocess.Popen[bytes], root: Path) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)
    for pid in _marked(root):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _child_env(run_dir: Path, faults: str, keep: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEALER")}
    env.update(TMPDIR=str(run_dir), COLUMNS="160", PYTHONUNBUFFERED="1",
               HEALER_STATE_DIR=str(run_dir / "state"),
               HEALER_RESULTS_DIR=str(run_dir / "results"),
               HEALER_FLEET_DIR=str(run_dir / "fleet-messages"),
               HEALER_DEMO_SUMMARY=str(run_dir / "summary.json"),
               HEALER_DEMO_LOG=str(run_dir / "demo.log"))
    if faults:
        env["HEALER_DEMO_FAULTS"] = faults
    if keep:
        env["HEALER_DEMO_KEEP"] = "1"
    return env


def run_once(mode: str, number: int, base: Path, *, faults: str, timeout: float,
             keep_failed: bool) -> Run:
    run_dir = base / f"{mode}-{number:02d}"
    run_dir.mkdir(parents=True)
    with open(run_dir / "stdout.txt", "wb") as out, open(run_dir / "stderr.txt", "wb") as err:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "healer", "loop", "--demo"],
                                cwd=run_dir, env=_child_env(run_dir, faults, keep_failed),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        note = ""
        code: int | None = None
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            note = f"hard timeout after {timeout:g} s"
        finally:
            if code is None:  # timed out, or the benchmark itself is stopped
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGTERM)  # the demo stops its fleet on SIGTERM
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(30)
            _kill_all(proc, run_dir)
        took = time.monotonic() - start
    summary: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        summary = json.loads((run_dir / "summary.json").read_text())
    failed = [f"{r.get('key', r.get('fault'))} → {r['outcome']}" for r in summary.get("rows", [])
              if r.get("outcome") != r.get("expected")]
    if summary and len(summary.get("rows", [])) < len(summary.get("faults", [])):
        failed.append(f"{len(summary['faults']) - len(summary['rows'])} fault(s) never run")
    passed = code == 0 and bool(summary.get("passed"))
    if not summary and not note:
        tail = (run_dir / "stderr.txt").read_text(errors="replace").strip().splitlines()[-1:]
        note = "no summary" + (f": {tail[0][:120]}" if tail else "")
    kept = ""
    if passed or not keep_failed:
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        kept = str(run_dir)
    return Run(mode, number, passed, code, round(took, 1), failed, kept, note, bool(summary))


class Busy:
    """``n`` CPU-bound processes that stop on their own after ``limit_s`` at the latest."""

    def __init__(self, n: int, limit_s: float):
        self.procs = [subprocess.Popen([sys.executable, "-c", BUSY_CODE, str(limit_s)],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL) for _ in range(n)]

    def stop(self) -> None:
        for p in self.procs:
            with contextlib.suppress(OSError):
                p.kill()
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)

    def __enter__(self) -> Busy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _row(r: Run) -> str:
    code = "-" if r.exit_code is None else str(r.exit_code)
    what = "; ".join(r.failed) or r.note or ""
    if r.note and r.failed:
        what += f" ({r.note})"
    if r.kept:
        what += f" [kept {r.kept}]"
    return (f"{r.mode:<7} {r.number:>3}  {'pass' if r.passed else 'FAIL':<4}  {code:>4}  "
            f"{r.duration_s:>7.1f}  {what}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10, help="runs per mode (default 10)")
    p.add_argument("--mode", choices=("idle", "loaded", "both"), default="both")
    p.add_argument("--faults", default="", help="HEALER_DEMO_FAULTS for every run (default: "
                   "all seven)")
    p.add_argument("--timeout", type=float, default=420.0,
                   help="hard timeout of one run in seconds (default 420)")
    p.add_argument("--busy", type=int, default=4, help="busy processes when loaded (default 4)")
    p.add_argument("--keep-failed", action="store_true",
                   help="keep a failed run's folder (demo log, fleet logs)")
    p.add_argument("--json", action="store_true", help="print the runs as JSON at the end")
    add_smoke_flag(p, "one idle run with one fault")
    args = p.parse_args(argv)
    bench = bench_for(__file__, args)
    if args.smoke:
        args.runs, args.mode, args.faults, args.busy = 1, "idle", args.faults or "daemon", 0
    if args.runs < 1 or args.timeout <= 0 or args.busy < 0:
        p.error("--runs and --timeout must be positive, --busy not negative")
    modes = ["idle", "loaded"] if args.mode == "both" else [args.mode]
    # Stopped from outside: unwind, so the running demo and the busy loops are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    base = Path(tempfile.mkdtemp(prefix="healer-bench-"))
    runs: list[Run] = []
    print(f"{'mode':<7} {'run':>3}  {'res':<4}  {'exit':>4}  {'secs':>7}  what failed", flush=True)
    try:
        for mode in modes:
            busy = Busy(args.busy if mode == "loaded" else 0,
                        args.runs * (args.timeout + 60) + 60)
            with busy:
                for i in range(1, args.runs + 1):
                    r = run_once(mode, i, base, faults=args.faults, timeout=args.timeout,
                                 keep_failed=args.keep_failed)
                    runs.append(r)
                    print(_row(r), flush=True)
    finally:
        if not any(r.kept for r in runs):
            shutil.rmtree(base, ignore_errors=True)
    totals = []
    for mode in modes:
        mine = [r for r in runs if r.mode == mode]
        ok = sum(r.passed for r in mine)
        secs = sorted(r.duration_s for r in mine)
        med = secs[len(secs) // 2] if secs else 0.0
        totals.append(f"{mode} {ok}/{len(mine)}")
        print(f"{mode}: {ok}/{len(mine)} passed, median {med:.0f} s per run"
              + (f" ({args.busy} busy processes beside it)" if mode == "loaded" else ""))
    print(", ".join(totals) + (f"  (faults: {args.faults})" if args.faults else ""))
    if args.json:
        print(json.dumps([asdict(r) for r in runs], indent=2))
    for mode in modes:
        mine = [r for r in runs if r.mode == mode]
        bench.check(f"every {mode} run reached its summary", all(r.summarised for r in mine))
        bench.judge(f"{mode} runs passed", sum(r.passed for r in mine), "runs",
                    at_least=len(mine))
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
