"""Deterministic playbooks for the play healer's two agents (no model needed).

``evaluation-agent`` writes the root-cause analysis from the evidence it is given;
``remediation-agent`` runs the operator's configured action for the chosen strategy
(``play.actions``), e.g. re-syncing the agent's config or deleting its pod so it re-spawns.
Without a configured action it fails honestly, which — after the attempts run out — brings a
human in with everything healer learned.
"""

from __future__ import annotations

import json
import re
from typing import Any

from healer.agents.playbooks import PlaybookContext, playbook
from healer.agents.results import now_iso
from healer.agents.sandbox import files_in

ROOT_CAUSES = {
    "tool_mismatch": "The agent started without tools its cto-config declares: the tools "
                     "were not synced to its CLI config or their MCP server did not load.",
    "config_error": "The agent could not load a valid cto-config (missing file, failed sync "
                    "or invalid JSON).",
    "mcp_init_failed": "An MCP server the agent depends on failed to initialise or the "
                       "tools-server is unreachable.",
    "pre_flight_failure": "The agent's prompt, template, role or task context was not set up "
                          "before it started.",
    "agent_error": "The agent hit runtime errors (timeouts, refused connections, permission "
                   "or auth failures).",
    "build_failure": "The code the agent produced does not build.",
    "test_failure": "The code the agent produced fails its tests.",
    "stuck": "The agent stopped making progress.",
    "language_mismatch": "The agent runs with the wrong language context for the task.",
}
_SAFE_VALUE = re.compile(r"[A-Za-z0-9_.:/@,=+-]{0,512}")


def _alerts(ctx: PlaybookContext) -> list[dict[str, Any]]:
    try:
        data = json.loads(ctx.vars.get("alerts", "[]"))
    except ValueError:
        return []
    return [a for a in data if isinstance(a, dict)] if isinstance(data, list) else []


@playbook("evaluation-agent")
async def evaluate(ctx: PlaybookContext) -> dict[str, Any]:
    alerts = _alerts(ctx)
    issue_type = ctx.vars.get("issue_type", "other")
    strategy = ctx.vars.get("strategy", "retry")
    cause = ROOT_CAUSES.get(issue_type, "An unclassified failure of the agent.")
    missing = ctx.vars.get("missing_tools", "")
    lines = [f"**Issue type:** {issue_type}", f"**Root cause:** {cause}"]
    if missing:
        lines.append(f"**Missing tools:** {missing}")
    lines.append(f"**Recommended strategy:** {strategy}")
    if alerts:
        lines += ["", "**Evidence:**"]
        for a in alerts[:10]:
            lines.append(f"- [{a.get('code', '?')}/{a.get('severity', '?')}] "
                         f"{a.get('title', '')}")
            lines += [f"  - `{str(x)[:200]}`" for x in list(a.get("lines", []))[:3]]
    return {"status": "diagnosed", "summary": cause, "notes": "\n".join(lines),
            "issue_type": issue_type, "data": {"strategy": strategy}}


def _substitute(argv: list[str], values: dict[str, str]) -> list[str]:
    out = []
    for arg in argv:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out


@playbook("remediation-agent")
async def remediate(ctx: PlaybookContext) -> dict[str, Any]:
    """Run ``play.actions.<strategy>`` with the values of the agent's session substituted.

    The values come from the watched agent's logs and sessions, so the command runs in the
    agent sandbox (``ctx.run_command``): an empty working folder, the host read-only (the
    action's own script readable), no home, the allow-listed environment, and only the
    network of ``agents.sandbox_network`` — an action that calls a cluster API lists it there
    (and its credential file in ``agents.sandbox_read_paths``, its variable in
    ``agents.sandbox_env``)."""
    strategy = ctx.vars.get("strategy", "retry")
    issue_type = ctx.vars.get("issue_type", "other")
    base = {"issue_type": issue_type, "remediation_time": now_iso(), "pr_url": None}
    template = (ctx.settings.play.actions or {}).get(strategy) if ctx.settings else None
    if not template:
        return {**base, "status": "failed", "actions_taken": [],
                "notes": f"No action is configured for strategy {strategy!r}; set "
                         f"play.actions.{strategy} to the command that performs it.",
                "error": f"no action for {strategy}"}
    values = {k: ctx.vars.get(k, "") for k in ("agent", "level", "missing_tools", "task_id",
                                               "repository", "namespace", "code",
                                               "session_id", "target", "pod")}
    values["play_id"] = ctx.task.target
    values["issue_type"] = issue_type
    unsafe = [k for k, v in values.items() if not _SAFE_VALUE.fullmatch(v)]
    if unsafe:
        return {**base, "status": "failed", "actions_taken": [],
                "error": f"refused to substitute unsafe values for: {', '.join(unsafe)}"}
    argv = _substitute(list(template), values)
    timeout = min(ctx.settings.play.action_timeout_s, max(1.0, ctx.remaining()))
    # Only the operator's own files are shown, never a path a substituted value names.
    result = await ctx.run_command(argv, timeout=timeout, readable=files_in(list(template)))
    action = " ".join(argv)
    if result.ok:
        return {**base, "status": "fixed", "actions_taken": [action],
                "notes": (result.stdout or "")[-4000:]}
    why = "timed out" if result.timed_out else f"exited {result.returncode}"
    return {**base, "status": "failed", "actions_taken": [action],
            "error": f"{action} {why}: {(result.stderr or result.stdout)[-2000:]}"}
