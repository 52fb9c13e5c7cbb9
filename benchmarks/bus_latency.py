"""Results-bus latency: from a result file's rename into the results dir to its handling.

A writer process drops valid result files (temp file + rename, as agents do) at a fixed rate;
the bus (watchdog observer + ledger + subscribers, as in the loop) handles them in this
process. Prints p50/p99/max latency at 100, 500 and 2,000 files/s, and the burst throughput
(from the first file written to the last handled: the writer process's start-up is not the
bus's). Targets: p99 ≤ 50 ms at 500 and at 2,000 files/s, a burst at ≥ 1,000 files/s, every
file handled; exit 1 when missed.

    .venv/bin/python benchmarks/bus_latency.py [--seconds 4] [--burst 3000] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from _bench import add_smoke_flag, bench_for

from healer.core.bus import AgentResult, ResultsBus
from healer.core.store import FileStore


def _writer(results: str, rate: float, count: int, offset: int) -> None:
    interval = 1.0 / rate if rate else 0.0
    start = time.perf_counter()
    for i in range(count):
        if interval:
            due = start + i * interval
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        name = f"heal-bench-t{offset + i}-{1700000000 + offset + i}.json"
        tmp = os.path.join(results, f".{name}.tmp")
        with open(tmp, "w") as fh:
            json.dump({"kind": "bench", "target": f"t{offset + i}", "status": "ok",
                       "data": {"t": time.time()}}, fh)
        os.rename(tmp, os.path.join(results, name))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(rate: float, count: int, offset: int) -> tuple[list[float], float]:
    root = Path(tempfile.mkdtemp(prefix="healer-bench-"))
    results = root / "results"
    latencies: list[float] = []
    first_written, last_handled = [float("inf")], [0.0]
    done = threading.Event()

    def on(result: AgentResult) -> None:
        now, written = time.time(), result.data["data"]["t"]
        latencies.append((now - written) * 1000)
        first_written[0], last_handled[0] = min(first_written[0], written), now
        if len(latencies) == count:
            done.set()

    bus = ResultsBus(results, FileStore(root / "state"), rescan_s=5.0)
    bus.subscribe(on)
    bus.start()
    writer = mp.get_context("spawn").Process(target=_writer,
                                             args=(str(results), rate, count, offset))
    writer.start()
    done.wait(120)
    writer.join()
    bus.stop()
    return latencies, len(latencies) / max(1e-9, last_handled[0] - first_written[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="length of each rate run")
    ap.add_argument("--burst", type=int, default=3000, help="files in the burst run")
    add_smoke_flag(ap, "0.25 s per rate, a burst of 200")
    args = ap.parse_args()
    bench = bench_for(__file__, args)
    seconds, burst = (0.25, 200) if args.smoke else (args.seconds, args.burst)
    print(f"{'rate (files/s)':>15} {'files':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    p99s: dict[int, float] = {}
    for rate in (100, 500, 2000):
        count = int(rate * seconds)
        lat, _ = run(rate, count, offset=rate * 100000)
        bench.check(f"all {count} files handled at {rate} files/s", len(lat) == count)
        p50, p99s[rate] = statistics.median(lat), _percentile(lat, 0.99)
        print(f"{rate:>15} {len(lat):>6} {p50:>8.2f} {p99s[rate]:>8.2f} {max(lat):>8.2f}")
    lat, throughput = run(0, burst, offset=9_000_000)
    bench.check(f"all {burst} burst files handled", len(lat) == burst)
    print(f"{'burst':>15} {len(lat):>6} {statistics.median(lat):>8.2f} "
          f"{_percentile(lat, 0.99):>8.2f} {max(lat):>8.2f}")
    print(f"throughput (burst of {burst}, as fast as the writer can): {throughput:,.0f} files/s")
    for rate in (500, 2000):
        bench.judge(f"p99 at {rate:,} files/s", p99s[rate], "ms", at_most=50)
    bench.judge("burst throughput", throughput, "files/s", at_least=1000)
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
