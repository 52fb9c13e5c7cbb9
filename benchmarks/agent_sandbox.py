"""What the agent sandbox costs at an agent's start, and what it refuses.

Launches the same commands N times each, unconfined and in healer's bubblewrap sandbox (the
whole path a run takes: building the policy, the run's network folder and bridges, bwrap,
exit, clean-up) and prints the medians side by side:

- ``true``: the sandbox alone (no network);
- ``true`` behind the model bridge: plus the bridge process that listens on the model API's
  address inside and healer's relay outside;
- the Claude Code CLI behind the model bridge: ``claude --version``, and a whole one-turn
  session (``claude -p``) against the scripted model on loopback — an agent's real start,
  every model request through the bridge.

The target is at most 200 ms added to an agent's start (the session row) on a 2-core machine;
the benchmark exits 1 when it is missed. Then a probe run inside the sandbox tries what an
attacker-driven agent would — read a private key in healer's home, read healer's secrets from
its environment and ``/proc``, write outside its checkout, connect to a listener on loopback
and to the internet — and prints what was refused (exit 1 if anything got through).

    .venv/bin/python benchmarks/agent_sandbox.py [--runs 21] [--sessions 9] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _bench import Bench, add_smoke_flag, bench_for

from healer.agents.executors import claude_cli
from healer.agents.sandbox import BwrapSandbox, Endpoint
from healer.config import load_settings

TARGET_MS = 200.0
MODEL = Endpoint("127.0.0.1", 9)  # bridged, never connected to here


async def launch(argv: list[str], env: dict[str, str]) -> None:
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL)
    if await proc.wait() != 0:
        raise SystemExit(f"{argv[0]} failed (exit {proc.returncode})")


async def plain(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    await launch(argv, {**os.environ, **env})
    return time.perf_counter() - t0


async def boxed(box: BwrapSandbox, argv: list[str], cwd: str, env: dict[str, str],
                network: list[Endpoint]) -> float:
    t0 = time.perf_counter()
    wrapped = box.wrap(argv, cwd=cwd, env={"HEALER_RUN_ID": "bench", **env}, writable=[cwd],
                       readable=[str(Path(argv[0]).parent)], network=network)
    async with wrapped:
        await launch(wrapped.argv, wrapped.env)
    return time.perf_counter() - t0


def ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def timings(box: BwrapSandbox, work: str, runs: int, sessions: int
                  ) -> list[tuple[str, float, float]]:
    rows = []
    true = "/usr/bin/true" if os.path.exists("/usr/bin/true") else "/bin/true"
    Case = tuple[str, list[str], dict[str, str], list[Endpoint], int]
    cases: list[Case] = [("true", [true], {}, [], runs),
                         ("true behind the model bridge", [true], {}, [MODEL], runs)]
    cli = claude_cli(load_settings(env={}))
    model = None
    if cli:
        from healer.testing import ScriptedModel, text

        model = ScriptedModel(when_exhausted=text("ok")).start()
        config = Path(work) / "claude-config"
        config.mkdir(exist_ok=True)
        session = {**model.env(), "CLAUDE_CONFIG_DIR": str(config),
                   "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
                   "CLAUDE_CODE_MAX_RETRIES": "0"}
        endpoint = [Endpoint("127.0.0.1", model.port)]
        cases += [("claude --version behind the bridge", [cli, "--version"], {}, [MODEL], runs),
                  ("claude -p: a one-turn session", [cli, "-p", "hi", "--max-turns", "1",
                                                     "--output-format", "json"],
                   session, endpoint, sessions)]
    try:
        for label, argv, env, net, n in cases:
            await boxed(box, argv, work, env, net)  # warm the page cache for both
            await plain(argv, env)
            a: list[float] = []
            b: list[float] = []
            for _ in range(n):  # interleaved: a busy moment hits both the same
                a.append(await plain(argv, env))
                b.append(await boxed(box, argv, work, env, net))
            rows.append((f"{label} ({n}x)", ms(a), ms(b)))
    finally:
        if model is not None:
            model.stop()
    return rows


PROBE = r"""
import os, socket, sys
key, outside, port, healer_pid = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

def attempt(what, fn):
    try:
        got = fn()
        print(f"GOT     {what}: {str(got)[:60]!r}")
    except OSError as exc:
        print(f"refused {what}: {exc.strerror or exc}")

attempt("read healer's ~/.ssh/id_rsa", lambda: open(key).read())
attempt("read /etc/shadow", lambda: open("/etc/shadow").read() or None)
attempt(f"read /proc/{healer_pid}/environ (healer)",
        lambda: open(f"/proc/{healer_pid}/environ").read())
