"""The heal loop: agent in a clone → scenario runner → PR, or an escalation after N tries.

::

    admitted incident ─► clone healer/<fp12>-<id> from the base branch (healer.selfheal.worktree)
        └─► iteration i (1 … context.max_iterations):
              living-context-healer (executor runtime, cwd = the clone, the living context
              and the previous iteration's rejection in its prompt)
              → the clone's git dir is inspected (tampered: stop, escalate, publish nothing)
              → tracked changes it left uncommitted are committed for it
              → the commits are verified in a checkout of their own with the base branch's
                tests and scenarios (verify_commit, healer.selfheal.checks)
              → passed: git dir inspected again → sanitiser validation → forge draft PR
                → incident fixed
                (a diff touching CI, dependencies, healer's configuration or weakening
                tests waits for a person first: attempt awaiting_approval, no PR until
                approved — healer.selfheal.publication)
        └─► every iteration rejected, or the agent says unfixable/escalated
              → escalation (seed file, forge issue, Discord) → incident escalated
        └─► a run stopped by healer's own model access (a rejected key, a rate limit, the
            day's budget; healer.agents.limits.held_by)
              → attempt held, incident still healing; no escalation of its own (the
              runtime told the cause once); resumed through the gate when the hold is over

Either way the attempt (``heal-attempts``, shared with report_error) ends, incident memory gains
an entry, and every step is in the audit trail. A tampered git dir ends the attempt ``failed``
with ``tampered`` (the findings) on the record and a ``git_dir_tampered`` audit event; the
clone's git dir is quarantined. The clone is kept for the reviewer (the selfheal reaper removes
it after ``selfheal.worktree_ttl_s``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer.agents.executors import secret_env_names
from healer.agents.limits import held_by, holds
from healer.agents.results import DEFERRED
from healer.agents.sandbox import sandbox_for
from healer.context import outcomes
from healer.context.diff import diff_of
from healer.context.incidents import ESCALATED, FIXED, IncidentBook
from healer.context.ingest import NormalizedError
from healer.context.layers import LayerError, Layers, append_memory
from healer.context.outcomes import Iteration
from healer.context.prompt import context_vars, iteration_vars
from healer.context.scenarios import Verdict, verify
from healer.core import gate
from healer.core import verify as core_verify
from healer.core.escalation import escalate
from healer.core.git import git
from healer.core.publish.findings import AnonymizationError
from healer.core.publish.forge import Forge, PullRequest, open_forge
from healer.core.store import Store
from healer.core.verify import GIVE_UP, next_step
from healer.errors import GitDirTamperedError, HealerError
from healer.selfheal import attempts as st
from healer.selfheal import checks, gitdir, publication
from healer.selfheal import worktree as wt
from healer.selfheal.attempts import worker_identity
from healer.selfheal.dispatch import pr_title

log = logging.getLogger(__name__)

AGENT = "living-context-healer"
STOP_STATUSES = ("unfixable", "escalated")


@dataclass
class HealOutcome:
    incident: str
    attempt_id: str
    # fixed | escalated | failed | stopped (resolved at its source) | awaiting_approval
    # | deferred | held (healer's model access is held; resumed later)
    status: str
    iterations: list[Iteration] = field(default_factory=list)
    pr_url: str = ""
    reason: str = ""
    seed_file: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"incident": self.incident, "attempt_id": self.attempt_id, "status": self.status,
                "iterations": [i.as_dict() for i in self.iterations], "pr_url": self.pr_url,
                "reason": self.reason, "seed_file": self.seed_file}


def commit_leftovers(tree: wt.Worktree, iteration: int) -> bool:
    """Commit tracked changes the agent left uncommitted; untracked files are not the fix.
    (After ``tree.require_untouched()``: these are work-tree commands.)"""
    gd = tree.git_dir
    if not git(tree.path, "status", "--porcelain", "--untracked-files=no",
               "--ignore-submodules=all", git_dir=gd).stdout.strip():
        return False
    git(tree.path, "add", "-u", git_dir=gd)
    git(tree.path, "commit", "--quiet", "--no-verify", "-m",
        f"healer: changes the healing agent left uncommitted (iteration {iteration})",
        env=wt.git_identity(tree.path), git_dir=gd)
    return True


def verdict_of(it: Iteration) -> core_verify.Verdict:
    """The code kind's verdict on one iteration: its commits passed the scenarios in a clean
    checkout (healed), the agent said it cannot be fixed here (give up), or try again."""
    if it.passed:
        return core_verify.Verdict(core_verify.HEALED, "the fix passed verification")
    if it.agent_status in STOP_STATUSES:
        return core_verify.Verdict(GIVE_UP, f"the agent reported {it.agent_status}: "
                                   f"{it.agent_summary or it.agent_error or 'no reason given'}")
    return core_verify.Verdict(core_verify.RETRY, "; ".join(it.reasons) or "not verified")


def verify_commit(layers: Layers, tree: wt.Worktree, sha: str, label: str, *, settings: Any,
                  failing_file: str) -> Verdict:
    """Verify ``sha`` with the base branch's checks, in a checkout of its own.

    The checkout holds the commit's changes to everything but its checks (tests, scenario
    matrices, the living context: ``healer.selfheal.checks``), which stay as on the base
    commit — a fix cannot pass by editing what judges it. The invariants, blast radius and
    anti-patterns see the whole diff, the one the PR carries. The agent's changes to checks
    that were left out are named in the verdict's warnings (and reasons, when it failed).
    """
    cx = settings.context
    diff = diff_of(tree.path, tree.base_sha, git_dir=tree.git_dir)
    path = tree.path.parent / f"verify-{label}"
    wt.remove("", path)  # what a crashed run may have left
    checkout = checks.base_checks_checkout(
        tree, sha, path, check_dirs=checks.repo_dirs(tree.repo, [cx.dir]))
    try:
        verdict = verify(layers, path, diff, failing_file=failing_file,
                         timeout_s=cx.scenario_timeout_s, max_blast_radius=cx.max_blast_radius,
                         require_scenarios=cx.require_scenarios,
                         sandbox=sandbox_for(settings, secrets=secret_env_names(settings)))
    finally:
        wt.remove("", path)
    note = checkout.note()
    if note:
        verdict.warnings.append(note)
        if not verdict.passed:
            verdict.reasons.append(note)
    return verdict


class ContextHealer:
    """Runs admitted incidents to a verified fix or an escalation."""

    def __init__(self, settings: Any, store: Store, book: IncidentBook, *,
                 executor: Any = None, forge: Forge | None = None, metrics: Any = None,
                 dispatcher: Any = None, clock: Any = time.time):
        self.settings = settings
        self.store = store
        self.book = book
        self.executor = executor  # an Executor (tests) or None: the settings' choice
        self.dispatcher = dispatcher  # the loop's (bus attached); else made on first use
        self.forge = forge
        self.metrics = metrics
        self.clock = clock
        self.sanitizer = book.sanitizer

    # --- which agent runs --------------------------------------------------------------------

    def available(self) -> bool | str:
        """Whether a living-context-healer can run here (the gate's last question): True,
        or the gate's reason why not (``no_model``, ``no_sandbox``)."""
        if self.executor is not None:
            # An executor of its own (a test's, a rotated key's): only a stop marker that
            # holds for its credential says no (``healer.agents.limits``).
            env = getattr(self.executor, "run_environment", None)
            if callable(env) and holds(self.settings, env()) is not None:
                return gate.NO_MODEL
            return True
        from healer.agents.executors import availability

        return availability(self.settings, AGENT) or True

    async def _dispatch(self, task: Any, env: dict[str, str]) -> Any:
        """One agent run through the dispatcher; its outcome is the result on the bus."""
        if self.dispatcher is None:
            from healer.agents import dispatcher

            self.dispatcher = dispatcher(self.settings)
        return await self.dispatcher.run(task, executor=self.executor, env=env)

    # --- the run -------------------------------------------------------------------------------

    def _repo(self) -> Path:
        sh = self.settings.selfheal
        return wt.repo_root(Path(sh.repo).expanduser() if sh.repo else Path.cwd())

    async def heal(self, key: str) -> HealOutcome:
        """Heal the incident ``key`` (admitted: status healing, with an attempt)."""
        inc = self.book.get(key)
        if inc is None or not inc.get("attempt_id"):
            raise HealerError(f"incident {key} has no admitted attempt")
        aid = inc["attempt_id"]
        cx = self.settings.context
        now = self.clock()
        budget = cx.max_iterations * (cx.agent_timeout_s + 4 * cx.scenario_timeout_s + 60)
        self.book.attempts.transition(aid, st.INVESTIGATING, expect=st.DISPATCH_PENDING,
                                      worker=worker_identity(), started_at=now,
                                      deadline=now + budget)
        self.book.audit.write("heal_started", key, attempt_id=aid)
        try:
            out = await self._run(inc, aid)
        except asyncio.CancelledError:
            self._end(aid, st.FAILED, reason="the healing run was cancelled (healer stopped)")
            self.book.update(key, status="open", event="heal_cancelled")
            raise
        except AnonymizationError as exc:  # the error text still holds personal data
            self._end(aid, st.ANONYMIZATION_FAILED, reason=f"{exc.what} contained personal "
                      "data or secrets; no agent was given it",
                      findings=sorted({f.kind for f in exc.findings}))
            out = await self._give_up(inc, aid, [], f"{exc.what} still contained personal data "
                                      "or secrets after scrubbing; nothing was sent to a model",
                                      None, end=False)
        except Exception as exc:  # a bug or a broken repo must still end the attempt
            log.exception("living-context heal of %s crashed", key)
            why = self.sanitizer.scrub(f"{type(exc).__name__}: {exc}")[:1000]
            out = await self._give_up(inc, aid, [], f"the healing run failed: {why}", None)
        self.book.audit.write("heal_finished", key, attempt_id=aid, status=out.status,
                              iterations=len(out.iterations), pr_url=out.pr_url,
                              reason=out.reason)
        if self.metrics is not None:
            self.metrics.remediations.labels(outcome=f"context-{out.status}").inc()
        return out

    async def _run(self, inc: dict[str, Any], aid: str) -> HealOutcome:
        cx, sh = self.settings.context, self.settings.selfheal
        try:
            layers = await asyncio.to_thread(Layers.load, cx.dir)
        except LayerError as exc:
            return await self._give_up(inc, aid, [], f"the living context is invalid: {exc}",
                                       None)
        error = NormalizedError.from_dict(inc["error"])
        for text in (error.message, error.stack_trace, *error.sentry.get("breadcrumbs", [])):
            self.sanitizer.ensure_publishable(text, "healing prompt")
        repo = await asyncio.to_thread(self._repo)
        earlier = (self.book.attempts.get(aid) or {}).get("worktree")
        if earlier:  # resumed after a hold: the clone of the run it stopped
            await asyncio.to_thread(wt.remove, "", earlier)
        tree = await asyncio.to_thread(wt.create, repo, self.settings.state_path, aid,
                                       inc["fingerprint"], sh.base_branch)
        self.book.attempts.update(aid, branch=tree.branch, base=tree.base,
                                  base_sha=tree.base_sha, worktree=str(tree.path),
                                  repo=str(repo),
                                  gitdir_seal=tree.seal.as_dict() if tree.seal else {})
        iterations: list[Iteration] = []
        try:
            return await self._iterate(inc, aid, tree, repo, layers, error, iterations)
        except GitDirTamperedError as exc:
            return await self._give_up(inc, aid, iterations, str(exc), tree,
                                       tampered=exc.changes)

    async def _iterate(self, inc: dict[str, Any], aid: str, tree: wt.Worktree, repo: Path,
                       layers: Layers, error: NormalizedError, iterations: list[Iteration]
                       ) -> HealOutcome:
        cx = self.settings.context
        env = {**wt.git_identity(tree.path), "HEALER_HEALING_RUN": "1",
               "HEALER_ATTEMPT_ID": aid}
        fc = layers.for_file(error.file)
        base_vars = context_vars(error, fc, max_blast_radius=cx.max_blast_radius)
        previous = ""
        for n in range(1, cx.max_iterations + 1):
            if self.book.ledger.should_stop(self.book._id(inc["key"])):
                # The source said it cleared: no more attempts, nothing to tell a person.
                self._end(aid, st.FAILED, reason="the incident was resolved at its source "
                          "during the healing run", iterations=len(iterations), stopped=True)
                self.book.audit.write("stopped", inc["key"], attempt_id=aid,
                                      reason="resolved at its source")
                return HealOutcome(inc["key"], aid, "stopped", iterations,
                                   reason="resolved at its source")
            it = await self._iteration(inc, aid, n, tree, layers, error, env, base_vars,
                                       previous)
            iterations.append(it)
            if it.hold is not None:  # earlier iterations were rejected: nothing is lost
                return self._held(inc, aid, iterations, it.hold)
            if it.agent_status == DEFERRED and not it.commits:
                return self._deferred(inc, aid, iterations)
            verdict = verdict_of(it)
            step = next_step(verdict, n, cx.max_iterations)
            if step == "healed":
                return await self._publish(inc, aid, tree, repo, iterations)
            if verdict.outcome == GIVE_UP:
                return await self._give_up(inc, aid, iterations, verdict.reason, tree)
            if step == "escalate":
                break
            previous = "\n".join(f"- {r}" for r in it.reasons)
            if it.agent_error:
                previous += f"\n- the agent run itself reported: {it.agent_error[:500]}"
        last = "; ".join(iterations[-1].reasons) if iterations else "no iteration ran"
        return await self._give_up(inc, aid, iterations, f"no fix passed verification in "
                                   f"{len(iterations)} iteration(s); the last was rejected "
                                   f"because {last}", tree)

    async def _iteration(self, inc: dict[str, Any], aid: str, n: int, tree: wt.Worktree,
                         layers: Layers, error: NormalizedError, env: dict[str, str],
                         base_vars: dict[str, Any], previous: str) -> Iteration:
        from healer.agents.task import AgentTask

        cx = self.settings.context
        key = inc["key"]
        self.book.audit.write("iteration_started", key, attempt_id=aid, iteration=n)
        # An attempt resumed after a hold runs its iterations again: under run ids of their own.
        holds_before = sum(1 for h in (self.book.attempts.get(aid) or {}).get("history", [])
                           if h.get("status") == st.HELD)
        run_id = f"{aid}-r{holds_before}-i{n}" if holds_before else f"{aid}-i{n}"
        task = AgentTask(
            agent=AGENT, target=key, kind="context", incident=key, run_id=run_id,
            cwd=str(tree.path), timeout_s=cx.agent_timeout_s, context=iteration_vars(
                base_vars, iteration=n, max_iterations=cx.max_iterations,
                previous_failure=previous, branch=tree.branch))
        try:
            outcome = await self._dispatch(task, env)
        except Exception:
            # A tampered git dir says more than whatever else went wrong.
            await asyncio.to_thread(tree.require_untouched, f"after iteration {n}")
            raise
        result = outcome.result or {}
        it = Iteration(number=n, agent_status=outcome.status,
                       agent_summary=self.sanitizer.scrub(str(result.get("summary", "")))[:2000],
                       agent_error=self.sanitizer.scrub(outcome.error or "")[:2000])
        it.hold = held_by(outcome.result)
        self.book.audit.write("agent_finished", key, attempt_id=aid, iteration=n,
                              status=outcome.status, run_id=outcome.run_id, error=it.agent_error)
        # Before any other git command of healer's in the clone (GitDirTamperedError ends it).
        await asyncio.to_thread(tree.require_untouched, f"after iteration {n}")
        if it.agent_status in STOP_STATUSES:
            return it
        if it.hold is not None:
            return it  # the run was stopped short: nothing of it to commit or verify
        await asyncio.to_thread(commit_leftovers, tree, n)
        commits = await asyncio.to_thread(tree.commits)
        it.commits = len(commits)
        if not commits:
            it.reasons = ["the agent committed no change"]
            it.verdict = {}
        elif (why_not := await asyncio.to_thread(tree.unreviewable)) is not None:
            it.reasons = [why_not]  # markers, whitespace, net zero: nothing a PR could show
            it.verdict = {}
        else:
            head = await asyncio.to_thread(tree.head)
            verdict = await asyncio.to_thread(
                verify_commit, layers, tree, head, f"{aid}-i{n}", settings=self.settings,
                failing_file=error.file)
            it.reasons, it.warnings = list(verdict.reasons), list(verdict.warnings)
            it.verdict = verdict.as_dict()
            it.markdown = verdict.markdown()
        self.book.audit.write("verdict", key, attempt_id=aid, iteration=n, passed=it.passed,
                              reasons=it.reasons, warnings=it.warnings)
        return it

    # --- endings -------------------------------------------------------------------------------

    def _held(self, inc: dict[str, Any], aid: str, iterations: list[Iteration],
              hold: dict[str, Any]) -> HealOutcome:
        """healer's own model access stopped the run: the attempt waits (``held``), the
        incident stays healing, nobody is told about this attempt (the runtime told the
        cause once); ``ContextService.watch`` resumes it when the hold is over."""
        why = self.sanitizer.scrub(f"the healing run waits for healer's model access: "
                                   f"{iterations[-1].agent_error}")[:1000]
        try:
            self.book.attempts.transition(aid, st.HELD, expect=st.INVESTIGATING, reason=why,
                                          hold={**hold, "since": self.clock()},
                                          iterations=len(iterations))
        except st.TransitionError:
            log.warning("attempt %s was settled elsewhere; not holding it", aid)
        self.book.audit.write("heal_held", inc["key"], attempt_id=aid,
                              code=str(hold.get("code", "")), reason=why)
        return HealOutcome(inc["key"], aid, "held", iterations, reason=why)

    def _deferred(self, inc: dict[str, Any], aid: str,
                  iterations: list[Iteration]) -> HealOutcome:
        """The agent run did not happen (the model API kept refusing, or the day's agent
        budget is spent): not a failed attempt — no breaker, no cooldown, no escalation; the
        incident stays open and the next signal tries again."""
        why = f"the healing run was deferred: {iterations[-1].agent_error}"[:1000]
        self._end(aid, st.FAILED, reason=why, deferred=True, iterations=len(iterations))
        self.book.update(inc["key"], status="open", event="heal_deferred")
        return HealOutcome(inc["key"], aid, "deferred", iterations, reason=why)

    def _end(self, aid: str, status: str, **fields: Any) -> None:
        try:
            self.book.attempts.transition(aid, status, expect=st.INVESTIGATING, **fields)
        except st.TransitionError:
            log.warning("attempt %s was settled elsewhere; not moving it to %s", aid, status)

    def _settle(self, key: str, status: str, event: str, **fields: Any) -> None:
        """Move the incident on, unless its source resolved it meanwhile (that stays)."""
        self.book.settle(key, status, event, **fields)

    def _remember(self, inc: dict[str, Any], entry: dict[str, Any]) -> None:
        try:
            append_memory(self.settings.context.dir, entry)
            self.book.audit.write("memory", inc["key"], entry=entry["id"])
        except (LayerError, OSError) as exc:
            log.error("incident memory not updated for %s: %s", inc["key"], exc)
            self.book.audit.write("memory_failed", inc["key"], reason=str(exc)[:500])

    async def _publish(self, inc: dict[str, Any], aid: str, tree: wt.Worktree, repo: Path,
                       iterations: list[Iteration]) -> HealOutcome:
        it = iterations[-1]
        # The scenarios ran the agent's code: look again before healer reads the branch.
        await asyncio.to_thread(tree.require_untouched, "before publishing")
        commits, diff, diffstat, head = await asyncio.to_thread(
            lambda: (tree.commits(), tree.diff(), tree.diffstat(), tree.head()))
        err = inc["error"]
        title = pr_title(inc.get("error_type") or "error", err.get("file") or inc["call_site"],
                         inc["fingerprint"])
        body = outcomes.pr_body(inc, aid, it, it.markdown, commits, diffstat)
        try:
            own = (inc["key"], inc["fingerprint"], aid, tree.branch)
            for what, text in (("PR title", title), ("PR body", body), ("diff", diff)):
                self.sanitizer.ensure_publishable(text, what, own=own)
            # The last step before the forge, on the very commit the PR would carry.
            await asyncio.to_thread(tree.require_reviewable, head)
            pr = PullRequest(
                title=title, body=body, head=tree.branch, base=tree.base, head_sha=head,
                base_sha=tree.base_sha, diff=diff, labels=outcomes.LABELS,
                source=str(tree.path), meta={"attempt_id": aid,
                                             "fingerprint": inc["fingerprint"],
                                             "incident": inc["key"]})
            hold = publication.check(self.settings, repo, diff)
            if hold.held:  # a person decides; the forge is not asked
                return self._hold(inc, aid, tree, iterations, hold, pr, commits)
            forge = self.forge or open_forge(self.settings, repo, self.sanitizer)
            ref = await asyncio.to_thread(forge.open_pr, pr)
        except AnonymizationError as exc:
            self._end(aid, st.ANONYMIZATION_FAILED, reason=f"{exc.what} contained personal data "
                      "or secrets; nothing was published",
                      findings=sorted({f.kind for f in exc.findings}))
            return await self._give_up(inc, aid, iterations, f"the verified fix could not be "
                                       f"published: {exc.what} contained personal data or "
                                       "secrets", tree, end=False)
        except wt.NothingToReviewError as exc:
            return await self._give_up(inc, aid, iterations, str(exc), tree)
        self._end(aid, st.PR_OPEN, pr_number=ref.number, pr_url=ref.url, head_sha=head,
                  commits=len(commits), pr_title=title, iterations=len(iterations))
        fix = {"pr_url": ref.url, "pr_number": ref.number, "branch": tree.branch,
               "head_sha": head, "iterations": len(iterations), "at": self.clock(),
               "attempt_id": aid}
        self._settle(inc["key"], FIXED, "fixed", fix=fix)
        self.book.audit.write("pr_opened", inc["key"], attempt_id=aid, pr_url=ref.url,
                              iterations=len(iterations))
        self._remember(inc, outcomes.memory_entry(inc, aid, iterations, success=True,
                                                  pr_url=ref.url, commits=commits,
                                                  now=self.clock()))
        return HealOutcome(inc["key"], aid, "fixed", iterations, pr_url=ref.url)

    def _hold(self, inc: dict[str, Any], aid: str, tree: wt.Worktree,
              iterations: list[Iteration], hold: Any, pr: PullRequest,
              commits: list[tuple[str, str]]) -> HealOutcome:
        """A verified fix whose diff a person must see first: kept, not published."""
        reasons = hold.reasons()
        self._end(aid, st.AWAITING_APPROVAL, head_sha=pr.head_sha, commits=len(commits),
                  pr_title=pr.title, iterations=len(iterations),
                  **publication.held_fields(self.settings, aid, hold, pr))
        fix = {"held": True, "branch": tree.branch, "head_sha": pr.head_sha,
               "iterations": len(iterations), "at": self.clock(), "attempt_id": aid}
        self.book.ledger.held(self.book._id(inc["key"]), aid, reasons, fix=fix)
        self._remember(inc, outcomes.memory_entry(inc, aid, iterations, success=True,
                                                  commits=commits, now=self.clock()))
        return HealOutcome(inc["key"], aid, "awaiting_approval", iterations,
                           reason="; ".join(reasons)[:2000])

    async def _give_up(self, inc: dict[str, Any], aid: str, iterations: list[Iteration],
                       why: str, tree: wt.Worktree | None, *, end: bool = True,
                       tampered: list[str] | None = None) -> HealOutcome:
        if tampered is None:
            # The last look before a person is sent to the clone (scenarios ran code there;
            # a crash may have left no Worktree at hand: the seal is on the record).
            changes = await asyncio.to_thread(
                tree.inspect if tree is not None else lambda: gitdir.check_recorded(
                    (self.book.attempts.get(aid) or {}).get("gitdir_seal")))
            if changes:
                tampered, why = changes, str(GitDirTamperedError(changes, where="at the end"))
        found: list[str] = []
        if tampered:
            if tree is not None:
                await asyncio.to_thread(tree.quarantine)
            found = [self.sanitizer.scrub(c)[:300] for c in tampered]
            self.book.audit.write("git_dir_tampered", inc["key"], attempt_id=aid,
                                  changes=found)
        why = self.sanitizer.scrub(why)[:2000]
        esc = outcomes.escalation(inc, aid, iterations, why,
                                  repo=str(tree.repo) if tree else "",
                                  branch=tree.branch if tree else "",
                                  base_sha=tree.base_sha if tree else "",
                                  clone=str(tree.path) if tree else str(
                                      (self.book.attempts.get(aid) or {}).get("worktree", "")),
                                  tampered=found)
        record = await escalate(self.settings, self.store, esc, metrics=self.metrics)
        if end:
            extra = {"tampered": found} if found else {}
            self._end(aid, st.FAILED, reason=f"escalated: {why}"[:2000],
                      iterations=len(iterations), **extra)
        seed = str(record.seed_file or "")
        self._settle(inc["key"], ESCALATED, "escalated", escalation={
            "reason": why, "seed_file": seed, "issue_url": record.issue.url if record.issue
            else "", "at": self.clock(), "attempt_id": aid})
        self.book.audit.write("escalated", inc["key"], attempt_id=aid, reason=why,
                              seed_file=seed, iterations=len(iterations))
        self._remember(inc, outcomes.memory_entry(inc, aid, iterations, success=False,
                                                  now=self.clock()))
        return HealOutcome(inc["key"], aid, "escalated", iterations, reason=why, seed_file=seed)

