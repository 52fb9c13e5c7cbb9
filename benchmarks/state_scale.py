"""State at scale: what a read costs with 100, 10,000 and 50,000 finished records.

For each size N, a fresh state dir gets N *finished* records of every kind that accumulates,
written through the store API (``FileStore``; two writer processes):

- incidents, through the core ``Ledger`` (opened, then resolved; the three kinds in turn);
- healing attempts, through ``Attempts`` (create → investigating → pr_open → pr_merged, or →
  failed with its escalation written), each with a worktree already reaped;
- play sessions, through ``SessionRegistry`` (start → finish), each with its finished
  remediation record (``remediations/<key>``, as the remediator leaves it);

plus a few live things (5 active sessions, 5 open incidents) so the active lists are not
empty. Then it measures (median of a few runs; processes on 127.0.0.1 only):

- ``healer status`` — the CLI in a subprocess (interpreter start-up included), and the same
  reads in-process (``SelfHealService.status`` + ``overview()``);
- ``GET /api/v1/incidents?limit=20`` and ``GET /api/v1/sessions/active`` against a running
  ``healer serve --port 0``;
- loop start-up: ``healer loop --once`` from launch to its "healer loop running" line, and to
  its exit (one pass of every periodic job included);
- ``GET /api/v1/sessions/active`` with N *active* sessions (N up to 10,000): that list is
  O(active) by nature, so its row is the absolute time, not a pass/fail.

Prints one row per operation and size: ms, and the ratio of the slowest size to the first
(100-record) time, judged against the target of at most 2× (exit 1 when one is over).
``--smoke``: one size of 20 records, one run of each, no active-sessions row. The state dirs
go under /dev/shm when it exists (writing 50,000 records of each kind with an fsync per record
on a disk would take most of the time budget; reads hit the page cache either way).

    .venv/bin/python benchmarks/state_scale.py [--sizes 100,10000,50000] [--quick] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from _bench import add_smoke_flag, bench_for

from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env

WORKERS = 2
RUNS = 5
LOOP_RUNS = 3
ACTIVE_MAX = 10_000
LIVE_SESSIONS = 5
LIVE_INCIDENTS = 5
DAY = 86400.0
CTO = {"agents": {"rex": {"tools": {"remote": ["brave_search", "github_create_pull_request"]}},
                  "blaze": {"tools": {"remote": ["github_get_file"]}}}}
FINGERPRINTS = 1000  # distinct bugs; the attempts spread over them


class _Clock:
    """Time as the writers see it: the records spread over the last 60 days."""

    def __init__(self, start: float):
        self.t = start

    def __call__(self) -> float:
        return self.t


def _write_chunk(args: tuple[str, int, int, int]) -> int:
    """Write finished records ``lo``..``hi`` of every kind (one writer process)."""
    from healer.core import incidents as inc
    from healer.core.store import FileStore
    from healer.play.sessions import SessionRegistry
    from healer.selfheal import attempts as st

    root, lo, hi, n = args
    store = FileStore(root)
    now = time.time()
    clock = _Clock(now)
    ledger = inc.Ledger(store, clock=clock)
    attempts = st.Attempts(store, clock)
    registry = SessionRegistry(store, clock=clock)
    kinds = inc.KINDS
    for i in range(lo, hi):
        clock.t = now - 60 * DAY + 60 * DAY * i / max(1, n)
        # an incident, opened and resolved
        sig = inc.Signal(kind=kinds[i % 3], key=f"bench-{i}", source="bench",
                         summary=f"benchmark incident {i}", detail={"i": i})
        ledger.receive(sig)
        ledger.resolve(sig.id, "cleared at its source")
        # a healing attempt, ended, its worktree reaped
        aid = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(clock.t))}-{i:08x}"
        fp = f"{i % FINGERPRINTS:064x}"
        attempts.create(aid, {"fingerprint": fp, "error_type": "ValueError",
                              "error_message": f"bad value {i}", "call_site": "app/x.py:12",
                              "severity": "high", "tool_name": "bench"})
        attempts.transition(aid, st.INVESTIGATING, worktree=f"/tmp/wt-{i}", branch=f"heal/{i}")
        if i % 2 == 0:
            attempts.transition(aid, st.PR_OPEN, pr_url=f"https://forge.invalid/pr/{i}",
                                pr_number=i)
            attempts.transition(aid, st.PR_MERGED, worktree_removed_at=clock.t + 3600)
        else:
            attempts.transition(aid, st.FAILED, reason="tests failed",
                                worktree_removed_at=clock.t + 3600)
            attempts.escalation_done(aid, seed_file=f"human/heal-{i}.md", issue_url="")
        # a play session, started and finished, and its remediation
        pid = f"play-{i}"
        registry.start({"play_id": pid, "repository": "5dlabs/cto", "cto_config": CTO,
                        "tasks": [{"id": 1}]})
        registry.finish(pid, "completed" if i % 4 else "failed")
        store.put("remediations", f"{pid}-rex-tool_mismatch", {
            "play_id": pid, "issue_id": "issue-1", "issue_type": "tool_mismatch",
            "agent": "rex", "status": "resolved" if i % 3 else "escalated", "attempts": [],
            "run_id": f"run-{i}"})
    ledger.flush()
    return hi - lo


def _write_live(root: str, active_sessions: int, open_incidents: int) -> None:
    from healer.core import incidents as inc
    from healer.core.store import FileStore
    from healer.play.sessions import SessionRegistry

    store = FileStore(root)
    registry = SessionRegistry(store)
    for j in range(active_sessions):
        registry.start({"play_id": f"live-{j}", "repository": "5dlabs/cto", "cto_config": CTO,
                        "tasks": [{"id": 1}, {"id": 2}]})
    ledger = inc.Ledger(store)
    for j in range(open_incidents):
        ledger.receive(inc.Signal(kind=inc.KINDS[j % 3], key=f"live-{j}", source="bench",
                                  summary=f"still firing {j}"))
    ledger.flush()


def _active_chunk(args: tuple[str, int, int]) -> int:
    from healer.core.store import FileStore
    from healer.play.sessions import SessionRegistry

    root, lo, hi = args
    registry = SessionRegistry(FileStore(root))
    for j in range(lo, hi):
        registry.start({"play_id": f"act-{j}", "repository": "5dlabs/cto", "cto_config": CTO,
                        "tasks": [{"id": 1}]})
    return hi - lo


def _parallel(fn: Callable[[Any], int], jobs: list[Any]) -> None:
    with ProcessPoolExecutor(WORKERS) as pool:
        for _ in pool.map(fn, jobs):
            pass


def _chunks(n: int, parts: int) -> list[tuple[int, int]]:
    step = max(1, -(-n // parts))
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


def populate(state: Path, n: int) -> float:
    t = time.perf_counter()
    _parallel(_write_chunk, [(str(state), lo, hi, n) for lo, hi in _chunks(n, WORKERS * 4)])
    _write_live(str(state), LIVE_SESSIONS, LIVE_INCIDENTS)
    return time.perf_counter() - t


def populate_active(state: Path, n: int) -> float:
    t = time.perf_counter()
    _parallel(_active_chunk, [(str(state), lo, hi) for lo, hi in _chunks(n, WORKERS * 4)])
    return time.perf_counter() - t


# --- measurements --------------------------------------------------------------------------------


def _median_ms(fn: Callable[[], Any], runs: int, warm: int = 1) -> float:
    for _ in range(warm):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def _env(base: Path) -> dict[str, str]:
    dirs = [base / d for d in ("state", "results", "fleet")]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return healer_env(*dirs, HEALER_EXECUTOR="playbook")


def status_cli(env: dict[str, str]) -> float:
    def once() -> None:
        subprocess.run([sys.executable, "-m", "healer", "status"], env=env, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)

    return _median_ms(once, RUNS)


def status_inproc(state: Path) -> float:
    from healer.config import load_settings
    from healer.overview import overview
    from healer.selfheal.service import SelfHealService

    env = {k: v for k, v in _env(state.parent).items() if k.startswith("HEALER")}
    settings = load_settings(env=env)

    def once() -> None:
        from healer.core.store import FileStore

        svc = SelfHealService(settings, FileStore(state))
        svc.status(None, 20)
        overview(settings, svc.store)

    return _median_ms(once, RUNS)


def loop_once(env: dict[str, str]) -> tuple[float, float]:
    """(ms to the "healer loop running" line, ms to exit) of ``healer loop --once``."""
    running, done = [], []
    for _ in range(LOOP_RUNS):
        t = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "healer", "loop", "--once"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        up = None
        for line in proc.stderr:
            if up is None and "healer loop running" in line:
                up = (time.perf_counter() - t) * 1000
        proc.wait(300)
        done.append((time.perf_counter() - t) * 1000)
        running.append(up if up is not None else float("nan"))
    return statistics.median(running), statistics.median(done)


def serve_reads(env: dict[str, str], paths: list[str]) -> dict[str, float]:
    serve = ServeProcess(env)
    try:
        out = {}
        for path in paths:
            def get(p: str = path) -> None:
                r = serve.http.get(p)
                r.raise_for_status()

            out[path] = _median_ms(get, RUNS * 2)
        return out
    finally:
        serve.close()


# --- the table -----------------------------------------------------------------------------------

INCIDENTS = "/api/v1/incidents?limit=20"
ACTIVE = "/api/v1/sessions/active"


def measure(base: Path, n: int) -> dict[str, float]:
    env = _env(base)
    state = base / "state"
    wrote = populate(state, n)
    print(f"  wrote {n:,} finished records of each kind in {wrote:.1f} s", flush=True)
    row: dict[str, float] = {}
    row["healer status (CLI subprocess)"] = status_cli(env)
    row["status in-process (attempts + overview)"] = status_inproc(state)
    up, done = loop_once(env)
    row["loop --once: launch → running line"] = up
    row["loop --once: launch → exit"] = done
    reads = serve_reads(env, [INCIDENTS, ACTIVE])
    row[f"GET {INCIDENTS}"] = reads[INCIDENTS]
    row[f"GET {ACTIVE} ({LIVE_SESSIONS} active)"] = reads[ACTIVE]
    return row


def measure_active(base: Path, n: int) -> float:
    env = _env(base)
    wrote = populate_active(base / "state", n)
    print(f"  wrote {n:,} active sessions in {wrote:.1f} s", flush=True)
    return serve_reads(env, [ACTIVE])[ACTIVE]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,10000,50000",
                    help="finished records of each kind, comma-separated (100,10000,50000)")
    ap.add_argument("--quick", action="store_true", help="small sizes (100,1000,3000)")
    ap.add_argument("--dir", help="where the state dirs go (default /dev/shm, else the temp dir)")
    add_smoke_flag(ap, "one size of 20 records, one run of each")
    args = ap.parse_args()
    bench = bench_for(__file__, args)
    global RUNS, LOOP_RUNS, ACTIVE_MAX
    if args.smoke:  # the measuring functions read these module settings
        args.sizes, RUNS, LOOP_RUNS, ACTIVE_MAX = "20", 1, 1, 0
    sizes = [100, 1000, 3000] if args.quick else [int(s) for s in args.sizes.split(",")]
    if sizes[0] != min(sizes):
        ap.error("the first size is the baseline: give the smallest first")
    root = args.dir or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
    started = time.perf_counter()
    table: dict[str, dict[int, float]] = {}
    active: dict[int, float] = {}
    for n in sizes:
        print(f"== {n:,} finished records", flush=True)
        base = Path(tempfile.mkdtemp(prefix=f"healer-scale-{n}-", dir=root))
        try:
            for op, ms in measure(base, n).items():
                table.setdefault(op, {})[n] = ms
                print(f"  {op:<46} {ms:8.1f} ms", flush=True)  # kept if a later size is cut
        finally:
            shutil.rmtree(base, ignore_errors=True)
        if n <= ACTIVE_MAX:
            base = Path(tempfile.mkdtemp(prefix=f"healer-active-{n}-", dir=root))
            try:
                active[n] = measure_active(base, n)
            finally:
                shutil.rmtree(base, ignore_errors=True)

    print()
    print(f"{'operation':<48}" + "".join(f"{n:>10,}" for n in sizes) + "   ratio")
    ratios: dict[str, float] = {}
    for op, by_n in table.items():
        base_ms = by_n[sizes[0]]
        ratios[op] = max(by_n[n] for n in sizes) / base_ms if base_ms else float("inf")
        print(f"{op:<48}" + "".join(f"{by_n[n]:>8.1f}ms" for n in sizes)
              + f"  {ratios[op]:5.2f}x")
    if active:
        cols = "".join(f"{active[n]:>8.1f}ms" if n in active else f"{'-':>10}" for n in sizes)
        print(f"{'GET ' + ACTIVE + ' (N active: O(active))':<48}{cols}   (info)")
    print(f"\nran {time.perf_counter() - started:.0f} s")
    for op, ratio in ratios.items():
        bench.judge(f"{op}: {sizes[-1]:,} vs {sizes[0]:,} records", ratio, "×", at_most=2.0)
    return bench.finish()


if __name__ == "__main__":
    raise SystemExit(main())
