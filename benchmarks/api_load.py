"""HTTP API load: the active-session list and session starts, with 10,000 stored sessions.

Seeds a state dir with 10,000 play sessions (50 of them active), starts a real
`healer serve` on 127.0.0.1, and drives it with wrk (Debian package `wrk`) for a fixed time:

- GET  /api/v1/sessions/active       target ≥ 2,000 req/s, p99 ≤ 25 ms
- POST /api/v1/session/start         unique play ids (wrk Lua script); the same target

Exits 1 when a target is missed. ``--smoke`` (50 sessions, 1 s per route) falls back to a
small Python client when wrk is not installed.

    .venv/bin/python benchmarks/api_load.py [--seconds 10] [--connections 16] [--smoke]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _bench import add_smoke_flag, bench_for, fail

from healer.core.store import FileStore
from healer.play.sessions import KIND, SessionRegistry, iso, new_session
from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env

BODY = ('{"play_id":"%s","repository":"5dlabs/cto","cto_config":{"agents":{"rex":{"tools":'
        '{"remote":["brave_search","github_create_pull_request"]}}}},"tasks":[{"id":1}]}')

START_LUA = r"""
local threads = 0
setup = function(thread)
  thread:set("tid", threads)
  threads = threads + 1
end
init = function(args)
  counter = 0
end
request = function()
  counter = counter + 1
  local id = string.format("bench-%d-%d", tid, counter)
  local body = string.format('%s', id)
  return wrk.format("POST", "/api/v1/session/start",
                    {["Content-Type"] = "application/json"}, body)
end
"""

DONE_LUA = r"""
done = function(summary, latency, requests)
  io.write(string.format("P99_US %d\nP50_US %d\nCODES_NON2XX %d\n",
           latency:percentile(99), latency:percentile(50),
           summary.errors.status))
end
"""


def seed(state: Path, total: int, active: int) -> None:
    store = FileStore(state)
    reg = SessionRegistry(store)
    now = time.time()
    for i in range(total):
        payload = {"play_id": f"play-task-{i}", "repository": "5dlabs/cto",
                   "cto_config": {"agents": {"rex": {"tools": {"remote": ["brave_search"]}}}},
                   "tasks": [{"id": 1, "title": "t"}]}
        if i < active:
            reg.start(payload)
            continue
        # A finished play is written once, as it ends up. Started then finished, each would
        # be rewritten (a new file renamed over the old): 10,000 inodes freed seconds before
        # the measurement, which ext4 without a journal (as on the benchmark machines) skips
        # one by one in every file creation for minutes after — a fifth to a third of the
        # server's CPU per session start went there, a cost of the seeding, not of serving.
        store.create(KIND, payload["play_id"], {**new_session(payload, now),
                                                "status": "completed", "finished_at": iso(now)})
    store.sync()


def wrk(url: str, path: str, seconds: int, conns: int, script: Path | None) -> dict[str, float]:
    argv = ["wrk", "-t2", f"-c{conns}", f"-d{seconds}s", "--latency"]
    if script:
        argv += ["-s", str(script)]
    out = subprocess.run([*argv, url + path], capture_output=True, text=True, timeout=seconds + 60,
                         check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p99 = float(re.search(r"P99_US (\d+)", out).group(1)) / 1000  # type: ignore[union-attr]
    p50 = float(re.search(r"P50_US (\d+)", out).group(1)) / 1000  # type: ignore[union-attr]
    bad = int(re.search(r"CODES_NON2XX (\d+)", out).group(1))  # type: ignore[union-attr]
    return {"rps": rps, "p50": p50, "p99": p99, "non2xx": bad}


def python_client(url: str, path: str, seconds: float, body: bool) -> dict[str, float]:
    """A sequential stand-in for wrk (smoke runs where wrk is not installed)."""
    lat: list[float] = []
    bad = 0
    end = time.perf_counter() + seconds
    with httpx.Client(base_url=url, timeout=10) as client:
        while time.perf_counter() < end:
            t = time.perf_counter()
            if body:
                r = client.post(path, content=BODY % f"smoke-{len(lat)}",
                                headers={"Content-Type": "application/json"})
            else:
                r = client.get(path)
            lat.append((time.perf_counter() - t) * 1000)
            bad += not 200 <= r.status_code < 300
    lat.sort()
    return {"rps": len(lat) / seconds, "p50": statistics.median(lat),
            "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))], "non2xx": bad}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--active", type=int, default=50)
    add_smoke_flag(ap, "50 sessions, 1 s per route, 4 connections")
    args = ap.parse_args()
    bench = bench_for(__file__, args)
    if args.smoke:
        args.seconds, args.connections, args.sessions, args.active = 1, 4, 50, 5
    use_wrk = shutil.which("wrk") is not None
    if not use_wrk and not args.smoke:
        fail("wrk is not installed (apt-get install wrk, or scripts/setup.sh --bench)")
    root = Path(tempfile.mkdtemp(prefix="healer-api-bench-"))
    t0 = time.perf_counter()
    seed(root / "state", args.sessions, args.active)
    print(f"seeded {args.sessions} sessions ({args.active} active) in "
          f"{time.perf_counter() - t0:.1f} s")
    env = healer_env(root / "state", root / "results", root / "fleet")
    server = ServeProcess(env)
    try:
        get_lua = root / "get.lua"
        get_lua.write_text(DONE_LUA)
        post_lua = root / "post.lua"
        post_lua.write_text(START_LUA.replace("'%s'", "'" + BODY.replace("%s", "%s") + "'")
                            + DONE_LUA)
        server.http.get("/api/v1/sessions/active")
        if use_wrk:
            active = wrk(server.url, "/api/v1/sessions/active", args.seconds, args.connections,
                         get_lua)
            start = wrk(server.url, "/", args.seconds, args.connections, post_lua)
        else:
            print("wrk is not installed: a sequential Python client instead (smoke only)")
            active = python_client(server.url, "/api/v1/sessions/active", args.seconds, False)
            start = python_client(server.url, "/api/v1/session/start", args.seconds, True)
    finally:
        server.close()
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'route':<34} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>8}")
    for name, r in (("GET /api/v1/sessions/active", active),
                    ("POST /api/v1/session/start", start)):
        print(f"{name:<34} {r['rps']:>9,.0f} {r['p50']:>8.2f} {r['p99']:>8.2f} "
              f"{int(r['non2xx']):>8}")
    for name, r in (("active list", active), ("session start", start)):
        bench.judge(f"{name} throughput", r["rps"], "req/s", at_least=2000)
        bench.judge(f"{name} p99", r["p99"], "ms", at_most=25)
        bench.check(f"{name}: every answer 2xx", r["non2xx"] == 0)
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
