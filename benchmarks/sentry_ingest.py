"""Sentry ingest throughput: events/s through ``POST /api/<id>/envelope/``, and p99 latency.

Captures one real envelope from the sentry-sdk (an exception with its stack, breadcrumbs,
user and tags, gzipped as the SDK sends it), starts a real `healer serve` on 127.0.0.1, and
replays the envelope with concurrent loopback clients for a bounded time: `wrk` (Debian's,
installed by `scripts/setup.sh --bench`) when it is here, so the load costs the two cores
almost nothing, else a Python httpx client (whose own CPU then counts against healer). Then
it waits until every accepted event is filed (the incident's count) and reports that too.

    target: ≥ 1,000 events/s accepted, p99 ≤ 50 ms, none refused (exit 1 when missed)

    .venv/bin/python benchmarks/sentry_ingest.py [--clients 16] [--seconds 10] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _bench import add_smoke_flag, bench_for

from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env

KEY = "b" * 32
TARGET_EPS = 1000.0
TARGET_P99_MS = 50.0


def capture_envelope() -> bytes:
    """One envelope exactly as the real SDK serialises it."""
    import sentry_sdk
    from sentry_sdk.transport import Transport

    got: list[bytes] = []

    class Capture(Transport):
        def capture_envelope(self, envelope: Any) -> None:
            got.append(envelope.serialize())

    sentry_sdk.init(dsn=f"http://{KEY}@127.0.0.1:9/1", transport=Capture, release="shop@1.2.3",
                    environment="bench", default_integrations=False)
    sentry_sdk.set_user({"id": "bench-user"})
    sentry_sdk.set_tag("flow", "checkout")
    for i in range(5):
        sentry_sdk.add_breadcrumb(category="cart", message=f"added item {i}")

    def average(total: int, count: int) -> float:
        return total / count

    try:
        average(10, 0)
    except ZeroDivisionError as exc:
        sentry_sdk.capture_exception(exc)
    sentry_sdk.flush(5)
    events = [e for e in got if b'"type":"event"' in e]
    if not events:
        raise SystemExit("the SDK produced no event envelope")
    return events[0]


async def drive(url: str, body: bytes, events: int, clients: int, seconds: float
                ) -> tuple[int, int, list[float], float]:
    headers = {"content-type": "application/x-sentry-envelope", "content-encoding": "gzip",
               "x-sentry-auth": f"Sentry sentry_version=7, sentry_key={KEY}, "
                                "sentry_client=sentry.python/bench"}
    latencies: list[float] = []
    ok = bad = 0
    sent = 0
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    # TCP_NODELAY, as the SDKs' own transports set it (urllib3 does by default): httpx writes
    # the headers and the body separately, and without it Nagle's algorithm holds the body
    # back for the server's delayed ACK — a fixed ~40 ms per request that is not healer's.
    transport = httpx.AsyncHTTPTransport(
        limits=limits, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    async with httpx.AsyncClient(base_url=url, transport=transport, timeout=10) as client:

        async def worker() -> None:
            nonlocal ok, bad, sent
            while sent < events and time.monotonic() < deadline:
                sent += 1
                t = time.perf_counter()
                r = await client.post("/api/1/envelope/", content=body, headers=headers)
                latencies.append(time.perf_counter() - t)
                if r.status_code == 200:
                    ok += 1
                else:
                    bad += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - start
    return ok, bad, latencies, elapsed


_WRK_SCRIPT = """wrk.method = "POST"
local f = io.open("{body}", "rb"); wrk.body = f:read("*a"); f:close()
wrk.headers["Content-Type"] = "application/x-sentry-envelope"
wrk.headers["Content-Encoding"] = "gzip"
wrk.headers["X-Sentry-Auth"] = "Sentry sentry_version=7, sentry_key={key}, " ..
  "sentry_client=sentry.python/bench"
