"""`make bench`: every benchmark, one after another, then one table of every figure and target.

Each benchmark runs as its own process with the arguments below (sized so that all of them
fit in 15 minutes on a 2-core machine; the total is judged as a row of its own) and a hard
time limit; its output is shown as it comes. A benchmark that misses a target, fails a check,
crashes or runs out of time does not stop the others. At the end: one table (benchmark,
figure, measured, target, verdict) built from each one's ``BENCH-SUMMARY`` line
(``benchmarks/_bench.py``), and exit 1 when anything missed.

    .venv/bin/python benchmarks/run_all.py [--only bus_latency,api_load] [--smoke]

``--smoke`` runs each with ``--smoke`` instead (small sizes, nothing judged): what
``tests/test_benchmarks_smoke.py`` does one benchmark at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _bench import Bench, number, read_summary

HERE = Path(__file__).resolve().parent
TOTAL_BUDGET_S = 15 * 60.0


@dataclass(frozen=True)
class Plan:
    """How ``make bench`` runs one benchmark: its arguments and its hard time limit."""

    args: tuple[str, ...] = ()
    limit_s: float = 300.0


# In the order they run; the fixed-cost ones first, so a slow machine shows early.
PLANS: dict[str, Plan] = {
    "follow_latency": Plan(limit_s=120),
    "bus_latency": Plan(limit_s=300),  # 2,000 files/s for 4 s: the drain shows a slow bus
    "report_gate": Plan(("--reports", "3000", "--repeat", "1"), limit_s=300),
    "store_backends": Plan(limit_s=240),
    "sentry_ingest": Plan(limit_s=180),
    "context_intake": Plan(limit_s=240),
    "agent_runs": Plan(limit_s=300),
    "agent_sandbox": Plan(limit_s=300),
    "api_load": Plan(limit_s=420),  # seeding 10,000 sessions is most of it
    # 268 MB and 54 MB logs: the sizes ("from 50 MB up", start-up included)
    "scan_vs_ripgrep": Plan(("--lines", "2000000", "--lines", "400000", "--runs", "3"),
                            limit_s=420),
    "state_scale": Plan(("--sizes", "100,10000"), limit_s=420),
    "fleet_heal": Plan(("--runs", "2"), limit_s=420),
    "failover": Plan(limit_s=420),  # 10 kills -9, each ~10 s with the restart
    "demo_runs": Plan(("--runs", "1"), limit_s=900),  # once idle, once beside 4 busy loops
}


@dataclass
class Outcome:
    name: str
    code: int | None  # None: stopped at its time limit
    seconds: float
    summary: dict[str, Any] | None
    output: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.code == 0 and bool(self.summary and self.summary.get("ok"))


def discover() -> list[str]:
    """Every benchmark script here (helpers start with ``_``; this runner is not one)."""
    return sorted(p.stem for p in HERE.glob("*.py")
                  if not p.name.startswith("_") and p.stem != "run_all")


def run_one(name: str, plan: Plan, smoke: bool) -> Outcome:
    argv = [sys.executable, str(HERE / f"{name}.py"), *(("--smoke",) if smoke else plan.args)]
    print(f"\n== {name} {' '.join(argv[2:])}".rstrip(), flush=True)
    started = time.monotonic()
    # Its own process group: at the time limit it and everything it started are stopped.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace",
                            start_new_session=True, cwd=HERE.parent)
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            print(line, end="", flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    code: int | None
    try:
        code = proc.wait(plan.limit_s)
    except subprocess.TimeoutExpired:
        code = None
        print(f"{name}: stopped at its time limit of {plan.limit_s:g} s", flush=True)
        for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
                break
    finally:
        if proc.poll() is None:  # interrupted: leave nothing of ours behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    reader.join(10)
    return Outcome(name, code, time.monotonic() - started, read_summary("\n".join(lines)),
                   lines)


def table(outcomes: list[Outcome], total: Bench) -> list[list[str]]:
    rows = [["benchmark", "figure", "measured", "target", "verdict"]]
    for o in outcomes:
        if o.summary is None:
            why = (f"stopped after {o.seconds:.0f} s (time limit)" if o.code is None
                   else f"exit {o.code}, no summary (crashed or refused: see its output)")
            rows.append([o.name, "-", "-", "-", f"FAILED: {why}"])
            continue
        for f in o.summary.get("figures", []):
            verdict = {True: "met", False: "MISSED", None: "not judged"}[f["met"]]
            unit = f["unit"]
            measured = number(f["value"]) + (unit if unit in ("×", "%") else f" {unit}")
            rows.append([o.name, f["name"], measured, f["target_text"], verdict])
        rows.extend([o.name, f"check: {c}", "-", "-", "FAILED"]
                    for c in o.summary.get("failed_checks", []))
        if o.code is None:
            rows.append([o.name, "-", "-", "-", "FAILED: stopped at its time limit"])
    for f in total.figures:
        verdict = {True: "met", False: "MISSED", None: "not judged"}[f.met]
        rows.append(["(all)", f.name, f"{number(f.value)} {f.unit}", f.target_text, verdict])
    return rows


def print_table(rows: list[list[str]]) -> None:
    widths = [min(60, max(len(r[i]) for r in rows)) for i in range(len(rows[0]))]
    for n, r in enumerate(rows):
        print("  ".join(cell[:60].ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated benchmark names (default: all of them)")
    ap.add_argument("--smoke", action="store_true", help="run each with --smoke")
    args = ap.parse_args(argv)
    names = discover()
    unplanned = sorted(set(names) - set(PLANS))
    if unplanned:  # a new benchmark runs too, with its defaults, until it gets a plan
        print(f"no plan for {', '.join(unplanned)}: run with defaults", flush=True)
    order = [n for n in PLANS if n in names] + unplanned
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in names]
        if unknown:
            ap.error(f"unknown benchmark {unknown[0]!r} (benchmarks: {', '.join(names)})")
        order = [n for n in order if n in wanted]
    # SIGTERM (make interrupted, a CI cancel) unwinds like Ctrl-C: the running one is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    outcomes = [run_one(n, PLANS.get(n, Plan()), args.smoke) for n in order]
    total = Bench("run_all", smoke=args.smoke or bool(args.only))
    print("\n== summary")
    if not total.smoke:  # only the whole run is held to the 15 minutes
        total.judge("wall time of every benchmark", time.monotonic() - started, "s",
                    at_most=TOTAL_BUDGET_S)
    print()
    print_table(table(outcomes, total))
    missed = [o.name for o in outcomes if not o.ok]
    took = time.monotonic() - started
    what = "ran cleanly (smoke: nothing judged)" if args.smoke else "met every target"
    print(f"\n{len(outcomes) - len(missed)} of {len(outcomes)} benchmarks {what} "
          f"in {took:.0f} s" + (f"; FAILED: {', '.join(missed)}" if missed else ""))
    return 0 if not missed and total.ok else 1


if __name__ == "__main__":
    sys.exit(main())
