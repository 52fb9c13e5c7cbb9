#!/usr/bin/env python3
"""One JSON picture of the fleet: what is broken, which healing agent fixes it, what needs a person.

usage:
  fleet_report.py                    probe every channel of every peer once, then plan
  fleet_report.py --peer n2          only that peer (healer fleet probe n2)

Wraps `healer fleet status --json` (or `healer fleet probe PEER --json`) and runs healer's own
repair planner on the result, so the answer names the agent healer itself would dispatch:

{"node": this node, "ok": bool, "peers": {PEER: {"ok", "broken": [{"channel", "level",
"detail"}], "repairs": [{"agent", "kind", "channels", "why"}], "needs_person": {channel:
why}, "waiting": {channel: what for}}}, "escalations_open": N}

Next steps: `healer fleet heal PEER` runs the repairs; "needs_person" channels (SSH, git, a
machine that is down) go to a human; `escalations_open` counts files in the human inbox.

exit codes: 0 probed (read "ok") · 2 bad input (unknown peer, no or bad fleet config) · 3 healer
is not installed
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from _healer import EXIT_UNAVAILABLE, emit, fail, healer_argv, need_healer


def main() -> int:
    p = argparse.ArgumentParser(prog="fleet_report.py", description=__doc__.split("\n\n")[0],
                                epilog="\n".join(__doc__.split("\n")[2:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peer", help="only this peer")
    args = p.parse_args()
    need_healer()

    from healer.config import load_settings
    from healer.core import seeds
    from healer.errors import HealerError
    from healer.fleet.channels import CHANNELS, Outcome, PeerProbe
    from healer.fleet.diagnosis import plan

    argv = [*healer_argv(), "fleet", *(["probe", "--json", "--", args.peer] if args.peer
                                        else ["status", "--json"])]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        fail(f"cannot run healer fleet: {exc}", EXIT_UNAVAILABLE)
    if proc.returncode not in (0, 1):
        err = proc.stderr.strip().splitlines()
        fail(err[-1] if err else f"healer fleet exited {proc.returncode}",
             proc.returncode if proc.returncode in (2, 3) else EXIT_UNAVAILABLE)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        fail("healer fleet printed no JSON", EXIT_UNAVAILABLE)
    probes = {args.peer: data} if args.peer else data.get("peers", {})
    peers = {}
    for name, pr in probes.items():
        channels = {c: Outcome(bool(o.get("ok")), str(o.get("detail", "")), o.get("latency_ms"))
                    for c, o in (pr.get("channels") or {}).items()}
        probe = PeerProbe(name, float(pr.get("at") or 0), channels, dict(pr.get("skipped") or {}))
        pl = plan(probe)
        peers[name] = {
            "ok": probe.ok,
            "broken": [{"channel": c, "level": CHANNELS[c].level if c in CHANNELS else "",
                        "detail": channels[c].detail} for c in probe.broken],
            "repairs": [{"agent": r.agent, "kind": r.kind, "channels": list(r.channels),
                         "why": r.why} for r in pl.repairs],
            "needs_person": pl.unrepairable, "waiting": pl.waiting}
    try:
        fleet_dir = load_settings(None).fleet_path
        open_escalations = len(seeds.inbox(fleet_dir, seeds.HUMAN))
    except (HealerError, OSError):
        open_escalations = None
    emit({"node": data.get("node"), "ok": all(p["ok"] for p in peers.values()),
          "peers": peers, "escalations_open": open_escalations})
    return 0


if __name__ == "__main__":
    sys.exit(main())
