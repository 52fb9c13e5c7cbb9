"""report_error throughput: sanitise + fingerprint + gates, without the healing run itself.

Feeds realistic reports (a ~1.5 KB traceback with ids, an e-mail, an address, a token, a UUID
that differ per report) through ``SelfHealService.report`` over a real FileStore, as the MCP
and HTTP surfaces do. Most reports are duplicates of a few bugs (the common case: one bug,
many agents), some are new bugs that hit the concurrency cap. Prints reports/s for each stage
alone and for the whole gate path, against the target of 5,000 reports/s on the default path
(the Hyperscan census when installed), and the same with the literal pre-filter (no
Hyperscan) and with none (every detector on every text) for comparison. Exit 1 when the
target is missed.

The target is wall-clock, which a busy machine moves by more than the 5 % a change may be
worth. Beside it the whole path's CPU time per report is printed (not judged): the
process's (every thread: the store's flusher and the ledger's timers work for the reports
too) and the calling thread's alone. Another process competing for the CPUs barely moves
these, so two trees are best compared by them, run after run.

    .venv/bin/python benchmarks/report_gate.py [--reports 10000] [--repeat 3] [--smoke]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import add_smoke_flag, bench_for

from healer.config import Settings
from healer.core.identity import identify
from healer.core.publish.sanitizer import Sanitizer
from healer.core.store import FileStore
from healer.selfheal.runner import HealingTask, RunResult
from healer.selfheal.service import SelfHealService

TARGET = 5000.0
ROOT = "/srv/app"

FRAMES = "".join(
    f'  File "{ROOT}/src/butlers/modules/m{i}/tools.py", line {40 + i}, in step_{i}\n'
    f"    result = await self.handler_{i}(payload, retries=3)\n" for i in range(8))
LIB = ('  File "/usr/lib/python3.11/site-packages/asyncpg/connection.py", line 317, in execute\n'
       "    return await self._protocol.query(query, timeout)\n")


class _Ready:
    """A runner that is always available and never runs (dispatch is not measured)."""

    def available(self) -> bool:
        return True

    async def run(self, task: HealingTask) -> RunResult:  # pragma: no cover - not called
        return RunResult(True)


def make_report(i: int, rng: random.Random, bugs: int) -> dict[str, str]:
    bug = rng.randrange(bugs) if rng.random() < 0.95 else bugs + i  # 5 % new bugs
    uid = f"{rng.getrandbits(32):08x}-1234-4abc-8def-{rng.getrandbits(48):012x}"
    tb = ("Traceback (most recent call last):\n" + FRAMES
          + f'  File "{ROOT}/src/butlers/modules/memory/facts_{bug}.py", line {100 + i % 50}, '
          f"in memory_store_fact_{bug}\n    await conn.execute(query, user_id)\n" + LIB
          + f'asyncpg.exceptions.UndefinedTableError: relation "butler.t_{bug}" does not exist '
          f"(user {uid}, host 10.0.{i % 250}.{rng.randrange(1, 250)}, request {i})\n")
    return {
        "error_type": "asyncpg.exceptions.UndefinedTableError",
        "error_message": f'relation "butler.t_{bug}" does not exist for user{i}@example-corp.com '
                         f"session {uid} at 2024-05-0{1 + i % 9}T10:{i % 60:02d}:00Z",
        "traceback": tb,
        "context": "I was storing a new fact; the table seems missing (migration not applied). "
                   f"Token used: Bearer abc{i}DEF456ghi789JKL",
        "tool_name": "memory_store_fact",
        "severity_hint": "high",
    }


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:>10,.0f} reports/s"


def measure(reports: list[dict[str, str]], prefilter: bool | str, tmp: Path) -> dict[str, float]:
    """Seconds per stage over all reports, after a warm-up pass."""
    settings = Settings(state_dir=str(tmp / "state"))
    settings.selfheal.repo = ROOT
    service = SelfHealService(settings, FileStore(tmp / "state"), runner=_Ready(),
                              launcher=lambda _a: None, cwd=tmp, env={})
    san = Sanitizer(root=ROOT, prefilter=prefilter)
    service.sanitizer = san
    for r in reports[:200]:  # warm-up: regex caches, Hyperscan scratch, the page cache
        san.scrub(r["traceback"])
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    scrubbed = [(san.scrub(r["error_message"]), san.scrub(r["traceback"]),
                 san.scrub(r["context"])) for r in reports]
    out["scrub"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for r, (msg, tb, _ctx) in zip(reports, scrubbed, strict=True):
        identify(r["error_type"], msg, traceback=tb, root=ROOT)
    out["fingerprint"] = time.perf_counter() - t0
    reasons: dict[str, int] = {}
    cpu, own, t0 = time.process_time(), time.thread_time(), time.perf_counter()
    for r in reports:
        res = service.report(r)
        key = "accepted" if res["accepted"] else res["reason"]
        reasons[key] = reasons.get(key, 0) + 1
    out["all"] = time.perf_counter() - t0
    out["cpu"] = time.process_time() - cpu
    out["cpu_own"] = time.thread_time() - own
    out["reasons"] = reasons  # type: ignore[assignment]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=10000)
    ap.add_argument("--bugs", type=int, default=20, help="distinct recurring bugs")
    ap.add_argument("--repeat", type=int, default=3, help="runs per variant; the best counts")
    add_smoke_flag(ap, "60 reports, one run per variant")
    args = ap.parse_args()
    bench = bench_for(__file__, args)
    if args.smoke:
        args.reports, args.repeat = 60, 1

    rng = random.Random(7)
    reports = [make_report(i, rng, args.bugs) for i in range(args.reports)]
    n = len(reports)
    print(f"report_error gate path, {n:,} reports of ~{len(reports[0]['traceback']):,} "
          f"characters of traceback, {args.bugs} recurring bugs + 5 % new ones "
          f"(best of {args.repeat} runs)")
    engine = Sanitizer()._census.engine
    if engine != "hyperscan":
        print("  (hyperscan is not installed: the default path uses the literal pre-filter)")
    results: dict[bool | str, dict[str, Any]] = {}
    variants: tuple[tuple[bool | str, str], ...] = (
        (True, f"default ({engine} pre-filter)"),
        ("literal", "literal pre-filter (what runs without Hyperscan)"),
        (False, "pure re (no pre-filter: every detector runs)"))
    for prefilter, label in variants:
        # Best of N runs, each on a fresh state dir: the machine may be shared, and the best
        # run is the one least disturbed by others.
        runs = [measure(reports, prefilter, Path(tempfile.mkdtemp(prefix="healer-bench-gate-")))
                for _ in range(args.repeat)]
        r = results[prefilter] = {k: min(x[k] for x in runs)
                                  for k in ("scrub", "fingerprint", "all", "cpu", "cpu_own")}
        r["reasons"] = runs[0]["reasons"]
        print(f"- {label}")
        print(f"  sanitise (message, traceback, context) {rate(n, r['scrub'])}")
        print(f"  fingerprint (call site + normalise)    {rate(n, r['fingerprint'])}")
        print(f"  whole path: sanitise+fingerprint+gates {rate(n, r['all'])}   "
              f"({r['all'] / n * 1e6:,.0f} µs/report)")
        print(f"  whole path, CPU time (steadier)        {r['cpu'] / n * 1e6:>10,.1f} µs/report "
              f"(this thread {r['cpu_own'] / n * 1e6:,.1f})")
        print("  outcomes: " + ", ".join(f"{k} {v:,}" for k, v in sorted(r["reasons"].items())))
    best = n / results[True]["all"]
    print(f"the default pre-filter is {results[False]['all'] / results[True]['all']:.1f}x "
          "faster than pure re")
    bench.judge("whole path on the default pre-filter", best, "reports/s", at_least=TARGET)
    return bench.finish()


if __name__ == "__main__":
    raise SystemExit(main())
