"""The one escalation text of a code attempt, whichever source reported the error.

``build(settings, att, history)`` turns an ended attempt record (``heal-attempts``) into an
``Escalation`` (``healer.core.escalation``: a seed file in ``.fleet-messages/human/`` and a
forge issue, one per fingerprint, updated by later failures):

=========================  ============================================================
``unfixable``              the agent's reasoning (its UNFIXABLE note, or "could not
                           reproduce"), sanitised, is the heart of it
``failed``                 the last verification's reasons (what the fix broke or lacked),
                           or why the run ended without a fix
``timeout``                how long it ran
``anonymization_failed``   the seed file only: its subject goes neither to the forge nor to
                           Discord, not even scrubbed
tampered                   what the agent changed in its git dir, and how to look safely
=========================  ============================================================

With a living context (an attempt of a Sentry/Alertmanager/Slack/Loki incident, ``incident``
on the record) the commands include ``healer context render --incident <id>`` — exactly
what the agent was told. ``minimal(att)`` is the fallback when the validator refuses the full
text: healer's own words and ids only. Who escalates when is the intake's business
(``healer.selfheal.escalate`` for report_error, ``healer.context.heal`` for the others).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from healer.core.escalation import Attempt, Escalation
from healer.core.publish.forge_issues import dedup_key
from healer.selfheal import attempts as st
from healer.selfheal.gitdir import TAMPERED_STEPS, tampered_commands

MAX_HISTORY = 10  # earlier attempts of the fingerprint listed in the file
MAX_REASONS = 10
_SEVERITY = {"critical": "critical", "high": "high", "medium": "warning", "low": "info",
             "info": "info"}
_HEADLINE = {
    st.UNFIXABLE: "the healing agent says a person is needed",
    st.FAILED: "healing failed",
    st.TIMEOUT: "healing timed out",
    st.ANONYMIZATION_FAILED: "fix blocked: it contained secrets or personal data",
}
TAMPERED_HEADLINE = "stopped: the healing agent tampered with its git dir"


def _iso(ts: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(float(ts)))
    except (TypeError, ValueError):
        return ""


def _fence(text: str) -> list[str]:
    fence = "```"
    while fence in text:
        fence += "`"
    return [fence + "text", text.strip(), fence]


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def _verification_reasons(att: dict[str, Any]) -> list[str]:
    """The last verification's reasons (else the last iteration's)."""
    reasons = list((att.get("verification") or {}).get("reasons") or [])
    iterations = att.get("iterations")
    if not reasons and isinstance(iterations, list) and iterations:
        reasons = list((iterations[-1] or {}).get("reasons") or [])
    return [str(r) for r in reasons][:MAX_REASONS]


def build(settings: Any, att: dict[str, Any], history: list[dict[str, Any]]) -> Escalation:
    """The escalation of one ended attempt; ``history``: the fingerprint's attempts."""
    fp, status, aid = att["fingerprint"], att["status"], att["attempt_id"]
    etype = att.get("error_type") or "error"
    site = att.get("call_site") or "an unknown call site"
    sh = settings.selfheal
    reason = att.get("reason") or ""
    where = f", branch `{att['branch']}`" if att.get("branch") else ""
    tool = f", tool `{att['tool_name']}`" if att.get("tool_name") else ""
    source = att.get("source") or ("report_error" if not att.get("incident") else "an alert")
    who = "An agent" if source == "report_error" else f"A {source} signal"
    inc = f" (incident `{att['incident']}`)" if att.get("incident") else ""
    what = [f"{who} reported `{etype}` in `{site}`{inc} (severity {att.get('severity', '?')}"
            f"{tool}). healer sent a healing agent to reproduce and fix it in an isolated git "
            f"clone (attempt `{aid}`{where}). The attempt ended **{status}**"
            + (f": {reason}." if reason else ".")]
    reasons = _verification_reasons(att)
    if reasons and not att.get("tampered"):
        what += ["", "The last verification's reasons (a fix becomes a PR only when a test it "
                 "adds fails on base for the reported reason, passes with the fix, and the "
                 "suite stays as green as on base):", "", *[f"- {r}" for r in reasons]]
    agent = (att.get("agent_result") or {}).get("summary") or ""
    if att.get("tampered"):
        what += ["", "What the agent changed in the git dir healer made for it (each is an "
                 "attack on whoever runs git there next):", "",
                 *[f"- {c}" for c in att["tampered"]]]
    elif status == st.UNFIXABLE:
        what += ["", "The healing agent found this is not a bug it can fix in the code, or could "
                 "not make it happen. Its explanation (sanitised):", "",
                 *_fence(att.get("unfixable_reason") or "(empty)")]
    elif status == st.TIMEOUT:
        what += ["", "The attempt did not finish within its time limit (`selfheal.timeout_s` = "
                 f"{sh.timeout_s:g} s per agent run, `code.test_timeout_s` per test run) and "
                 "was stopped; whatever it committed was not published."]
    elif status == st.ANONYMIZATION_FAILED:
        found = ", ".join(att.get("findings") or []) or "secrets or personal data"
        what += ["", f"The agent committed a fix, but the publication validator found {found} "
                 "in it, so nothing was published: no PR, no forge issue. The commits exist "
                 "only on the local branch."]
    if agent:
        what += ["", "The agent's own summary (sanitised):", "", *_fence(agent)]

    earlier = list(reversed(history[:MAX_HISTORY]))
    tries = [Attempt(number=i, action=f"healing agent, then verification, attempt "
                     f"`{a['attempt_id']}`",
                     outcome=a.get("status", "?"), at=_iso(a.get("created_at")),
                     detail=_one_line(a.get("unfixable_reason") or a.get("reason")
                                      or a.get("pr_url") or ""))
             for i, a in enumerate(earlier or [att], 1)]
    headline = TAMPERED_HEADLINE if att.get("tampered") else _HEADLINE.get(status, status)
    return Escalation(
        title=f"Self-healing: {etype} in {site} — {headline} [{fp[:12]}]",
        target=site, severity=_SEVERITY.get(str(att.get("severity")), "warning"),
        what_happened="\n".join(what), attempts=tries, next_steps=_steps(settings, att),
        commands=_commands(settings, att), evidence=_evidence(att),
        incident=str(att.get("incident") or fp),
        own=(aid, fp, str(att.get("branch") or "")),
        labels=["heal", "self-healing", "escalation"], dedup_key=dedup_key("selfheal", fp),
        one_open=True, publish=status != st.ANONYMIZATION_FAILED)


