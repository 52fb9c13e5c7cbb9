"""The 60-second pre-flight check of every agent in a play.

The seed's checklist, each item judged from what healer knows: the session's declared tools,
the agent's own tool-inventory report, and its log lines scanned with the detection catalog
(priority-1 patterns count only within the pre-flight window of the agent's start).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

CHECKLIST = (
    ("agent_type_identified", "Agent type identified"),
    ("role_matches_task", "Role matches task"),
    ("template_loaded", "Template loaded"),
    ("language_context_set", "Language context set"),
    ("cto_config_loaded", "CTO config loaded"),
    ("remote_tools_accessible", "Remote tools accessible"),
    ("local_servers_initialized", "Local servers initialized"),
    ("tools_server_reachable", "Tools-server reachable"),
)
# Which alert codes (from logs) fail which checklist item.
CODE_ITEM = {"A10": "remote_tools_accessible", "A11": "cto_config_loaded",
             "L1": "template_loaded", "L2": "template_loaded", "L3": "role_matches_task",
             "L4": "language_context_set"}
_MISSING = re.compile(r"missing(?:\s+tools?)?\s*[:=]\s*\[?([^\]\n]+)", re.I)
_TOOL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/@-]{0,255}")


def missing_from_line(line: str) -> list[str]:
    """Tool names an agent's log line says are missing (``missing: a, b``)."""
    m = _MISSING.search(line)
    if not m:
        return []
    names = re.split(r"[,\s]+", m.group(1).replace('"', " ").replace("'", " "))
    return [n for n in names if n and _TOOL.fullmatch(n)]


@dataclass
class Verdict:
    agent: str
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing_tools: list[str] = field(default_factory=list)
    failed_servers: list[str] = field(default_factory=list)

    def set(self, item: str, ok: bool | None, detail: str) -> None:
        # A failure already found is never overwritten by a later "ok".
        current = self.items.get(item)
        if current is not None and current["ok"] is False and ok is not False:
            return
        self.items[item] = {"ok": ok, "detail": detail}

    @property
    def failed(self) -> list[str]:
        return [k for k, v in self.items.items() if v["ok"] is False]

    def as_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "checklist": self.items, "failed": self.failed,
                "missing_tools": self.missing_tools, "failed_servers": self.failed_servers}


def check_inventory(session: dict[str, Any], report: dict[str, Any]) -> Verdict:
    """Judge the checklist from an agent's own inventory report."""
    agent = report["agent"]
    v = Verdict(agent)
    declared = session["expected_tools"].get(agent)
    if declared is None:
        v.set("agent_type_identified", False,
              f"agent {agent!r} is not declared in the play's cto_config "
              f"(declared: {', '.join(sorted(session['expected_tools'])) or 'none'})")
        return v
    v.set("agent_type_identified", True, f"agent {agent} declared")
    have = set(report["tools"])
    missing_remote = [t for t in declared["remote"] if t not in have]
    v.missing_tools = missing_remote + [t for tools in declared["local"].values()
                                        for t in tools if t not in have]
    v.set("remote_tools_accessible", not missing_remote,
          f"missing: {', '.join(missing_remote)}" if missing_remote
          else f"all {len(declared['remote'])} remote tools present")
    servers = report.get("servers") or {}
    failed = [s for s in declared["local"] if servers.get(s) == "failed"]
    missing_local = [t for tools in declared["local"].values() for t in tools if t not in have]
    v.failed_servers = failed
    ok_local = not failed and not missing_local
    detail = ("all local servers ready" if ok_local else
              "; ".join(filter(None, [f"failed: {', '.join(failed)}" if failed else "",
                                      f"missing: {', '.join(missing_local)}"
                                      if missing_local else ""])))
    v.set("local_servers_initialized", ok_local, detail)
    if "cto_config_loaded" in report:
        v.set("cto_config_loaded", bool(report["cto_config_loaded"]),
              "loaded" if report["cto_config_loaded"] else "the agent reports no cto-config")
    if report.get("template") is not None:
        v.set("template_loaded", bool(report["template"]), report["template"] or "no template")
    spec = session["cto_config"]["agents"].get(agent, {})
    if report.get("role") is not None:
        want = spec.get("role")
        ok = not want or want == report["role"]
        v.set("role_matches_task", ok, f"role {report['role']!r}" +
              ("" if ok else f", expected {want!r}"))
    if "task_id" in report:
        task = next((t for t in session["tasks"] if str(t["id"]) == str(report["task_id"])), None)
        hint = (task or {}).get("agent_hint")
        ok = task is not None and (not hint or hint == agent)
        v.set("role_matches_task", ok,
              "task matches" if ok else f"task {report['task_id']} is for {hint or 'nobody'}")
    if report.get("language") is not None:
        want = spec.get("language")
        ok = not want or want.lower() == str(report["language"]).lower()
        v.set("language_context_set", ok, f"language {report['language']!r}" +
              ("" if ok else f", expected {want!r}"))
    return v


def item_for(alert: Any) -> str | None:
    """The checklist item a log alert decides (None for runtime alerts)."""
    if alert.code == "A12":
        return ("tools_server_reachable" if "tools-server" in alert.line.lower()
                else "local_servers_initialized")
    return CODE_ITEM.get(alert.code)


def check_alerts(agent: str, alerts: Iterable[Any]) -> Verdict:
    """Judge the checklist items that log lines (priority-1 and lifecycle alerts) decide."""
    v = Verdict(agent)
    for a in alerts:
        item = item_for(a)
        if item is None:
            continue
        v.set(item, False, a.line)
        if a.code == "A10":
            v.missing_tools.extend(t for t in missing_from_line(a.line)
                                   if t not in v.missing_tools)
    return v
