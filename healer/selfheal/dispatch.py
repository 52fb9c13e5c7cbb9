"""The healing run of one accepted report: clone → agent → PR record (or why not).

``Dispatcher.run(attempt_id)`` moves an attempt from ``dispatch_pending`` to
``investigating``, makes a clone of the repository being healed on a new ``healer/…`` branch
(``healer.selfheal.worktree``), runs the ``healing-agent`` there (``HEALER_HEALING_RUN=1``,
``selfheal.timeout_s``), inspects the clone's git dir before healer runs any git command there
again, then decides:

=========================================  ==========================================
what the clone shows                       status
=========================================  ==========================================
hooks, config, ``.git`` itself, alternates ``failed`` with ``tampered`` (the findings)
or symlinks in the git dir changed         and a reason saying the git dir was
                                           tampered with; the git dir is quarantined,
                                           nothing is published
the run hit the time limit                 ``timeout``
an ``UNFIXABLE`` file                      ``unfixable`` (its text kept, sanitised)
commits, and the PR text and diff are      ``pr_open`` (PR title
clean                                      ``fix(healing): <type> in <site> [<fp12>]``)
the same, but the diff touches CI,         ``awaiting_approval``; nothing published, the
dependencies, healer's configuration or    branch kept, until a person approves
weakens tests                              (``healer.selfheal.publication``)
commits, but the validator finds secrets   ``anonymization_failed``; nothing published
or personal data in the diff or PR text
no commits, or commits whose diff holds    ``failed``; no PR, no forge call (the reason
nothing to review (empty, net zero,        names the marker files)
whitespace only, only marker files)
no commits, and the run was stopped by     ``held`` (the hold on the record): not
healer's own model access (a rejected      escalated, no breaker, no cooldown; resumed
key, a rate limit, the day's budget)       through the gate when the hold is over
=========================================  ==========================================

Every end but ``pr_open`` and ``held`` is then escalated to a person
(``healer.selfheal.escalate``: a seed file in ``.fleet-messages/human/`` and a forge issue, one
per fingerprint, updated by later failures); the attempt records the seed file as
``escalation``. An escalation that fails is logged and left for ``recover()``; it never fails
the run.

Run it in-process (``await Dispatcher(...).run(id)``) or as a detached worker process:
``python -m healer.selfheal.dispatch ATTEMPT_ID`` with the settings as JSON on stdin — that
is how ``report_error`` starts it, so the run outlives the server that accepted the report.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer.agents.results import DEFERRED
from healer.core.publish.findings import AnonymizationError
from healer.core.publish.forge import Forge, PullRequest, open_forge
from healer.core.publish.sanitizer import Sanitizer
from healer.core.store import Store
from healer.errors import GitDirTamperedError, HealerError
from healer.selfheal import attempts as st
from healer.selfheal import gitdir, publication
from healer.selfheal import worktree as wt
from healer.selfheal.attempts import Attempts, worker_identity
from healer.selfheal.runner import (
    AgentRunner,
    HealingTask,
    RunResult,
    render_prompt,
    result_path_for,
    runner_for,
)

log = logging.getLogger(__name__)

MAX_TITLE = 250
MAX_UNFIXABLE_WORDS = 500
LABELS = ("self-healing", "automated")
RUN_GRACE_S = 60.0  # on top of the agent's own limit, for git and the forge


def pr_title(error_type: str, call_site: str, fingerprint: str) -> str:
    title = f"fix(healing): {error_type} in {call_site} [{fingerprint[:12]}]"
    return title if len(title) <= MAX_TITLE else title[:MAX_TITLE - 1] + "…"


def _fence(text: str, lang: str = "text") -> str:
    ticks = "`" * max(3, max((len(r) for r in text.split("\n") if set(r) == {"`"}), default=0) + 1)
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def pr_body(att: dict[str, Any], commits: list[tuple[str, str]], diffstat: str) -> str:
    """The PR description: the sanitised report, what changed, how to review."""
    lines = [
        "## Automated fix proposed by healer",
        "",
        f"An agent reported `{att['error_type']}` in `{att['call_site']}`. A healing agent "
        "investigated it in an isolated clone and committed the change below. It was "
        "written by an automated agent: review it like any other contribution.",
        "",
        f"- fingerprint: `{att['fingerprint']}`",
        f"- attempt: `{att['attempt_id']}`",
        f"- severity: {att.get('severity', 'unknown')}",
    ]
    if att.get("tool_name"):
        lines.append(f"- tool: `{att['tool_name']}`")
    lines += ["", "### Error (sanitised)", "", _fence(att.get("error_message", ""))]
    if att.get("context"):
        lines += ["", "### Reporter's analysis (sanitised)", "", _fence(att["context"])]
    lines += ["", "### Commits", ""]
    lines += [f"- {subject} ({sha[:10]})" for sha, subject in commits]
    lines += ["", "### Files changed", "", _fence(diffstat.strip() or "(none)")]
    lines += ["", "Labels: " + ", ".join(LABELS) + ". Opened by `healer` self-healing."]
    return "\n".join(lines) + "\n"


def _cut_words(text: str, limit: int = MAX_UNFIXABLE_WORDS) -> str:
    words = text.split()
    if len(words) <= limit:
        return text.strip()
    return " ".join(words[:limit]) + " […]"


@dataclass
class Dispatcher:
    """Runs accepted attempts. ``runner``/``forge`` default to what the settings say."""

    settings: Any
    store: Store
    runner: AgentRunner | None = None
    forge: Forge | None = None
    sanitizer: Sanitizer | None = None
    clock: Any = time.time
    attempts: Attempts = field(init=False)

    def __post_init__(self) -> None:
        self.attempts = Attempts(self.store, self.clock)
        self.sanitizer = self.sanitizer or Sanitizer(
            allowed_hosts=self.settings.selfheal.allowed_hosts)
        self.runner = self.runner or runner_for(self.settings)

    def _repo(self) -> Path:
        sh = self.settings.selfheal
        return wt.repo_root(Path(sh.repo).expanduser() if sh.repo else Path.cwd())

    async def run(self, attempt_id: str) -> dict[str, Any]:
        """Take the attempt from ``dispatch_pending`` to where it ends; return the record."""
        sh = self.settings.selfheal
        now = self.clock()
        att = self.attempts.transition(
            attempt_id, st.INVESTIGATING, expect=st.DISPATCH_PENDING,
            worker=worker_identity(), started_at=now, deadline=now + sh.timeout_s)
        try:
            result = await asyncio.wait_for(self._investigate(att),
                                            timeout=sh.timeout_s + RUN_GRACE_S)
        except TimeoutError:
            result = (st.TIMEOUT, {"reason": f"time limit of {sh.timeout_s:g} s exceeded"})
        except GitDirTamperedError as exc:
            result = (st.FAILED, {"reason": self._clean(str(exc)),
                                  "tampered": [self._clean(c)[:300] for c in exc.changes]})
        except AnonymizationError as exc:
            result = (st.ANONYMIZATION_FAILED, {
                "reason": f"{exc.what} still contained personal data or secrets; nothing was "
                          "published",
                "findings": sorted({f.kind for f in exc.findings})})
        except (HealerError, OSError) as exc:
            result = (st.FAILED, {"reason": self._clean(str(exc))})
        except Exception as exc:  # a bug here must still end the attempt, never strand it
            log.exception("healing run %s crashed", attempt_id)
            result = (st.FAILED, {"reason": self._clean(f"{type(exc).__name__}: {exc}")})
        status, fields = result
        if status != st.PR_OPEN and "tampered" not in fields:
            # Ends that left the clone unlooked-at (a time limit, a crash): look now, from the
            # seal on the record, before a person is sent there.
            changes = await asyncio.to_thread(gitdir.check_recorded, (
                self.attempts.get(attempt_id) or {}).get("gitdir_seal"))
            if changes:
                exc = GitDirTamperedError(changes, where=f"the run ended {status}")
                status, fields = st.FAILED, {
                    "reason": self._clean(str(exc)),
                    "tampered": [self._clean(c)[:300] for c in changes]}
        try:
            final = self.attempts.transition(attempt_id, status, expect=st.INVESTIGATING,
                                             **fields)
        except st.TransitionError:
            return self.attempts.require(attempt_id)  # recovery settled (and escalates) it
        if status == st.AWAITING_APPROVAL and final.get("incident_id"):
            from healer.core.audit import Audit

            Audit(self.settings.state_path, self.clock).write(
                "publication_held", final["incident_id"], attempt_id=attempt_id,
                reasons=(final.get("held") or {}).get("reasons", [])[:20])
        if final.get("escalation_due"):
            from healer.selfheal.escalate import escalate_attempt

            if await escalate_attempt(self.settings, self.store, attempt_id,
                                      clock=self.clock) is not None:
                final = self.attempts.get(attempt_id) or final
        return final

    def _clean(self, text: str) -> str:
        assert self.sanitizer is not None
        return self.sanitizer.scrub(text)[:2000]

    async def _investigate(self, att: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        sh = self.settings.selfheal
        aid, fp = att["attempt_id"], att["fingerprint"]
        repo = await asyncio.to_thread(self._repo)
        if att.get("worktree"):  # resumed after a hold: the clone of the run it stopped
            await asyncio.to_thread(wt.remove, "", att["worktree"])
        tree = await asyncio.to_thread(wt.create, repo, self.settings.state_path, aid, fp,
                                       sh.base_branch)
        self.attempts.update(aid, branch=tree.branch, base=tree.base, base_sha=tree.base_sha,
                             worktree=str(tree.path), repo=str(repo),
                             gitdir_seal=tree.seal.as_dict() if tree.seal else {})
        report = {k: att.get(k, "") for k in ("error_type", "error_message", "traceback",
                                               "call_site", "context", "tool_name", "severity")}
        task = HealingTask(
            attempt_id=aid, fingerprint=fp, report=report, cwd=tree.path, branch=tree.branch,
            timeout_s=sh.timeout_s, env=await asyncio.to_thread(wt.git_identity, tree.path),
            result_path=result_path_for(self.settings.results_path.resolve(), fp, self.clock()))
        self._check_prompt(task)
        assert self.runner is not None
        try:
            outcome = await self.runner.run(task)
        except Exception:
            await asyncio.to_thread(self._inspect, tree)  # tampering says more than the error
            raise
        await asyncio.to_thread(self._inspect, tree)
        if outcome.timed_out:
            return st.TIMEOUT, {"reason": outcome.error or "time limit exceeded"}

        unfixable = await asyncio.to_thread(tree.unfixable_text)
        if unfixable is not None:
            return st.UNFIXABLE, {"unfixable_reason": self._clean(_cut_words(unfixable)),
                                  "reason": "the healing agent found this is not a code bug"}
        commits = await asyncio.to_thread(tree.commits)
        hold = outcome.detail.get("hold")
        if not commits and isinstance(hold, dict):
            # healer's own model access stopped the run (a rejected key, a rate limit, the
            # day's budget): the cause is told once by the runtime; this attempt waits.
            return st.HELD, {"hold": {**hold, "since": self.clock()}, "reason": self._why(
                "the healing run waits for healer's model access", outcome)}
        if not commits and outcome.detail.get("status") == DEFERRED:
            # The model API kept refusing (rate limit, overload), or the day's agent budget
            # is spent: not a failed attempt — no breaker, no cooldown, no escalation; the
            # next report of the error tries again. The run's own error says which.
            return st.FAILED, {"deferred": True, "reason": self._why(
                "the healing run was deferred", outcome)}
        if not commits:
            return st.FAILED, {"reason": self._why("the healing agent made no commits", outcome)}
        diff, diffstat, head = await asyncio.to_thread(
            lambda: (tree.diff(), tree.diffstat(), tree.head()))
        try:
            return await asyncio.to_thread(self._publish, att, tree, repo, commits, diff,
                                           diffstat, head)
        except wt.NothingToReviewError as exc:
            return st.FAILED, {"reason": self._why(str(exc), outcome)}

    @staticmethod
    def _inspect(tree: wt.Worktree) -> None:
        """The clone's git dir as healer made it, or the attempt ends here (quarantined)."""
        try:
            tree.require_untouched("after the agent run")
        except GitDirTamperedError:
            tree.quarantine()
            raise

    def _why(self, why: str, outcome: RunResult) -> str:
        """A failure reason, with the agent run's own error (a rate limit …) when it had one."""
        if not outcome.ok and outcome.error:
            why += f" ({self._clean(outcome.error)})"
        return self._clean(why)

    def _check_prompt(self, task: HealingTask) -> None:
        """The prompt goes to a model: validate it like anything else that leaves.

        The run's own paths are not data about anyone (and Claude Code reports its working
        directory anyway), so they are masked before the scan.
        """
        assert self.sanitizer is not None
        text = render_prompt(task)
        for path in (task.result_path.parent, task.cwd):
            text = text.replace(str(path), "<run-path>")
        self.sanitizer.ensure_publishable(text, "healing prompt")

    def _publish(self, att: dict[str, Any], tree: wt.Worktree, repo: Path,
                 commits: list[tuple[str, str]], diff: str, diffstat: str,
                 head: str) -> tuple[str, dict[str, Any]]:
        """Validate everything that would leave the machine, then open the PR."""
        assert self.sanitizer is not None
        title = pr_title(att["error_type"], att["call_site"], att["fingerprint"])
        body = pr_body(att, commits, diffstat)
        for what, text in (("PR title", title), ("PR body", body), ("diff", diff)):
            self.sanitizer.ensure_publishable(text, what)
        # The last step before the forge, and judged on the very commit the PR would carry.
        tree.require_reviewable(head)
        pr = PullRequest(
            title=title, body=body, head=tree.branch, base=tree.base, head_sha=head,
            base_sha=tree.base_sha, diff=diff, labels=LABELS, source=str(tree.path),
            meta={"attempt_id": att["attempt_id"], "fingerprint": att["fingerprint"]})
        hold = publication.check(self.settings, repo, diff)
        if hold.held:  # a person decides; the forge is not asked
            return st.AWAITING_APPROVAL, {
                **publication.held_fields(self.settings, att["attempt_id"], hold, pr),
                "head_sha": head, "commits": len(commits), "pr_title": title}
        forge = self.forge or open_forge(self.settings, repo, self.sanitizer)
        ref = forge.open_pr(pr)
        return st.PR_OPEN, {"pr_number": ref.number, "pr_url": ref.url, "head_sha": head,
                            "commits": len(commits), "pr_title": title}


