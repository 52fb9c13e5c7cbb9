"""What every benchmark shares: its targets judged, its result lines, its summary for the runner.

A benchmark makes one ``Bench``, states each figure that has a target with ``judge`` (which
prints the figure beside its target: ``p99 137 ms (target ≤ 50 ms) MISSES``), its pass/fail
checks with ``check``, and ends with ``sys.exit(bench.finish())``: exit 1 when a target was
missed or a check failed, else 0. ``finish`` also prints one line ``BENCH-SUMMARY {json}``
that ``benchmarks/run_all.py`` (``make bench``) reads to build its table.

``--smoke`` (``add_smoke_flag``) runs a benchmark at small sizes so that CI keeps every one of
them working (``tests/test_benchmarks_smoke.py``): figures are printed but no target is
judged, so a smoke run exits 0 unless it crashed or a check failed (a check is correctness,
e.g. the sandbox let a probe through, not speed).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

SUMMARY_PREFIX = "BENCH-SUMMARY "


@dataclass(frozen=True)
class Figure:
    """One measured figure and its target; ``met`` is None when not judged (smoke mode)."""

    name: str
    value: float
    unit: str
    target: float
    at_least: bool
    met: bool | None

    @property
    def target_text(self) -> str:
        return f"{'≥' if self.at_least else '≤'} {self.target:,g}{_unit(self.unit)}"

    def line(self) -> str:
        verdict = {True: "meets", False: "MISSES", None: "not judged: smoke"}[self.met]
        return (f"{self.name}: {number(self.value)}{_unit(self.unit)} "
                f"(target {self.target_text}) {verdict}")


def _unit(unit: str) -> str:
    return unit if unit in ("×", "%") else f" {unit}" if unit else ""


def number(value: float) -> str:
    """A figure as people read it: 5,000 / 137 / 13.7 / 1.37 / 3 (a count)."""
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value.is_integer():
        return f"{int(value):,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


@dataclass
class Bench:
    """One benchmark run: the figures judged so far and the checks that failed."""

    name: str
    smoke: bool = False
    figures: list[Figure] = field(default_factory=list)
    failed_checks: list[str] = field(default_factory=list)

    def judge(self, name: str, value: float, unit: str, *, at_most: float | None = None,
              at_least: float | None = None) -> bool:
        """Record and print ``value`` against its target (exactly one of at_most/at_least);
        True when met, or when not judged (smoke)."""
        if (at_most is None) == (at_least is None):
            raise ValueError("give exactly one of at_most and at_least")
        target = at_least if at_least is not None else at_most
        assert target is not None
        met = None if self.smoke else (value >= target if at_least is not None
                                       else value <= target)
        if isinstance(value, float) and math.isnan(value) and met is not None:
            met = False  # no figure at all is a miss, never a pass
        fig = Figure(name, float(value), unit, float(target), at_least is not None, met)
        self.figures.append(fig)
        print(f"  {fig.line()}", flush=True)
        return met is not False

    def check(self, name: str, ok: bool) -> bool:
        """A pass/fail condition that counts in smoke mode too (correctness, not speed)."""
        if not ok:  # a passed check says nothing: some run once per request
            self.failed_checks.append(name)
            print(f"  check FAILED: {name}", flush=True)
        return ok

    @property
    def ok(self) -> bool:
        return not self.failed_checks and all(f.met is not False for f in self.figures)

    def finish(self) -> int:
        """Print the verdict and the summary line; the exit code (0 met, 1 missed)."""
        missed = [f for f in self.figures if f.met is False]
        if self.smoke:
            print(f"{self.name}: smoke run, {len(self.figures)} figure(s) not judged"
                  + (f"; {len(self.failed_checks)} check(s) FAILED" if self.failed_checks
                     else ""))
        else:
            print(f"{self.name}: {len(self.figures) - len(missed)} of {len(self.figures)} "
                  "target(s) met" + (f"; {len(self.failed_checks)} check(s) FAILED"
                                     if self.failed_checks else ""))
        summary = {"benchmark": self.name, "smoke": self.smoke, "ok": self.ok,
                   "figures": [asdict(f) | {"target_text": f.target_text} for f in self.figures],
                   "failed_checks": self.failed_checks}
        print(SUMMARY_PREFIX + json.dumps(summary, ensure_ascii=False), flush=True)
        return 0 if self.ok else 1


def add_smoke_flag(ap: argparse.ArgumentParser, sizes: str) -> None:
    """``--smoke``: ``sizes`` says what the benchmark shrinks to."""
    ap.add_argument("--smoke", action="store_true",
                    help=f"a quick check that it still runs ({sizes}); no target is judged")


def bench_for(script: str, args: argparse.Namespace) -> Bench:
    """The ``Bench`` of the script at ``script`` (``__file__``), smoke as the flag says."""
    return Bench(Path(script).stem, smoke=bool(getattr(args, "smoke", False)))


def read_summary(output: str) -> dict[str, object] | None:
    """The last summary line a benchmark printed, parsed; None when it printed none."""
    for line in reversed(output.splitlines()):
        if line.startswith(SUMMARY_PREFIX):
            try:
                found = json.loads(line[len(SUMMARY_PREFIX):])
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None


def fail(message: str, code: int = 2) -> None:
    """Stop with a clear message (no traceback): a missing tool, a bad option."""
    print(message, file=sys.stderr)
    raise SystemExit(code)
