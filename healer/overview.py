"""One look at everything: what is broken, what healer is doing, and what needs a person.

``healer status`` (without a fingerprint) prints this above the healing attempts. It only
reads state — records in the store, the loop's status file, the human inbox — so it works
whether or not a loop is running, and on either store backend.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from healer.config import Settings
from healer.core import seeds
from healer.core.store import Store


def _loop(settings: Settings) -> dict[str, Any]:
    path = settings.state_path / "loop.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"state": "never run"}
    alive = False
    if data.get("state") == "running":
        try:
            os.kill(int(data["pid"]), 0)
            alive = True
        except (OSError, ValueError, KeyError):
            alive = False
    state = data.get("state", "?")
    if state == "running" and not alive:
        state = "dead (not stopped cleanly)"
    return {"state": state, "pid": data.get("pid"), "api": data.get("api", ""),
            "uptime_s": data.get("uptime_s"), "bus": data.get("bus", {})}


def _play(store: Store) -> dict[str, Any]:
    active = store.members("sessions-active")
    open_issues = []
    for pid in active:
        rec = store.get("sessions", pid)
        for issue in (rec.data.get("issues") or []) if rec else []:
            if not issue.get("resolved"):
                open_issues.append({"play_id": pid, "issue_type": issue["issue_type"],
                                    "agent": issue.get("agent", ""),
                                    "description": issue["description"],
                                    "escalated": bool(issue.get("escalated"))})
    running = [r.key for r in store.list("remediations") if r.data.get("status") == "running"]
    return {"active_sessions": len(active), "open_issues": open_issues,
            "remediations_running": running}


def _selfheal(store: Store) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for rec in store.list("heal-attempts"):
        status = str(rec.data.get("status", "?"))
        counts[status] = counts.get(status, 0) + 1
    return {"attempts": counts}


def _context(store: Store) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for rec in store.list("context-incidents"):
        status = str(rec.data.get("status", "?"))
        counts[status] = counts.get(status, 0) + 1
    return {"incidents": counts}


def _fleet(store: Store) -> dict[str, Any]:
    rec = store.get("fleet-status", "latest")
    if rec is None:
        return {}
    peers = rec.data.get("peers") or {}
    broken = {}
    for name, p in peers.items():
        probe = p.get("probe") or {}
        bad = [c for c, v in (probe.get("channels") or {}).items()
               if isinstance(v, dict) and v.get("ok") is False]
        if bad:
            broken[name] = bad
    return {"node": rec.data.get("node"), "peers": len(peers), "broken": broken,
            "healing": [n for n, p in peers.items() if p.get("healing")],
            "age_s": round(time.time() - float(rec.data.get("at") or 0), 1)}


def _human(settings: Settings) -> list[dict[str, str]]:
    out = []
    for path in seeds.inbox(settings.fleet_path, seeds.HUMAN):
        try:
            s = seeds.read(path)
        except Exception:  # a file a person is editing, or foreign: list it anyway
            out.append({"file": str(path), "subject": "(unreadable)", "severity": "?"})
            continue
        out.append({"file": str(path), "subject": s.subject, "severity": s.severity,
                    "from": s.sender, "timestamp": s.timestamp})
    return out


def overview(settings: Settings, store: Store) -> dict[str, Any]:
    return {
        "loop": _loop(settings),
        "play": _play(store),
        "selfheal": _selfheal(store),
        "context": _context(store),
        "fleet": _fleet(store),
        "needs_a_person": _human(settings),
    }


def render(data: dict[str, Any]) -> str:
    """Plain text for the terminal (scripts use --json)."""
    lines = []
    loop = data["loop"]
    lines.append(f"loop: {loop['state']}" + (f" (pid {loop['pid']}, API {loop['api']})"
                                            if loop.get("api") else ""))
    play = data["play"]
    lines.append(f"plays: {play['active_sessions']} active, {len(play['open_issues'])} open "
                 f"issue(s), {len(play['remediations_running'])} remediation(s) running")
    for i in play["open_issues"][:10]:
        mark = " [escalated]" if i["escalated"] else ""
        lines.append(f"  - {i['play_id']}: {i['description']}{mark}")
    att = data["selfheal"]["attempts"]
    if att:
        lines.append("healing attempts: " + ", ".join(f"{v} {k}" for k, v in sorted(
            att.items())))
    inc = data["context"]["incidents"]
    if inc:
        lines.append("production incidents: " + ", ".join(f"{v} {k}" for k, v in sorted(
            inc.items())))
    fleet = data["fleet"]
    if fleet:
        lines.append(f"fleet ({fleet['node']}): {fleet['peers']} peer(s), "
                     f"{len(fleet['broken'])} with broken channels, healing: "
                     f"{', '.join(fleet['healing']) or 'none'} (as of {fleet['age_s']} s ago)")
        for peer, chans in fleet["broken"].items():
            lines.append(f"  - {peer}: {', '.join(chans)} broken")
    human = data["needs_a_person"]
    lines.append(f"needs a person: {len(human)} escalation file(s)"
                 + (" in " + str(os.path.dirname(human[0]["file"])) if human else ""))
    for h in human[:10]:
        lines.append(f"  - [{h['severity']}] {h['subject']}")
    return "\n".join(lines)
