"""healer scan vs ripgrep vs grep on big agent logs.

    .venv/bin/python benchmarks/scan_vs_ripgrep.py [--runs 5] [--rg-runs N] [--grep-runs 3]
                                [--lines 7500000 [--lines 400000 ...]]
                                [--error-rate 0.001 --error-rate 0.01 --error-rate 0.05]
                                [--no-mixed] [--smoke]

Target: healer ≥ 1.5× faster than rg (best times) at every failure-line share and on the
mixed-format log, with its two worker processes and with one; exit 1 when missed. Every time
is a whole command, start-up, catalog and worker start included. ``--smoke``: 20,000-line
logs (1 % and mixed) in a temporary folder, one run each, no target (rg is skipped when it is
not installed).

Generates ~1 GB agent logs into benchmarks/.data/ (reused when present; each ``--lines`` makes
a set of that length, and every figure is judged for each: ``make bench`` runs 268 MB and
54 MB logs, where start-up is half the time) — by default with
0.1 %, 1 % and 5 % failure lines, each with 0.3 % harmless look-alikes, and one as long of
the realistic mixed-format corpus (tests/detect/realistic_corpus.py) — then times, end to
end as subprocesses on the same file with the same patterns (the embedded catalog's
non-generic ones: the play-healer seed and the agent runtime failures):

- ``healer scan --json --catalog seed16.yaml --catalog-mode replace FILE`` (the real CLI; its
  JSON Lines go to a file like the others' output; its summary table to stderr, discarded)
- the same with ``--workers 1`` (one process: the per-core figure)
- ``rg -i -c -f PATTERNS FILE`` (``\\b`` given as ``(?-u:\\b)``: see ``rg_regex``)
- ``grep -E -i -c -f PATTERNS FILE``

Runs are interleaved (healer, rg, grep, healer, …) after healer's cold run has read the file
into the page cache, so page cache and machine load treat them alike; best and median are
reported with the ratios. rg's and grep's match counts come from their first timed run.
``--rg-runs`` and ``--grep-runs`` cap their timed runs. healer also
does more than count: it prints every alert as JSON, applies the suppressions and the
pre-flight window, and maps alerts to line numbers. The first, cold run of healer (empty
cache: the catalog is parsed and schema-checked, the Hyperscan database compiled, and Python
byte-code written if PYTHONDONTWRITEBYTECODE had kept it from being written) is reported
separately.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / ".data"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

import _agentlog  # noqa: E402
from _bench import add_smoke_flag, bench_for  # noqa: E402

from healer.detect import _native  # noqa: E402
from healer.detect.catalog import EMBEDDED, Catalog  # noqa: E402

GENERATOR_VERSION = 3
TARGET_SPEEDUP = 1.5
HEALER, SINGLE, RG, GREP = ("healer scan --json", "healer --workers 1", "rg -i -c",
                            "grep -E -i -c")


def make_log(lines: int, error_rate: float) -> Path:
    path = DATA / f"agent-{lines}-{error_rate:g}.log"
    meta = path.with_suffix(".meta.json")
    want = {"version": GENERATOR_VERSION, "lines": lines, "error_rate": error_rate}
    if path.exists() and meta.exists() and json.loads(meta.read_text()) == want:
        return path
    DATA.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        batch: list[bytes] = []
        for line in _agentlog.lines(lines, error_rate=error_rate):
            batch.append(line)
            if len(batch) >= 20_000:
                fh.write(b"".join(batch))
                batch.clear()
        fh.write(b"".join(batch))
    tmp.replace(path)
    meta.write_text(json.dumps(want))
    print(f"generated {path.name} in {time.perf_counter() - started:.1f} s")
    return path


MIXED_CHUNK = 100_000


def make_mixed_log(lines: int) -> Path:
    """The realistic merged log of tests/detect/realistic_corpus.py (kubectl and compose
    prefixes; logfmt, JSON, Python logging, Rust tracing, klog, ANSI, Claude Code stream-json
    and Codex transcripts; real failures among hard negatives), ``lines`` long: chunks of it
    with successive seeds, one after the other."""
    path = DATA / f"mixed-{lines}.log"
    meta = path.with_suffix(".meta.json")
    want = {"version": GENERATOR_VERSION, "lines": lines, "corpus": "realistic"}
    if path.exists() and meta.exists() and json.loads(meta.read_text()) == want:
        return path
    sys.path.insert(0, str(REPO / "tests" / "detect"))
    import realistic_corpus

    DATA.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        for seed, at in enumerate(range(0, lines, MIXED_CHUNK)):
            chunk = realistic_corpus.generate(min(MIXED_CHUNK, lines - at), seed=seed)
            fh.write("".join(line + "\n" for line, _ in chunk).encode("utf-8"))
    tmp.replace(path)
    meta.write_text(json.dumps(want))
    print(f"generated {path.name} in {time.perf_counter() - started:.1f} s")
    return path


def seed_catalog() -> tuple[Path, Path, Path, int]:
    """The catalog's specific patterns (no generic ones) as a healer catalog and as pattern
    files for grep and for rg."""
    cat = Catalog.load().select(generic=False)
    data = yaml.safe_load(Path(EMBEDDED).read_text(encoding="utf-8"))
    keep = {p.id for p in cat.patterns}
    DATA.mkdir(parents=True, exist_ok=True)
    codes = {p.code for p in cat.patterns}
    data["patterns"] = [p for p in data["patterns"] if p["id"] in keep]
    data["suppress"] = [s for s in data["suppress"] if set(s.get("codes", ())) <= codes]
    catalog = DATA / "seed16.yaml"
    catalog.write_text(yaml.safe_dump(data, sort_keys=False))
    patterns = DATA / "seed16.patterns"
    patterns.write_text("".join(p.regex + "\n" for p in cat.patterns))
    rg_patterns = DATA / "seed16.rg-patterns"
    rg_patterns.write_text("".join(rg_regex(p.regex) + "\n" for p in cat.patterns))
    return catalog, patterns, rg_patterns, len(cat.patterns)


def rg_regex(regex: str) -> str:
    r"""``regex`` as rg must be given it to mean what it means to healer: healer matches bytes,
    where ``\b`` is an ASCII word boundary (Hyperscan and Python's ``re`` on bytes agree); rg's
    ``\b`` is Unicode-aware, which with ``-i`` on a log holding non-ASCII bytes drives rg 13
    from its DFA to an engine a hundred times slower. ``(?-u:\b)`` is the same boundary as
    healer's and keeps rg on its fast path: the rival at its best, on the same matches."""
    return re.sub(r"(?<!\\)((?:\\\\)*)\\b", r"\1(?-u:\\b)", regex)


def timed(argv: list[str], env: dict[str, str], cwd: Path, *, capture: bool = False
          ) -> tuple[float, float, bytes]:
    """(wall seconds, CPU seconds of the process and its children, stdout if captured).

    Timed runs write to a file: reading a pipe here would take CPU from the tool, and GNU
    grep stops at the first match when its output is /dev/null."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(DATA / "out.txt", "wb") as sink:
        started = time.perf_counter()
        proc = subprocess.run(argv, env=env, cwd=cwd,
                              stdout=subprocess.PIPE if capture else sink,
                              stderr=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{argv[0]} failed with exit code {proc.returncode}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, proc.stdout or b""


def time_tools(log: Path, lines: int, what: str, args: argparse.Namespace, env: dict[str, str],
               catalog: Path, patterns: Path, rg_patterns: Path) -> dict[str, float]:
    """Time the tools on ``log`` (``what`` it holds, for the heading); healer's speed-ups vs
    rg (two workers and one), best time against best time, by figure name."""
    script = Path(sys.executable).with_name("healer")  # the installed `healer` command
    healer = [str(script)] if script.exists() else [sys.executable, "-m", "healer"]
    healer += ["scan", "--json", "--catalog", str(catalog), "--catalog-mode", "replace",
               str(log)]
    single = [*healer[:-1], "--workers", "1", healer[-1]]
    rg = ["rg", "-i", "-c", "-f", str(rg_patterns), str(log)]
    grep = ["grep", "-E", "-i", "-c", "-f", str(patterns), str(log)]

    size = log.stat().st_size
    print(f"\n== {log.name}: {size / 1e6:.0f} MB, {lines:,} lines, {what} ==")
    shutil.rmtree(env["HEALER_CACHE_DIR"], ignore_errors=True)
    cold, _, out = timed(healer, env, DATA, capture=True)  # also warms the page cache
    alerts = out.count(b"\n")
    alert_lines = len({json.loads(x)["line_no"] for x in out.splitlines()})

    commands = {HEALER: healer, SINGLE: single, RG: rg, GREP: grep}
    if not shutil.which("rg"):  # only in smoke runs: main() refuses otherwise
        del commands[RG]
    names = tuple(commands)
    times: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    counts: dict[str, bytes] = {}
    caps = {RG: args.rg_runs, GREP: args.grep_runs}
    for i in range(args.runs):
        for name in names:
            if i >= caps.get(name, args.runs):
                continue
            wall, used, _ = timed(commands[name], env, DATA)
            times[name].append(wall)
            cpu[name].append(used)
            if name in caps and name not in counts:
                counts[name] = (DATA / "out.txt").read_bytes()
    found = ", ".join(f"{name.split()[0]} {int(out)}" for name, out in counts.items())
    print(f"matching lines: {found}; healer: {alerts} alerts "
          f"on {alert_lines} lines (suppressed look-alikes and pre-flight matches after the "
          "60 s window are not alerts)")
    print(f"healer cold run (empty cache: compiles the catalog): {cold:.3f} s")
    print(f"{'command':<22}{'runs':>5}{'best s':>9}{'median s':>10}{'MB/s (best)':>13}"
          f"{'CPU s (median)':>16}")
    for name, values in times.items():
        print(f"{name:<22}{len(values):>5}{min(values):>9.3f}{statistics.median(values):>10.3f}"
              f"{size / 1e6 / min(values):>13.0f}{statistics.median(cpu[name]):>16.3f}")
    h_best, h_med = min(times[HEALER]), statistics.median(times[HEALER])
    for name in [n for n in (RG, GREP) if n in times]:
        best, med = min(times[name]), statistics.median(times[name])
        print(f"healer vs {name:<14} {best / h_best:5.2f}x faster (best)  "
              f"{med / h_med:5.2f}x faster (median)")
    rival = RG if RG in times else GREP  # grep only in a smoke run without rg
    return {f"{HEALER} vs {rival.split()[0]}": min(times[rival]) / h_best,
            f"{SINGLE} vs {rival.split()[0]}": min(times[rival]) / min(times[SINGLE])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rg-runs", type=int, default=3)
    ap.add_argument("--grep-runs", type=int, default=3)
    ap.add_argument("--lines", type=int, action="append",
                    help="lines per log (repeatable: a set of logs per size; default "
                    "7,500,000: about 1 GB; 400,000 is about 54 MB)")
    ap.add_argument("--error-rate", type=float, action="append",
                    help="share of failure lines (repeatable; default: 0.001, 0.01 and 0.05)")
    ap.add_argument("--data", help="where the logs go (default benchmarks/.data, reused)")
    ap.add_argument("--no-mixed", dest="mixed", action="store_false",
                    help="skip the mixed-format log (tests/detect/realistic_corpus.py, --lines "
                    "long)")
    add_smoke_flag(ap, "20,000 lines at 1 %% in a temporary folder, one run each")
    args = ap.parse_args()
    bench = bench_for(__file__, args)
    global DATA
    own_data = args.smoke and not args.data  # a temporary folder of ours, removed at the end
    if args.smoke:
        args.lines, args.runs, args.error_rate = [20_000], 1, args.error_rate or [0.01]
        args.data = args.data or tempfile.mkdtemp(prefix="healer-bench-scan-")
    if args.data:
        DATA = Path(args.data)
    rates = args.error_rate or [0.001, 0.01, 0.05]
    args.rg_runs = max(1, min(args.runs, args.rg_runs))
    args.grep_runs = max(1, min(args.runs, args.grep_runs))

    for tool in ("rg", "grep"):
        if not shutil.which(tool) and not (args.smoke and tool == "rg"):
            print(f"{tool} is not installed (scripts/setup.sh --bench installs it)",
                  file=sys.stderr)
            return 3
    catalog, patterns, rg_patterns, n_patterns = seed_catalog()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEALER")}
    env["HEALER_CACHE_DIR"] = str(DATA / "cache")
    # As installed (pip writes .pyc files): without them every run recompiles healer's
    # modules (~60 ms). The cold run writes them.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(REPO)
    version = (subprocess.run(["rg", "--version"], capture_output=True, text=True, check=False)
               .stdout.splitlines()[0] if shutil.which("rg") else "rg not installed (skipped)")
    libhs = _native.libhs()
    hyperscan = (f"the system's libhs {libhs.libhs_version()}" if libhs is not None else
                 "the hyperscan package's Hyperscan (no system libhs: apt-get install "
                 "libhyperscan5)")
    print(f"{n_patterns} seed patterns; {os.cpu_count()} CPUs; "
          f"{version}; healer with {hyperscan}, 2 worker processes, "
          + ("its native fast paths" if _native.speedups is not None else
             "NO native fast paths (python hatch_build.py builds them)"))

    sizes = args.lines or [7_500_000]
    logs: dict[str, tuple[Path, int, str]] = {}
    for lines in sizes:
        # (with several sizes each figure names its log's)
        at = f" ({make_log(lines, rates[0]).stat().st_size / 1e6:.0f} MB)" if len(sizes) > 1 \
            else ""
        for rate in rates:
            logs[f"at {rate:.1%} failure lines{at}"] = (
                make_log(lines, rate), lines, f"{rate:.1%} failure lines (+0.3% look-alikes)")
        if args.mixed:
            logs[f"on the mixed-format log{at}"] = (
                make_mixed_log(lines), lines, "the realistic mixed-format corpus "
                "(kubectl/compose prefixes, logfmt, JSON, klog, ANSI, Claude Code stream-json, "
                "Codex)")
    results = {label: time_tools(log, lines, what, args, env, catalog, patterns, rg_patterns)
               for label, (log, lines, what) in logs.items()}
    load = os.getloadavg()[0]
    print(f"\nload average (1 min) at the end: {load:.2f} on {os.cpu_count()} CPUs (other work "
          "on the machine slows healer's two processes more than rg's one)")
    for label, speedups in results.items():
        for name, speedup in speedups.items():
            bench.judge(f"{name} {label}", speedup, "×",
                        at_least=TARGET_SPEEDUP)
    if own_data:
        shutil.rmtree(DATA, ignore_errors=True)
    return bench.finish()


if __name__ == "__main__":
    raise SystemExit(main())
