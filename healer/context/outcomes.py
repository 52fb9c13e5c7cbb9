"""The texts a healing run leaves behind: the PR body, the escalation, the memory entry."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from healer.core.escalation import Attempt as EscAttempt
from healer.core.escalation import Escalation
from healer.selfheal.gitdir import TAMPERED_STEPS, tampered_commands

LABELS = ("self-healing", "automated", "living-context")
_ESC_SEVERITY = {"critical": "critical", "high": "high", "medium": "warning", "low": "info",
                 "info": "info"}


@dataclass
class Iteration:
    """One healing iteration: what the agent reported and what the verifier said."""

    number: int
    agent_status: str
    agent_summary: str = ""
    agent_error: str = ""
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    verdict: Mapping[str, Any] | None = None
    commits: int = 0
    markdown: str = ""  # the verdict as shown in a PR body
    # The hold of healer's model access that stopped the run (``limits.held_by``), if any.
    hold: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return self.verdict is not None and not self.reasons

    def outcome(self) -> str:
        if self.passed:
            return "verified"
        if self.agent_status in ("unfixable", "escalated"):
            return f"agent: {self.agent_status}"
        return "rejected"

    def as_dict(self) -> dict[str, Any]:
        return {"number": self.number, "agent_status": self.agent_status,
                "agent_summary": self.agent_summary, "agent_error": self.agent_error,
                "reasons": self.reasons, "warnings": self.warnings, "commits": self.commits,
                "passed": self.passed}


def fence(text: str, lang: str = "text") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def pr_body(inc: Mapping[str, Any], attempt_id: str, it: Iteration, verdict_md: str,
            commits: list[tuple[str, str]], diffstat: str) -> str:
    err = inc["error"]
    where = err.get("file", "") + (f":{err['line']}" if err.get("line") else "")
    lines = [
        "## Automated fix proposed by healer (living context)",
        "",
        f"A {inc['source']} alert reported an error in `{where or 'an unknown file'}`. A healing "
        f"agent fixed it in an isolated clone with the project's living context (scenarios, "
        f"invariants, impact map, incident memory), and healer verified the result with the "
        f"base branch's tests and scenarios on iteration {it.number}. It was written by an "
        "automated agent: review it like any other contribution.",
        "",
        f"- incident: `{inc['key']}`",
        f"- fingerprint: `{inc['fingerprint']}`",
        f"- attempt: `{attempt_id}`",
        f"- severity: {err.get('severity', 'unknown')}",
    ]
    if err.get("environment"):
        lines.append(f"- environment: {err['environment']}")
    issue = (err.get("sentry") or {}).get("issue_url")
    if issue:
        lines.append(f"- Sentry issue: {issue}")
    lines += ["", "### Error (sanitised)", "", fence(err.get("message", ""))]
    if it.agent_summary:
        lines += ["", "### The agent's summary", "", fence(it.agent_summary)]
    lines += ["", "### Verification", "", verdict_md, "", "### Commits", ""]
    lines += [f"- {subject} ({sha[:10]})" for sha, subject in commits]
    lines += ["", "### Files changed", "", fence(diffstat.strip() or "(none)")]
    lines += ["", "Labels: " + ", ".join(LABELS) + ". Opened by `healer` living-context "
              "healing; after the merge healer watches for the same alert and reopens the "
              "incident if it fires again."]
    return "\n".join(lines) + "\n"


def escalation(inc: Mapping[str, Any], attempt_id: str, iterations: list[Iteration], why: str,
               *, repo: str, branch: str, base_sha: str, clone: str = "",
               tampered: list[str] | None = None) -> Escalation:
    err = inc["error"]
    where = err.get("file", "") + (f":{err['line']}" if err.get("line") else "")
    attempts = [EscAttempt(number=it.number, action="living-context-healer, then the scenario "
                           "runner", outcome=it.outcome(),
                           detail="; ".join(it.reasons or [it.agent_error or it.agent_summary])
                           [:1500]) for it in iterations]
    steps = ["Read the verifier's reasons under \"What healer tried\": they say what each fix "
             "broke or lacked.",
             "Look at what the agent tried on its branch (kept for you in its clone) and fix it "
             "by hand, or adjust the living context if a scenario, invariant or limit is wrong.",
             "When it is fixed, resolve the alert at its source; healer closes the incident."]
    commands = [f"healer context render --incident {inc['key']}",
                f"healer context incidents {inc['key']}"]
    happened = ""
    if tampered:
        steps = [*TAMPERED_STEPS, steps[-1]]
        commands += tampered_commands(clone)
        happened = "\n\nWhat the agent changed in its git dir:\n" + "\n".join(
            f"- {c}" for c in tampered)
    elif branch and clone:
        commands.append(f"git -C {clone} log --oneline {base_sha[:12]}..{branch}")
        commands.append(f"git -C {clone} diff {base_sha[:12]} {branch}")
    evidence = [f"error: {err.get('message', '')[:500]}"]
    if err.get("stackTrace"):
        evidence += err["stackTrace"].splitlines()[-12:]
    return Escalation(
        title=f"[HEAL-CTX] {err.get('message', 'error')[:90]} in {where or '?'}",
        target=inc["key"], severity=_ESC_SEVERITY.get(err.get("severity", "high"), "high"),
        what_happened=(f"A {inc['source']} alert reported `{err.get('message', '')[:300]}` in "
                       f"`{where or 'an unknown file'}` (incident `{inc['key']}`, attempt "
                       f"`{attempt_id}`). healer could not produce a verified fix: {why}"
                       f"{happened}"),
        attempts=attempts, next_steps=steps, commands=commands, evidence=evidence,
        incident=inc["key"], kind="escalation", labels=["heal", "escalation", "living-context"],
        dedup_key=f"ctx.{inc['key']}", own=(attempt_id, str(inc.get("fingerprint", "")), branch))


def memory_entry(inc: Mapping[str, Any], attempt_id: str, iterations: list[Iteration], *,
                 success: bool, pr_url: str = "", commits: list[tuple[str, str]] | None = None,
                 now: float | None = None) -> dict[str, Any]:
    """The incident-memory entry of one healing run (fixed or escalated)."""
    err = inc["error"]
    last = iterations[-1] if iterations else None
    entry: dict[str, Any] = {
        "id": f"INC-{attempt_id}",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now or time.time())),
        "error": " ".join(err.get("message", "error").split())[:4000] or "error",
        "file": err.get("file", ""),
        "line": err.get("line"),
        "root_cause": (last.agent_summary if last else "")[:4000],
        "healing_iterations": len(iterations),
        "success": success,
        "source": inc["source"],
        "incident": inc["key"],
    }
    if success:
        entry["fix"] = "; ".join(s for _, s in (commits or []))[:4000] or "fixed"
        entry["lesson"] = f"verified on iteration {len(iterations)}"
        if pr_url:
            entry["pr_url"] = pr_url
    else:
        entry["fix"] = "not fixed: escalated to a person"
        reasons = [r for it in iterations for r in it.reasons]
        entry["lesson"] = ("healing gave up; rejected fixes: " + " | ".join(reasons[-5:]))[:4000]
        bad = [r for r in reasons if "critical invariant" in r or "anti-pattern" in r]
        if bad:
            entry["anti_pattern"] = bad[-1][:2000]
    return {k: v for k, v in entry.items() if v not in ("", None)}