for name in ("GH_TOKEN", "AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK"):
    if name in os.environ:
        print(f"GOT     env {name}")
    else:
        print(f"refused env {name}: not in the environment")
attempt("write outside the checkout", lambda: open(os.path.join(outside, "pwned"), "w").write("x"))
attempt("write /usr/local/pwned", lambda: open("/usr/local/pwned", "w").write("x"))
attempt(f"connect to a loopback listener (127.0.0.1:{port})",
        lambda: socket.create_connection(("127.0.0.1", port), 2).sendall(b"leak"))
attempt("resolve and connect to example.com:443",
        lambda: socket.create_connection(("example.com", 443), 2))
attempt("connect to 1.1.1.1:443", lambda: socket.create_connection(("1.1.1.1", 443), 2))
"""


async def probe(box: BwrapSandbox, tmp: Path) -> bool:
    """The attacker's probe in the sandbox; True when everything was refused."""
    (tmp / "home" / ".ssh").mkdir(parents=True)
    key = tmp / "home" / ".ssh" / "id_rsa"
    key.write_text("PRIVATE KEY\n")
    outside = tmp / "outside"
    outside.mkdir()
    script = tmp / "probe.py"
    script.write_text(PROBE)
    listener = socket.create_server(("127.0.0.1", 0))
    heard: list[bytes] = []
    threading.Thread(target=lambda: heard.append(listener.accept()[0].recv(10)),
                     daemon=True).start()
    work = tmp / "checkout"
    work.mkdir()
    box.environ = {**os.environ, "GH_TOKEN": "ghp_bench", "AWS_SECRET_ACCESS_KEY": "bench",
                   "SSH_AUTH_SOCK": "/tmp/agent.sock", "HOME": str(tmp / "home")}
    argv = [sys.executable, str(script), str(key), str(outside),
            str(listener.getsockname()[1]), str(os.getpid())]
    wrapped = box.wrap(argv, cwd=str(work), env={"HEALER_RUN_ID": "probe"},
                       writable=[str(work)], readable=[str(script)], network=[MODEL])
    async with wrapped:
        proc = await asyncio.create_subprocess_exec(*wrapped.argv, env=wrapped.env,
                                                    stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
    listener.close()
    lines = out.decode().splitlines()
    print("probe run inside the sandbox (what an attacker-driven agent tries):")
    for line in lines:
        print(f"  {line}")
    leaked = [line for line in lines if line.startswith("GOT")]
    if heard or list(outside.iterdir()):
        leaked.append("the host saw a connection or a file")
    print(f"  {len(lines) - len(leaked)} of {len(lines)} refused" +
          (f"; GOT THROUGH: {len(leaked)}" if leaked else ""))
    return not leaked


async def main_async(bench: Bench, args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="healer-bench-sbx-"))
    settings = load_settings(env={}, overrides={
        "state_dir": str(tmp / "state"), "results_dir": str(tmp / "results"),
        "fleet_dir": str(tmp / "fleet")})
    box = BwrapSandbox(settings)
    why = box.unavailable()
    if why:
        shutil.rmtree(tmp, ignore_errors=True)
        bench.check(f"a sandbox is available here ({why})", False)
        return bench.finish()
    work = tmp / "work"
    work.mkdir()
    runs = 3 if args.smoke else args.runs
    sessions = 2 if args.smoke else args.sessions
    print(f"agent start with and without the sandbox: medians ({os.cpu_count()} cores)")
    print(f"  {'':44} {'unconfined':>12} {'sandboxed':>12} {'added':>10}")
    rows = await timings(box, str(work), runs, sessions)
    for label, a, b in rows:
        print(f"  {label:44} {a:>9.1f} ms {b:>9.1f} ms {b - a:>7.1f} ms")
    added = rows[-1][2] - rows[-1][1]
    bench.judge(f"added to an agent's start ({rows[-1][0]})", added, "ms", at_most=TARGET_MS)
    refused = await probe(box, tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    bench.check("the sandbox refused everything the probe tried", refused)
    return bench.finish()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21, help="launches per short case and mode")
    ap.add_argument("--sessions", type=int, default=9,
                    help="one-turn Claude sessions per mode (about a second each)")
    add_smoke_flag(ap, "3 launches each, 2 sessions, the probe run")
    args: Any = ap.parse_args()
    return asyncio.run(main_async(bench_for(__file__, args), args))


if __name__ == "__main__":
    raise SystemExit(main())
