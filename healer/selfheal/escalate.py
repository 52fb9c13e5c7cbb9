"""What a person gets when self-healing cannot fix a reported error.

Which attempts escalate (the state machine decides, ``healer.selfheal.attempts``): every
investigation of a ``report_error`` attempt that ends

=========================  ============================================================
``unfixable``              at once: the healing agent says a person is needed; its UNFIXABLE
                           note (sanitised) is the heart of the escalation
``failed``                 on every such end — healer has no "attempts per fingerprint"
``timeout``                limit (a fingerprint is tried again after ``selfheal.cooldown_s``
``anonymization_failed``   for as long as it is reported), so each failed try tells a person
=========================  ============================================================

Dedup is per fingerprint: one open seed file in ``.fleet-messages/human/`` and one forge
issue. A later escalation of the same fingerprint rewrites that file ("escalated N times")
and comments on the issue; once a person moves the file to ``archive/``, the next one starts
a new file. ``anonymization_failed`` writes the seed file only: its subject (a fix that
carried secrets or personal data) goes neither to the forge nor to Discord, not even scrubbed.

Escalating never raises: a failure is logged, recorded on the attempt
(``escalation_error``) and retried by the next ``SelfHealService.recover()`` up to
``attempts.MAX_ESCALATION_TRIES`` times. Everything written passes through the scrubber and
the publication validator in ``healer.core.escalation``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from healer.core.escalation import Attempt, Escalation, escalate
from healer.core.publish.forge_issues import dedup_key
from healer.core.store import Store
from healer.selfheal import attempts as st
from healer.selfheal.attempts import Attempts
from healer.selfheal.gitdir import TAMPERED_STEPS, tampered_commands

log = logging.getLogger(__name__)

MAX_HISTORY = 10  # earlier attempts of the fingerprint listed in the file
MAX_PER_SWEEP = 50
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


def build(settings: Any, att: dict[str, Any], history: list[dict[str, Any]]) -> Escalation:
    """The escalation of one ended attempt; ``history``: the fingerprint's attempts."""
    fp, status, aid = att["fingerprint"], att["status"], att["attempt_id"]
    etype = att.get("error_type") or "error"
    site = att.get("call_site") or "an unknown call site"
    sh = settings.selfheal
    reason = att.get("reason") or ""
    where = f", branch `{att['branch']}`" if att.get("branch") else ""
    tool = f", tool `{att['tool_name']}`" if att.get("tool_name") else ""
    what = [f"An agent reported `{etype}` in `{site}` (severity {att.get('severity', '?')}"
            f"{tool}). healer sent a healing agent to fix it in an isolated git clone "
            f"(attempt `{aid}`{where}). The attempt ended **{status}**"
            + (f": {reason}." if reason else ".")]
    agent = (att.get("agent_result") or {}).get("summary") or ""
    if att.get("tampered"):
        what += ["", "What the agent changed in the git dir healer made for it (each is an "
                 "attack on whoever runs git there next):", "",
                 *[f"- {c}" for c in att["tampered"]]]
    elif status == st.UNFIXABLE:
        what += ["", "The healing agent wrote an UNFIXABLE note: it found this is not a bug it "
                 "can fix in the code. Its explanation (sanitised):", "",
                 *_fence(att.get("unfixable_reason") or "(empty)")]
    elif status == st.TIMEOUT:
        what += ["", f"The agent did not finish within `selfheal.timeout_s` = "
                 f"{sh.timeout_s:g} s and was stopped; whatever it committed was not published."]
    elif status == st.ANONYMIZATION_FAILED:
        found = ", ".join(att.get("findings") or []) or "secrets or personal data"
        what += ["", f"The agent committed a fix, but the publication validator found {found} "
                 "in it, so nothing was published: no PR, no forge issue. The commits exist "
                 "only on the local branch."]
    if agent:
        what += ["", "The agent's own summary (sanitised):", "", *_fence(agent)]

    earlier = list(reversed(history[:MAX_HISTORY]))
    tries = [Attempt(number=i, action=f"healing agent, attempt `{a['attempt_id']}`",
                     outcome=a.get("status", "?"), at=_iso(a.get("created_at")),
                     detail=_one_line(a.get("unfixable_reason") or a.get("reason")
                                      or a.get("pr_url") or ""))
             for i, a in enumerate(earlier or [att], 1)]
    headline = TAMPERED_HEADLINE if att.get("tampered") else _HEADLINE.get(status, status)
    return Escalation(
        title=f"Self-healing: {etype} in {site} — {headline} [{fp[:12]}]",
        target=site, severity=_SEVERITY.get(str(att.get("severity")), "warning"),
        what_happened="\n".join(what), attempts=tries, next_steps=_steps(settings, att),
        commands=_commands(settings, att), evidence=_evidence(att), incident=fp,
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
        steps = ["Look at the worker log and the worktree (commands below): why did the agent "
                 "end without a fix?",
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


def _minimal(att: dict[str, Any]) -> Escalation:
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


async def escalate_attempt(settings: Any, store: Store, attempt_id: str, *,
                           metrics: Any = None, clock: Callable[[], float] = time.time
                           ) -> str | None:
    """Escalate one ended attempt if it is due; the seed file's path, or None. Never raises."""
    attempts = Attempts(store, clock)
    try:
        att = attempts.claim_escalation(attempt_id)
    except Exception:
        log.exception("could not claim the escalation of %s", attempt_id)
        return None
    if att is None:
        return None
    try:
        history = attempts.for_fingerprint(att["fingerprint"])
        record = await escalate(settings, store, build(settings, att, history), metrics=metrics)
        if record.seed_file is None:
            record = await escalate(settings, store, _minimal(att), metrics=metrics)
        if record.seed_file is None and record.issue is None:
            attempts.escalation_failed(attempt_id, "neither a seed file nor a forge issue "
                                                   "could be written (see the log)")
            return None
        seed = str(record.seed_file or "")
        attempts.escalation_done(attempt_id, seed_file=seed,
                                 issue_url=record.issue.url if record.issue else "")
        return seed
    except Exception as exc:  # an escalation never takes a worker or the loop down
        log.exception("escalation of attempt %s failed", attempt_id)
        try:
            attempts.escalation_failed(attempt_id, f"{type(exc).__name__}: {exc}")
        except Exception:
            log.exception("could not record the failed escalation of %s", attempt_id)
        return None


async def escalate_due(settings: Any, store: Store, *, metrics: Any = None,
                       clock: Callable[[], float] = time.time) -> list[str]:
    """Escalate what is still due (a worker died before it escalated, recovery settled it);
    the attempt ids escalated."""
    try:
        due = Attempts(store, clock).escalations_due()[:MAX_PER_SWEEP]
    except Exception:
        log.exception("could not list the escalations due")
        return []
    done = []
    for aid in due:
        if await escalate_attempt(settings, store, aid, metrics=metrics, clock=clock) is not None:
            done.append(aid)
    return done


def run_blocking(make: Callable[[], Coroutine[Any, Any, Any]], timeout: float = 120.0) -> Any:
    """Run a coroutine to the end from synchronous code, also when this thread already runs
    an event loop (then in a helper thread). None if it did not finish within ``timeout``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(make())
        except Exception:
            log.exception("background escalation failed")

    thread = threading.Thread(target=target, name="healer-escalate", daemon=True)
    thread.start()
    thread.join(timeout)
    return box.get("value")
