"""What ``healer approve`` and ``healer deny`` share: the arguments, who is deciding, output."""

from __future__ import annotations

import argparse
import getpass
import os
import time
from typing import Any

from healer.commands._common import add_settings_args, print_json


def add_args(p: argparse.ArgumentParser, *, optional_incident: bool = False) -> None:
    p.add_argument("incident", nargs="?" if optional_incident else None,
                   help="the incident id (code-…, as `healer status` lists it) or its key")
    p.add_argument("--stage", choices=["run", "publish"],
                   help="which stage (default: the one that waits: a held fix's publication, "
                        "else starting the agent)")
    p.add_argument("--by", metavar="NAME",
                   help="who decides, for the audit trail (default: your OS user name)")
    p.add_argument("--comment", default="", help="why, for the audit trail (and the PR)")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    add_settings_args(p)


def who(args: argparse.Namespace) -> str:
    """``--by``, else the OS user running the command."""
    if args.by and args.by.strip():
        return " ".join(args.by.split())[:100]
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def show(outcome: Any, as_json: bool) -> None:
    data = outcome.as_dict()
    if as_json:
        print_json(data)
        return
    print(f"{data['incident']}: {data['stage']} {data['verdict']} by {data['by']}")
    if data.get("pr_url"):
        print(f"pull request: {data['pr_url']}")
    if data.get("decision"):
        started = data["decision"] == "accepted"
        print(("started: attempt " + data.get("attempt_id", "")) if started else
              f"not started yet ({data['decision']}): {data.get('message', '')}")
    elif data.get("message") and not data.get("pr_url"):
        print(data["message"])


def list_waiting(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(data)
        return
    items = data["waiting"]
    if not items:
        print("nothing waits for a person's approval")
    for w in items:
        age = max(0, int(time.time() - float(w.get("since") or time.time())))
        print(f"{w['id']}  [{w['stage']}] {w['trust']}, seen {w['count']}x by "
              f"{w['distinct']}, waiting {age} s: {' '.join(str(w['summary']).split())[:100]}")
        for r in w.get("reasons", [])[:10]:
            print(f"    held: {r}")
    if data.get("not_yet_eligible"):
        print(f"({data['not_yet_eligible']} anonymous incident(s) below the eligibility "
              "threshold: code.approval_min_events / code.approval_min_distinct)")