"""
_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if not m:
        raise SystemExit(f"unreadable wrk latency {text!r}")
    return float(m[1]) * _UNIT_MS[m[2]]


def drive_wrk(wrk: str, url: str, body: bytes, clients: int, seconds: float, tmp: Path
              ) -> tuple[int, int, float, float, float]:
    """(accepted, refused, elapsed s, p50 ms, p99 ms) from one bounded wrk run."""
    (tmp / "body.bin").write_bytes(body)
    script = tmp / "post.lua"
    script.write_text(_WRK_SCRIPT.format(body=tmp / "body.bin", key=KEY))
    out = subprocess.run([wrk, "-t1", f"-c{clients}", f"-d{max(1, round(seconds))}s",
                          "--latency", "-s", str(script), f"{url}/api/1/envelope/"],
                         capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    total = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
    # Anchored: the thread stats' "+/- Stdev" column can end in "…99%" too.
    p50 = re.search(r"^\s*50%\s+(\S+)", out, re.M)
    p99 = re.search(r"^\s*99%\s+(\S+)", out, re.M)
    if not (total and p50 and p99):
        raise SystemExit(f"unreadable wrk output:\n{out}")
    bad_m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    bad = int(bad_m[1]) if bad_m else 0
    elapsed = float(total[2]) * (0.001 if total[3] == "ms" else 1.0)
    return int(total[1]) - bad, bad, elapsed, _ms(p50[1]), _ms(p99[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20000,
                    help="most events the Python client sends (wrk runs for --seconds)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--client", choices=("auto", "wrk", "python"), default="auto")
    add_smoke_flag(ap, "1 s, 4 clients, at most 200 events")
    args = ap.parse_args()
    bench = bench_for(__file__, args)
    if args.smoke:
        args.seconds, args.clients, args.events = 1.0, 4, 200
    wrk = shutil.which("wrk") if args.client != "python" else None
    if args.client == "wrk" and wrk is None:
        raise SystemExit("wrk is not installed (scripts/setup.sh --bench installs it)")

    raw = capture_envelope()
    body = gzip.compress(raw)
    with tempfile.TemporaryDirectory(prefix="healer-sentry-bench-") as tmp:
        root = Path(tmp)
        env = healer_env(root / "state", root / "results", root / "fleet",
                         HEALER_EXECUTOR="playbook", HEALER__CONTEXT__ENABLED="false",
                         HEALER_SENTRY_KEY=KEY, HEALER__LOG__LEVEL="warning",
                         HEALER__INGEST__QUEUE_SIZE="100000",
                         # The raw throughput of one key: its default rate limit (429 past
                         # ingest.rate_per_s) would measure the limit instead.
                         HEALER__INGEST__RATE_PER_S="0")
        server = ServeProcess(env)
        try:
            # Warm up (imports, first incident), then measure.
            asyncio.run(drive(server.url, body, 10 if args.smoke else 50, 4, 10))
            if wrk:
                ok, bad, elapsed, p50, p99 = drive_wrk(wrk, server.url, body, args.clients,
                                                       args.seconds, root)
            else:
                ok, bad, lat, elapsed = asyncio.run(
                    drive(server.url, body, args.events, args.clients, args.seconds))
                lat.sort()
                p50 = lat[len(lat) // 2] * 1000
                p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
            t0 = time.perf_counter()
            expected = ok + (10 if args.smoke else 50)

            def filed() -> Any:
                found = server.http.get("/api/v1/context/incidents").json()["incidents"]
                return found and found[0]["count"] >= expected

            server.wait_for(filed, timeout=120)
            drained = time.perf_counter() - t0
        finally:
            server.close()
    eps = ok / elapsed
    print(f"envelope: {len(raw)} bytes raw, {len(body)} gzipped (captured from sentry-sdk)")
    print(f"client: {'wrk (-t1)' if wrk else 'Python httpx (its CPU counts against healer)'}")
    print(f"accepted {ok} events ({bad} refused) with {args.clients} clients in "
          f"{elapsed:.2f} s; latency p50 {p50:.1f} ms")
    print(f"all filed into one incident {drained:.2f} s after the last response "
          f"(count {expected})")
    bench.judge("events accepted", eps, "events/s", at_least=TARGET_EPS)
    bench.judge("latency p99", p99, "ms", at_most=TARGET_P99_MS)
    bench.check("no event refused", bad == 0)
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
