#!/usr/bin/env python3
"""Self-healing attempts (get_healing_status) with what each status means and what to do.

usage:
  healing_status.py                  the latest attempts
  healing_status.py 3f2a9c1d         the attempts of one fingerprint (a prefix of 4+ hex digits)
  healing_status.py --refresh        ask the forge about open PRs first (records merges)

Wraps `healer status --json` and adds, per attempt, "meaning" and "next" (what you, the
reporting agent, should do), and overall "by_status" and "needs_person" (attempt ids that a
person has to look at: failed, timeout, unfixable, anonymization_failed,
awaiting_approval).

exit codes: 0 ok (read "needs_person") · 2 bad input (not a fingerprint) · 3 healer is not
installed
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from _healer import EXIT_UNAVAILABLE, emit, fail, healer_argv

MEANING = {
    "dispatch_pending": ("accepted; the healing worker is starting",
                         "carry on; nothing to do"),
    "investigating": ("a healing agent is working on a fix in its own clone",
                      "carry on; use a workaround if you have one"),
    "pr_open": ("a fix PR exists and waits for a person's review",
                "tell the user a fix is waiting for review (pr_url)"),
    "pr_merged": ("the fix was merged; the error goes away after the next deploy or restart",
                  "if it still happens after a restart, report it again"),
    "failed": ("the healing agent could not produce a fix", "tell the user; a person must look"),
    "unfixable": ("not a code bug (external service, data, missing infrastructure)",
                  "pass unfixable_reason to the user: it says what an operator should do"),
    "timeout": ("the healing agent ran out of time", "tell the user; a person must look"),
    "anonymization_failed": ("a fix exists but was blocked: it contained secrets or personal "
                             "data", "tell the user; a person must look (nothing was published)"),
    "awaiting_approval": ("a fix is done and verified, but its diff touches CI, dependencies, "
                          "healer's configuration or weakens tests: held until a person "
                          "approves publication (held.reasons)",
                          "tell the user; never approve it yourself: `healer approve` is "
                          "for the person"),
    "held": ("waiting for healer's own model access (a rejected API key, a rate limit, the "
             "day's agent budget; hold.code): not a failure, and resumed by itself when that "
             "is over", "carry on; a person was told about the cause once — not per report"),
}
NEEDS_PERSON = {"failed", "timeout", "unfixable", "anonymization_failed", "awaiting_approval"}


def main() -> int:
    p = argparse.ArgumentParser(prog="healing_status.py", description=__doc__.split("\n\n")[0],
                                epilog="\n".join(__doc__.split("\n")[2:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("fingerprint", nargs="?")
    p.add_argument("--refresh", action="store_true")
    p.add_argument("--limit", type=int, default=20)
    args = p.parse_args()
    argv = [*healer_argv(), "status", "--json", "--limit", str(args.limit)]
    if args.refresh:
        argv.append("--refresh")
    if args.fingerprint:
        argv += ["--", args.fingerprint]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        fail(f"cannot run healer status: {exc}", EXIT_UNAVAILABLE)
    if proc.returncode not in (0, 1):
        err = proc.stderr.strip().splitlines()
        fail(err[-1] if err else f"healer status exited {proc.returncode}",
             proc.returncode if proc.returncode in (2, 3) else EXIT_UNAVAILABLE)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        fail("healer status printed no JSON", EXIT_UNAVAILABLE)
    by_status: dict[str, int] = {}
    for a in data.get("attempts", []):
        meaning, nxt = MEANING.get(a.get("status", ""), ("unknown status", "ask a person"))
        a["meaning"], a["next"] = meaning, nxt
        by_status[a["status"]] = by_status.get(a["status"], 0) + 1
    data["by_status"] = by_status
    data["needs_person"] = [a["attempt_id"] for a in data.get("attempts", [])
                            if a.get("status") in NEEDS_PERSON]
    emit(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
