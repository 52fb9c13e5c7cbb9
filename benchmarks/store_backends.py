"""State backends side by side: the file store vs NATS JetStream (a real nats-server).

Prints, for each backend: record writes/s (one writer), compare-and-set throughput and
conflicts/s (4 threads updating one record), and result-apply latency (file renamed into the
results dir → subscriber called; the JetStream bus goes through the stream and the consumer).
Target: result-apply p99 ≤ 50 ms on each backend (the results bus's own target), every result
applied; exit 1 when missed.

    .venv/bin/python benchmarks/store_backends.py [--writes 2000] [--results 300] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _bench import add_smoke_flag, bench_for

from healer.core.bus import AgentResult, ResultsBus
from healer.core.bus.jetstream import JetStreamResultsBus
from healer.core.store import FileStore, Store
from healer.core.store.jetstream import JetStreamStore
from healer.errors import ConflictError
from healer.testing.nats import NatsServer


def writes(store: Store, n: int) -> float:
    t = time.perf_counter()
    for i in range(n):
        store.put("bench", f"r{i}", {"i": i, "pad": "x" * 200})
    return n / (time.perf_counter() - t)


TARGET_APPLY_P99_MS = 50.0


def cas(store_factory: Any, seconds: float) -> tuple[float, float]:
    ok = conflicts = 0
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def worker() -> None:
        nonlocal ok, conflicts
        st = store_factory()
        while time.monotonic() < stop:
            cur = st.get("cas", "shared")
            try:
                st.put("cas", "shared", {"n": (cur.data["n"] if cur else 0) + 1},
                       expected_revision=cur.revision if cur else 0)
                with lock:
                    ok += 1
            except ConflictError:
                with lock:
                    conflicts += 1
        st.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ok / seconds, conflicts / seconds


def apply_latency(bus: ResultsBus, results: Path, n: int, rate: float) -> list[float]:
    lat: list[float] = []
    done = threading.Event()

    def on(r: AgentResult) -> None:
        lat.append((time.time() - r.data["data"]["t"]) * 1000)
        if len(lat) == n:
            done.set()

    bus.subscribe(on)
    bus.start()
    for i in range(n):
        name = f"heal-bench-t{i}-{1700000000 + i}.json"
        tmp = results / f".{name}.tmp"
        tmp.write_text(json.dumps({"kind": "bench", "target": f"t{i}", "status": "ok",
                                   "data": {"t": time.time()}}))
        os.rename(tmp, results / name)
        time.sleep(1 / rate)
    done.wait(60)
    bus.stop()
    return lat


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))] if s else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--results", type=int, default=300)
    ap.add_argument("--rate", type=float, default=100.0, help="results per second")
    ap.add_argument("--cas-seconds", type=float, default=3.0)
    add_smoke_flag(ap, "50 writes, 0.3 s of CAS, 20 results")
    args = ap.parse_args()
    bench = bench_for(__file__, args)
    if args.smoke:
        args.writes, args.cas_seconds, args.results = 50, 0.3, 20
    root = Path(tempfile.mkdtemp(prefix="healer-store-bench-"))
    rows: dict[str, dict[str, float]] = {}
    with NatsServer(jetstream=True, store_dir=root / "nats") as ns:
        opts = {"servers": [ns.url]}
        backends = {
            "file": (lambda: FileStore(root / "file-state"), ResultsBus),
            "jetstream": (lambda: JetStreamStore(opts, bucket="bench"), JetStreamResultsBus),
        }
        for name, (factory, bus_class) in backends.items():
            store = factory()
            w = writes(store, args.writes)
            ok, conflicts = cas(factory, args.cas_seconds)
            results = root / f"{name}-results"
            bus = bus_class(results, factory(), node="bench")
            lat = apply_latency(bus, results, args.results, args.rate)
            bus.store.close()
            bench.check(f"{name}: all {args.results} results applied", len(lat) == args.results)
            rows[name] = {"writes": w, "cas_ok": ok, "cas_conflicts": conflicts,
                          "p50": statistics.median(lat), "p99": pct(lat, 0.99)}
            store.close()
    print(f"{'backend':<10} {'writes/s':>10} {'CAS ok/s':>10} {'conflicts/s':>12} "
          f"{'apply p50 ms':>13} {'apply p99 ms':>13}")
    for name, r in rows.items():
        print(f"{name:<10} {r['writes']:>10,.0f} {r['cas_ok']:>10,.0f} "
              f"{r['cas_conflicts']:>12,.0f} {r['p50']:>13.2f} {r['p99']:>13.2f}")
    f, j = rows["file"], rows["jetstream"]
    print(f"file/jetstream: writes {f['writes'] / j['writes']:.2f}x, CAS "
          f"{f['cas_ok'] / j['cas_ok']:.2f}x, apply p50 {j['p50'] / f['p50']:.2f}x slower on "
          f"JetStream")
    for name, r in rows.items():
        bench.judge(f"{name}: result-apply p99", r["p99"], "ms", at_most=TARGET_APPLY_P99_MS)
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
