"""Agent runtime speed: prompt rendering, playbook runs, Claude Code runs, timeout kills.

Everything is real and local: the channel-diagnoser playbook probes a live HTTP server and
closed ports on 127.0.0.1; the claude executor runs the Claude Code CLI bundled with
claude-agent-sdk against ``healer.testing.ScriptedModel`` (so the figures are healer's and the
CLI's overhead, not a model's thinking time). Prints each figure beside its target; exit 1
when one is missed.

    .venv/bin/python benchmarks/agent_runs.py [--playbook-runs 200] [--claude-runs 5] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _bench import Bench, add_smoke_flag, bench_for

from healer.agents import (
    AgentRunner,
    AgentTask,
    PlaybookExecutor,
    RunInfo,
    _proctree,
    context_from_vars,
    load_definitions,
    render_task,
)
from healer.agents.claude import ClaudeExecutor
from healer.config import load_settings
from healer.testing import ScriptedModel, hang, tool_use

TARGETS = {"render_per_s": 500.0, "playbook_runs_per_s": 20.0, "claude_run_s": 5.0,
           "kill_s": 3.0}
VARS = {"host": "127.0.0.1", "user": "fleet", "tunnel_port": "8856", "logs": "level=error x",
        "alerts": '[{"code": "A2", "severity": "critical", "title": "t", "lines": ["l"]}]'}


class _Health(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *a: Any) -> None:
        pass


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_render(bench: Bench, n: int) -> None:
    agents = sorted(load_definitions())
    start = time.perf_counter()
    for i in range(n):
        agent = agents[i % len(agents)]
        run = RunInfo(agent=agent, kind="k", target="mac1", run_id=f"run-{i}",
                      result_path="/tmp/r/heal-k-mac1-1.json", cwd="/tmp", timeout_s=60,
                      executor="claude", incident="inc-1")
        render_task(f"{agent}.md.j2", run, context_from_vars(agent, "mac1", VARS))
    elapsed = time.perf_counter() - start
    print(f"prompt rendering ({n} prompts over {len(agents)} templates)")
    bench.judge("task prompts rendered", n / elapsed, "/s", at_least=TARGETS["render_per_s"])


async def bench_playbooks(bench: Bench, settings: Any, n: int, port: int) -> None:
    dead = _closed_port()
    tasks = [AgentTask("channel-diagnoser", f"peer{i % 10}", vars={
        "host": "127.0.0.1", "port": str(port), "ssh_port": str(dead),
        "nats_url": f"nats://127.0.0.1:{dead}"}) for i in range(n)]
    ex = PlaybookExecutor(settings)
    start = time.perf_counter()
    for t in tasks[: n // 4]:
        await ex.run(t)
    seq = (n // 4) / (time.perf_counter() - start)
    runner = AgentRunner(settings, executor=ex, max_concurrent=settings.executor.max_concurrent)
    start = time.perf_counter()
    handles = [runner.submit(t) for t in tasks]
    outcomes = [await runner.wait(h.run_id) for h in handles]
    par = n / (time.perf_counter() - start)
    print("channel-diagnoser playbook (live HTTP + 3 closed ports, result written each run)")
    bench.check("every playbook run diagnosed", all(o.status == "diagnosed" for o in outcomes))
    bench.judge("runs, one at a time", seq, "/s", at_least=TARGETS["playbook_runs_per_s"])
    bench.judge(f"runs, AgentRunner with {runner.max_concurrent} in flight", par, "/s",
                at_least=TARGETS["playbook_runs_per_s"])
    print(f"  {'speed-up from the runner':<44} {par / seq:>9.2f} x")


async def bench_claude(bench: Bench, settings: Any, n: int) -> None:
    durations: list[float] = []
    first_request: list[float] = []
    env_extra = {"CLAUDE_CODE_MAX_RETRIES": "0"}
    for _ in range(n):
        doc = {"schema_version": 1, "kind": "${kind}", "target": "${target}",
               "status": "diagnosed", "run_id": "${run_id}", "summary": "bench"}
        script = [tool_use("Write", {"file_path": "${result_path}", "content": json.dumps(doc)})]
        with ScriptedModel(script) as model:
            ex = ClaudeExecutor(settings, env={**model.env(), **env_extra})
            start = time.time()
            outcome = await ex.run(AgentTask("channel-diagnoser", "peer1",
                                             vars={"host": "127.0.0.1"}))
            if not bench.check(f"claude run ok ({outcome.error})", outcome.ok):
                return
            durations.append(time.time() - start)
            first_request.append(model.requests[0].at - start)
    print(f"claude executor, real Claude Code CLI vs ScriptedModel ({n} runs, 2 model turns)")
    bench.judge("whole run, median", statistics.median(durations), "s",
                at_most=TARGETS["claude_run_s"])
    print(f"  {'of which start-up until the first model call':<44} "
          f"{statistics.median(first_request):>9.2f} s")

    kills: list[float] = []
    for _ in range(max(1, n // 2)):
        with ScriptedModel([hang()]) as model:
            ex = ClaudeExecutor(settings, env={**model.env(), **env_extra})
            outcome = await ex.run(AgentTask("channel-diagnoser", "peer1", timeout_s=2,
                                             vars={"host": "127.0.0.1"}))
            bench.check("a hung run ends in timeout", outcome.status == "timeout")
            kills.append(outcome.duration_s - 2)
            bench.check("no process of a killed run is left",
                        _proctree.marked(outcome.run_id) == set())
    bench.judge("timeout → CLI killed, result written", statistics.median(kills), "s",
                at_most=TARGETS["kill_s"])


async def main_async(bench: Bench, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as root:
        settings = load_settings(env={}, overrides=[
            f"state_dir={root}/state", f"results_dir={root}/results",
            f"fleet_dir={root}/fleet", f"cto_config={root}/none.json"])
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            bench_render(bench, args.renders)
            await bench_playbooks(bench, settings, args.playbook_runs,
                                  int(server.server_address[1]))
            if args.claude_runs:
                await bench_claude(bench, settings, args.claude_runs)
        finally:
            server.shutdown()
        print(f"results written: {len(list(Path(root, 'results').glob('*.json')))}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--renders", type=int, default=2000)
    p.add_argument("--playbook-runs", type=int, default=200)
    p.add_argument("--claude-runs", type=int, default=5, help="0 skips the Claude Code part")
    add_smoke_flag(p, "50 renders, 8 playbook runs, 1 Claude run and 1 kill")
    args = p.parse_args()
    bench = bench_for(__file__, args)
    if args.smoke:
        args.renders, args.playbook_runs, args.claude_runs = 50, 8, 1
    asyncio.run(main_async(bench, args))
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