def reap_worktrees(settings: Any, store: Store, *, now: float | None = None) -> list[str]:
    """Remove healing clones ``selfheal.worktree_ttl_s`` after their attempt ended.

    The branch goes too, unless a PR uses it, and so does the worker's log. Returns the attempt
    ids reaped. The loop calls this periodically.
    """
    attempts = Attempts(store)
    now = time.time() if now is None else now
    ttl = settings.selfheal.worktree_ttl_s
    reaped = []
    for att in attempts.with_worktree():
        ended = att.get("ended_at")
        if not att.get("worktree") or att.get("worktree_removed_at") or ended is None:
            continue
        if now - ended < ttl:
            continue
        if att["status"] == st.AWAITING_APPROVAL:
            continue  # its clone holds the fix a person has yet to judge
        keep_branch = att["status"] in (st.PR_OPEN, st.PR_MERGED)
        wt.remove(att.get("repo") or "", att["worktree"],
                  branch=att.get("branch", ""), delete_branch=not keep_branch)
        (settings.state_path / "selfheal" / "logs" / f"{att['attempt_id']}.log").unlink(
            missing_ok=True)
        attempts.update(att["attempt_id"], worktree_removed_at=now)
        reaped.append(att["attempt_id"])
    return reaped


def main(argv: list[str] | None = None) -> int:
    """Worker entry: ``python -m healer.selfheal.dispatch ATTEMPT_ID`` (settings JSON on stdin)."""
    from healer.config import load_settings
    from healer.core.store import open_store
    from healer.log import setup

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m healer.selfheal.dispatch ATTEMPT_ID < settings.json",
              file=sys.stderr)
        return 2
    snapshot = json.loads(sys.stdin.read() or "{}")
    settings = load_settings(overrides=snapshot, env={}) if snapshot else load_settings()
    setup(settings.log.level, settings.log.format)
    store = open_store(settings)
    try:
        final = asyncio.run(Dispatcher(settings, store).run(args[0]))
    except st.TransitionError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    log.info("attempt %s ended: %s", args[0], final["status"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
