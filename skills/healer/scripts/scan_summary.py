#!/usr/bin/env python3
"""Scan logs with `healer scan --json` and print ONE JSON summary instead of one line per alert.

usage:
  scan_summary.py FILE... [--since 10m] [--start WHEN] [--catalog FILE] [--samples N]
  some-command | scan_summary.py -

Output: {"alerts": N, "worst": severity, "preflight": [codes], "codes": {CODE: {count,
severity, priority, id, meaning, action, samples: [{source, line_no, line}]}}, "errors": [...]}.
Codes are sorted worst first; `samples` keeps the first N lines per code (default 3).

exit codes: 0 scanned (the summary says how many alerts) · 2 bad input (missing file, bad
catalog, bad flag) · 3 healer is not installed or a source could not be read
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from _healer import EXIT_UNAVAILABLE, emit, fail, healer_argv

RANK = {"critical": 5, "high": 4, "medium": 3, "warning": 2, "low": 1, "info": 0}
TIMEOUT_S = 600


def main() -> int:
    p = argparse.ArgumentParser(prog="scan_summary.py", description=__doc__.split("\n\n")[0],
                                epilog="\n".join(__doc__.split("\n")[2:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", metavar="FILE", help="log files; - reads stdin")
    p.add_argument("--since", help="skip lines older than this (10m, 2h, or an ISO time)")
    p.add_argument("--start", help="when the agent started (pre-flight window)")
    p.add_argument("--catalog", help="your own catalog (YAML), added to the embedded one")
    p.add_argument("--samples", type=int, default=3, help="lines kept per code (3)")
    args = p.parse_args()
    argv = [*healer_argv(), "scan", "--json", "--no-summary"]
    for flag in ("since", "start", "catalog"):
        if getattr(args, flag):
            argv += [f"--{flag}", getattr(args, flag)]
    argv += ["--", *args.files]  # a file named like a flag stays a file
    stdin = sys.stdin.buffer if "-" in args.files else subprocess.DEVNULL
    try:
        proc = subprocess.run(argv, stdin=stdin, capture_output=True, timeout=TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        fail(f"healer scan took longer than {TIMEOUT_S} s", EXIT_UNAVAILABLE)
    except OSError as exc:
        fail(f"cannot run healer: {exc}", EXIT_UNAVAILABLE)
    err = proc.stderr.decode(errors="replace").strip()
    if proc.returncode not in (0, 1):
        fail(err.splitlines()[-1] if err else f"healer scan exited {proc.returncode}",
             proc.returncode if proc.returncode in (2, 3) else EXIT_UNAVAILABLE)
    codes: dict[str, dict] = {}
    total = 0
    for raw in proc.stdout.decode(errors="replace").splitlines():
        try:
            a = json.loads(raw)
        except ValueError:
            continue
        total += 1
        c = codes.setdefault(a["code"], {
            "count": 0, "severity": a["severity"], "priority": a["priority"], "id": a["id"],
            "meaning": a.get("meaning", ""), "action": a.get("action", ""), "samples": []})
        c["count"] += 1
        if RANK.get(a["severity"], 0) > RANK.get(c["severity"], 0):
            c.update(severity=a["severity"], id=a["id"], meaning=a.get("meaning", ""),
                     action=a.get("action", ""))
        if len(c["samples"]) < args.samples:
            c["samples"].append({"source": a["source"], "line_no": a["line_no"],
                                 "line": a["line"]})
    ordered = dict(sorted(codes.items(), key=lambda kv: (-RANK.get(kv[1]["severity"], 0),
                                                         kv[1]["priority"], kv[0])))
    worst = next(iter(ordered.values()))["severity"] if ordered else None
    emit({"alerts": total, "worst": worst, "codes": ordered,
          "preflight": [k for k, v in ordered.items() if v["priority"] == 1],
          "errors": [line for line in err.splitlines() if line.strip()][-5:]})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