def _steps(settings: Any, att: dict[str, Any]) -> list[str]:
    status = att["status"]
    cooldown = f"{settings.selfheal.cooldown_s:g} s"
    if att.get("tampered"):
        return list(TAMPERED_STEPS)
    if status == st.UNFIXABLE:
        steps = ["Read the agent's explanation above and deal with the cause it names "
                 "(configuration, data, a missing migration, an outside service …): healer "
                 "cannot fix it in the code.",
                 "If the agent is wrong and it is a code bug, fix it by hand; the worktree "
                 "shows what the agent looked at."]
    elif status == st.ANONYMIZATION_FAILED:
        steps = ["Inspect the branch on this machine only (commands below) and do not push it "
                 "as it is: its diff contains what the validator flagged.",
                 "If the flagged value is a real secret, rotate it. If the fix is good, redo "
                 "it without the value and open the PR yourself."]
    elif status == st.TIMEOUT:
        steps = ["Look at the worker log and the worktree (commands below) to see how far the "
                 "agent got.",
                 f"Fix it by hand, or give the agent more time with `selfheal.timeout_s` (now "
                 f"{settings.selfheal.timeout_s:g} s)."]
    else:
        steps = ["Read the last verification's reasons above (what the fix broke or lacked), "
                 "then the worker log and the worktree (commands below): why did the agent "
                 "end without a verified fix?",
                 "Fix the bug by hand, or report it again with more context (what the caller "
                 "was doing, what it expected) so the next attempt has more to go on."]
    steps.append(f"New reports of this error are refused for `selfheal.cooldown_s` ({cooldown}) "
                 "after this attempt; after that healer tries again, and a failure updates "
                 "this file instead of writing a new one.")
    return steps


def _commands(settings: Any, att: dict[str, Any]) -> list[str]:
    fp, aid = att["fingerprint"], att["attempt_id"]
    out = ["# every attempt of this error, and its details",
           f"healer status {fp}", f"healer status {fp} --json"]
    if att.get("incident"):
        out += ["# what the agent was told: the living context of this incident",
                f"healer context render --incident {att['incident']}"]
    log_file = Path(settings.state_path) / "selfheal" / "logs" / f"{aid}.log"
    if log_file.is_file():
        out += ["# the healing worker's log", f"cat {log_file}"]
    tree, base = att.get("worktree"), att.get("base_sha") or att.get("base") or ""
    if att.get("tampered"):
        if tree and not att.get("worktree_removed_at"):
            out += tampered_commands(tree)
        return out
    if tree and not att.get("worktree_removed_at"):
        out += ["# what the agent left in its clone (removed after selfheal.worktree_ttl_s)",
                f"git -C {tree} status --short",
                f"git -C {tree} log --oneline {base}..HEAD" if base else
                f"git -C {tree} log --oneline -5"]
        if att["status"] == st.UNFIXABLE:
            out.append(f"cat {tree}/UNFIXABLE")
    elif att.get("repo") and att.get("branch") and base:
        out += ["# the agent's commits", f"git -C {att['repo']} log --oneline "
                f"{base}..{att['branch']}"]
    return out


def _evidence(att: dict[str, Any]) -> list[str]:
    lines = [f"fingerprint: {att['fingerprint']}", f"attempt: {att['attempt_id']}",
             *([f"incident: {att['incident']}"] if att.get("incident") else []),
             f"error type: {att.get('error_type', '')}",
             f"call site: {att.get('call_site', '')}"]
    message = (att.get("error_message") or "").strip().splitlines()
    lines += ["message: " + (message[0] if message else ""), *message[1:6]]
    tb = (att.get("traceback") or "").strip().splitlines()
    if tb:
        lines += ["traceback (end):", *tb[-10:]]
    if att.get("context"):
        lines.append("reporter's context: " + _one_line(att["context"], 600))
    if att.get("findings"):
        lines.append("validator findings: " + ", ".join(att["findings"]))
    return lines[:20]


def minimal(att: dict[str, Any]) -> Escalation:
    """When the full text is refused by the validator: only healer's own words and ids."""
    fp, status = att["fingerprint"], att["status"]
    return Escalation(
        title=f"Self-healing: {_HEADLINE.get(status, status)} [{fp[:12]}]", target=fp[:12],
        severity="warning", incident=fp,
        what_happened=(f"A healing attempt (`{att['attempt_id']}`) for the error with "
                       f"fingerprint `{fp}` ended **{status}**. The full escalation text was "
                       "refused by the publication validator, so only the ids are here."),
        next_steps=["Read the attempt on this machine with the commands below."],
        commands=[f"healer status {fp}", f"healer status {fp} --json"],
        labels=["heal", "self-healing", "escalation"], dedup_key=dedup_key("selfheal", fp),
        one_open=True, publish=status != st.ANONYMIZATION_FAILED)


