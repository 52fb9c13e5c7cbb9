"""The one attempt flow of a code fix: clone → iterate(agent, verification) → PR, or why not.

Every source ends here — ``report_error`` (``healer.selfheal.dispatch``) and Sentry,
Alertmanager, Slack and Loki (``healer.context.heal``) are intake adapters that build a
``CodeSignal``, say how to run the agent, and call ``run_attempt``::

    attempt dispatch_pending ─► investigating; a clone healer/<fp12>-<id> of the base commit
        └─► iteration n (1 … code.max_iterations): the agent (prompts/code-fix.md.j2, with
              the living context when the repository has one, and the last rejection)
              → the clone's git dir is inspected (tampered: stop, publish nothing)
              → tracked changes it left uncommitted are committed for it
              → reproduce → fix → verify (healer.code.verification) on the branch's head
              → verified: git dir inspected again → sanitiser → forge draft PR
              → rejected: the reasons go to the next iteration

=========================================  ==========================================
what the clone shows                       status
=========================================  ==========================================
hooks, config, ``.git`` itself, alternates ``failed`` with ``tampered`` (the findings);
or symlinks in the git dir changed         the git dir is quarantined, nothing published
the run hit its time limit                 ``timeout``
an ``UNFIXABLE`` file, or the agent        ``unfixable`` (its reasoning kept, sanitised)
reported ``unfixable``/``escalated``
every iteration failed to reproduce the    ``unfixable``: "could not reproduce", with the
error (no test added, or one that does     agent's reasoning — never a guess (but an
not fail for the reported reason)          iteration that edited existing tests: ``failed``)
a verified fix whose PR text and diff are  ``pr_open`` (title ``fix(healing): <type> in
clean                                      <site> [<fp12>]``, body with before/after runs)
the same, but the diff touches CI,         ``awaiting_approval``; nothing published until
dependencies, healer's configuration or    a person approves (``healer.selfheal.publication``)
weakens tests
a fix carrying secrets or personal data    ``anonymization_failed``; nothing published
no commits; commits with nothing to       ``failed`` (the verification's reasons on the
review (markers, whitespace, net zero);    record); no PR, no forge call
every iteration rejected (a wrong fix)
no new commits, and the run was stopped    ``held``: not escalated, no breaker, no
by healer's own model access (a rejected   cooldown; resumed through the gate when the
key, a rate limit, the day's budget)       hold is over, in a fresh clone
the model API kept refusing (deferred)     ``failed`` with ``deferred``: no breaker, no
                                           cooldown, no escalation
=========================================  ==========================================

The record (``heal-attempts``) gains ``source``, ``iterations`` (``{n, verdict, reasons}``),
``reproduction`` and ``verification`` (the contract's RUN dicts), ``reason`` and, with a PR,
``pr_url``, ``pr_number``, ``branch``, ``head_sha``, ``base_sha``, ``repo``. A bug here still
ends the attempt (``failed``), never strands it. The adapter then does what its intake owes:
escalation, incident ledger, incident memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer.agents.executors import secret_env_names
from healer.agents.results import DEFERRED
from healer.agents.sandbox import sandbox_for
from healer.code import testcmd
from healer.code.verification import (
    EDITS_CHECKS,
    NO_REPRODUCTION,
    NOT_REPRODUCED,
    Verification,
    verify_fix,
)
from healer.context.layers import Layers
from healer.core.git import git
from healer.core.publish.findings import AnonymizationError
from healer.core.publish.forge import Forge, PullRequest, open_forge
from healer.core.publish.sanitizer import Sanitizer
from healer.core.store import Store
from healer.errors import AttemptLostError, GitDirTamperedError, HealerError
from healer.selfheal import attempts as st
from healer.selfheal import checks, gitdir, publication
from healer.selfheal import worktree as wt
from healer.selfheal.attempts import Attempts, worker_identity
from healer.selfheal.ownership import AttemptLease

log = logging.getLogger(__name__)

MAX_TITLE = 250
MAX_UNFIXABLE_WORDS = 500
LABELS = ("self-healing", "automated")
LIVING_LABEL = "living-context"
STOP_STATUSES = ("unfixable", "escalated")
GRACE_S = 60.0  # per iteration, on top of the agent's and the tests' limits: git, the forge


@dataclass(frozen=True)
class CodeSignal:
    """One error to fix, as every intake hands it over (already sanitised).

    ``report``: error_type, error_message, traceback, call_site, context, tool_name, severity.
    ``file``: the failing file, repository-relative ("" unknown). ``incident``: the
    living-context incident key (context intake). ``error``/``sentry``: the normalised error
    and what Sentry sent (the living context's prompt block)."""

    attempt_id: str
    fingerprint: str
    source: str  # report_error | sentry | alertmanager | slack | loki
    report: Mapping[str, str]
    file: str = ""
    incident: str = ""
    error: Mapping[str, Any] = field(default_factory=dict)
    sentry: Mapping[str, Any] = field(default_factory=dict)

    @property
    def error_type(self) -> str:
        return self.report.get("error_type", "") or "error"

    @property
    def site(self) -> str:
        return self.report.get("call_site", "") or self.file or "an unknown place"


@dataclass(frozen=True)
class AgentRequest:
    """One agent run of an attempt: where, how long, and its template variables."""

    iteration: int
    run_id: str
    cwd: Path
    branch: str
    timeout_s: float
    env: Mapping[str, str]
    context: Mapping[str, Any]  # prompts/code-fix.md.j2's variables


@dataclass(frozen=True)
class AgentRun:
    """How an agent run ended (the clone tells what it did)."""

    status: str  # the result's status (fixed, unfixable, …) or failed/timeout/deferred
    error: str = ""
    summary: str = ""
    timed_out: bool = False
    hold: dict[str, Any] | None = None  # healer.agents.limits.held_by


AgentCall = Callable[[AgentRequest], Awaitable[AgentRun]]


@dataclass
class AttemptEnd:
    """Where the attempt ended, for the intake adapter's bookkeeping."""

    status: str
    record: dict[str, Any]
    iterations: list[dict[str, Any]] = field(default_factory=list)
    tree: wt.Worktree | None = None
    commits: list[tuple[str, str]] = field(default_factory=list)
    living: bool = False
    summary: str = ""  # the last agent run's own summary (sanitised)

    @property
    def reason(self) -> str:
        return str(self.record.get("reason") or "")


def living_context(settings: Any) -> Layers | None:
    """The repository's living context, or None: a context folder without a layer file is
    no living context. ``LayerError`` when a layer file is invalid."""
    layers = Layers.load(settings.context.dir)
    return layers if layers.files_read else None


def pr_title(error_type: str, call_site: str, fingerprint: str) -> str:
    title = f"fix(healing): {error_type} in {call_site} [{fingerprint[:12]}]"
    return title if len(title) <= MAX_TITLE else title[:MAX_TITLE - 1] + "…"


def _fence(text: str, lang: str = "text") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def pr_body(signal: CodeSignal, commits: list[tuple[str, str]], diffstat: str,
            verification: Verification, *, iteration: int, summary: str = "",
            living: bool = False) -> str:
    """The PR description: the sanitised report, the before/after runs, what changed."""
    r = signal.report
    lines = [
        "## Automated fix proposed by healer",
        "",
        f"{'An agent' if signal.source == 'report_error' else f'A {signal.source} signal'} "
        f"reported `{signal.error_type}` in `{signal.site}`. A healing agent wrote a test that "
        "reproduces it and fixed the code in an isolated clone"
        + (" with the project's living context" if living else "")
        + f"; healer verified the fix on iteration {iteration} with the test on the base "
        "commit and the project's test suite in a clean checkout. It was written by an "
        "automated agent: review it like any other contribution.",
        "",
        f"- source: {signal.source}",
        f"- fingerprint: `{signal.fingerprint}`",
        f"- attempt: `{signal.attempt_id}`",
        f"- severity: {r.get('severity') or 'unknown'}",
    ]
    if signal.incident:
        lines.append(f"- incident: `{signal.incident}`")
    if r.get("tool_name"):
        lines.append(f"- tool: `{r['tool_name']}`")
    if signal.sentry.get("issue_url"):
        lines.append(f"- Sentry issue: {signal.sentry['issue_url']}")
    lines += ["", "### Error (sanitised)", "", _fence(r.get("error_message", ""))]
    if r.get("context"):
        lines += ["", "### Reporter's analysis (sanitised)", "", _fence(r["context"])]
    if summary:
        lines += ["", "### The agent's summary", "", _fence(summary)]
    lines += ["", verification.markdown().rstrip()]
    if verification.scenarios is not None:
        from healer.context.scenarios import Verdict

        lines += ["", "### Living context", "", _verdict_md(Verdict, verification.scenarios)]
    lines += ["", "### Commits", ""]
    lines += [f"- {subject} ({sha[:10]})" for sha, subject in commits]
    lines += ["", "### Files changed", "", _fence(diffstat.strip() or "(none)")]
    labels = (*LABELS, LIVING_LABEL) if living else LABELS
    lines += ["", "Labels: " + ", ".join(labels) + ". Opened by `healer` self-healing."]
    return "\n".join(lines) + "\n"


def _verdict_md(verdict_cls: Any, data: Mapping[str, Any]) -> str:
    from healer.context.scenarios import InvariantResult, ScenarioResult

    v = verdict_cls(reasons=list(data.get("reasons") or []),
                    warnings=list(data.get("warnings") or []),
                    scenarios=[ScenarioResult(**s) for s in data.get("scenarios") or []],
                    invariants=[InvariantResult(**i) for i in data.get("invariants") or []],
                    blast_radius=list((data.get("blast_radius") or {}).get("files") or []),
                    max_blast_radius=int((data.get("blast_radius") or {}).get("max") or 5))
    return str(v.markdown())


def _cut_words(text: str, limit: int = MAX_UNFIXABLE_WORDS) -> str:
    words = text.split()
    return text.strip() if len(words) <= limit else " ".join(words[:limit]) + " […]"


def commit_leftovers(tree: wt.Worktree, iteration: int) -> bool:
    """Commit tracked changes the agent left uncommitted, and the new test files it wrote
    (its reproduction); other untracked files are not the fix. (After
    ``tree.require_untouched()``: these are work-tree commands.)"""
    gd = tree.git_dir
    new_tests = [p for p in git(tree.path, "ls-files", "--others", "--exclude-standard", "-z",
                                git_dir=gd).stdout.split("\0")
                 if p and checks.is_check(p) and testcmd.is_test_file(p)
                 and not (tree.path / p).is_symlink()]
    if not new_tests and not git(tree.path, "status", "--porcelain", "--untracked-files=no",
                                 "--ignore-submodules=all", git_dir=gd).stdout.strip():
        return False
    git(tree.path, "add", "-u", git_dir=gd)
    for i in range(0, len(new_tests), checks.MAX_PATHS_PER_CALL):
        git(tree.path, "add", "--", *[f":(literal){p}" for p in
                                      new_tests[i:i + checks.MAX_PATHS_PER_CALL]], git_dir=gd)
    git(tree.path, "commit", "--quiet", "--no-verify", "-m",
        f"healer: changes the healing agent left uncommitted (iteration {iteration})",
        env=wt.git_identity(tree.path), git_dir=gd)
    return True


def prompt_vars(signal: CodeSignal, layers: Layers | None, *, branch: str, iteration: int,
                max_iterations: int, previous_failure: str, max_blast_radius: int
                ) -> dict[str, Any]:
    """prompts/code-fix.md.j2's variables: the report, the living context when there is one
    (``living`` None otherwise), the iteration and the last rejection."""
    from healer.agents.context import ErrorReport

    r = signal.report
    report = ErrorReport(
        error_type=r.get("error_type", ""), error_message=r.get("error_message", ""),
        fingerprint=signal.fingerprint, traceback=r.get("traceback", ""),
        call_site=r.get("call_site", ""), context=r.get("context", ""),
        tool_name=r.get("tool_name", ""), severity=r.get("severity", ""))
    out: dict[str, Any] = {"report": report, "branch": branch, "source": signal.source,
                           "living": None, "sentry": dict(signal.sentry),
                           "max_blast_radius": max_blast_radius}
    if layers is not None:
        from healer.context.ingest import NormalizedError
        from healer.context.prompt import context_vars

        error = NormalizedError.from_dict(dict(signal.error)) if signal.error else \
            NormalizedError(message=r.get("error_message", ""), file=signal.file,
                            stack_trace=r.get("traceback", ""), source=signal.source,
                            error_type=r.get("error_type", ""))
        out.update(context_vars(error, layers.for_file(error.file or signal.file),
                                max_blast_radius=max_blast_radius))
    out.update(iteration=iteration, max_iterations=max_iterations,
               previous_failure=previous_failure)
    return out


@dataclass
class _Run:
    """What one attempt gathered so far (the record's fields at the end)."""

    tree: wt.Worktree | None = None
    iterations: list[dict[str, Any]] = field(default_factory=list)
    verification: Verification | None = None
    commits: list[tuple[str, str]] = field(default_factory=list)
    living: bool = False
    summary: str = ""


@dataclass
class CodeAttempt:
    """Runs one admitted code attempt to its end (see the module's table)."""

    settings: Any
    store: Store
    run_agent: AgentCall
    agent_timeout_s: float
    sanitizer: Sanitizer
    forge: Forge | None = None
    audit: Callable[..., None] = lambda *_a, **_k: None
    should_stop: Callable[[], bool] = lambda: False  # the source resolved it meanwhile
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        self.attempts = Attempts(self.store, self.clock)

    def _clean(self, text: str, limit: int = 2000) -> str:
        return self.sanitizer.scrub(text)[:limit]

    def _budget(self) -> float:
        code, cx = self.settings.code, self.settings.context
        per = self.agent_timeout_s + 3 * code.test_timeout_s + 4 * cx.scenario_timeout_s
        return code.max_iterations * (per + GRACE_S)

    async def run(self, signal: CodeSignal) -> AttemptEnd:
        """Own the attempt through its lease (``healer.selfheal.ownership``) while it runs;
        ``AttemptLostError`` when another run holds it or takes it over meanwhile — then
        this run has stopped and written nothing more."""
        aid = signal.attempt_id
        lease = AttemptLease.for_settings(self.settings, self.store, aid, self.clock)
        if not await asyncio.to_thread(lease.take):
            raise AttemptLostError(aid, None, None)
        try:
            return await self._owned(signal, lease)
        finally:
            await asyncio.to_thread(lease.release)

    async def _owned(self, signal: CodeSignal, lease: AttemptLease) -> AttemptEnd:
        aid = signal.attempt_id
        now, budget = self.clock(), self._budget()
        self.attempts.transition(aid, st.INVESTIGATING, expect=st.DISPATCH_PENDING,
                                 worker=worker_identity(), started_at=now,
                                 deadline=now + budget, source=signal.source,
                                 owner=lease.owner())
        self.attempts.fence(aid, lease.token)
        task, loop = asyncio.current_task(), asyncio.get_running_loop()
        assert task is not None
        lease.keep(lambda: loop.call_soon_threadsafe(task.cancel))
        self.audit("heal_started", attempt_id=aid, source=signal.source)
        state = _Run()
        try:
            status, fields = await asyncio.wait_for(self._investigate(signal, state),
                                                    timeout=budget)
        except AttemptLostError:
            raise
        except TimeoutError:
            status, fields = st.TIMEOUT, {"reason": f"time limit of {budget:g} s exceeded"}
        except GitDirTamperedError as exc:
            status, fields = st.FAILED, {"reason": self._clean(str(exc)),
                                         "tampered": [self._clean(c, 300) for c in exc.changes]}
        except AnonymizationError as exc:
            status, fields = st.ANONYMIZATION_FAILED, {
                "reason": f"{exc.what} still contained personal data or secrets; nothing was "
                          "published", "findings": sorted({f.kind for f in exc.findings})}
        except asyncio.CancelledError:
            if lease.lost.is_set():  # taken over: the attempt is another run's now
                raise AttemptLostError(aid, lease.token, None) from None
            self._end(aid, st.FAILED, {"reason": "the healing run was cancelled (healer "
                                       "stopped)", "iterations": state.iterations})
            raise
        except (HealerError, OSError) as exc:
            status, fields = st.FAILED, {"reason": self._clean(str(exc))}
        except Exception as exc:  # a bug here must still end the attempt, never strand it
            log.exception("healing run %s crashed", aid)
            status, fields = st.FAILED, {"reason": self._clean(f"{type(exc).__name__}: {exc}")}
        if status != st.PR_OPEN and "tampered" not in fields:
            # Ends that left the clone unlooked-at (a time limit, a crash): look now, from the
            # seal on the record, before a person is sent there.
            changes = await asyncio.to_thread(gitdir.check_recorded, (
                self.attempts.get(aid) or {}).get("gitdir_seal"))
            if changes:
                exc2 = GitDirTamperedError(changes, where=f"the run ended {status}")
                status, fields = st.FAILED, {"reason": self._clean(str(exc2)),
                                             "tampered": [self._clean(c, 300) for c in changes]}
        if fields.get("tampered"):
            if state.tree is not None:
                await asyncio.to_thread(state.tree.quarantine)
            self.audit("git_dir_tampered", attempt_id=aid, changes=fields["tampered"])
        fields["iterations"] = state.iterations
        if state.verification is not None:
            fields["reproduction"] = state.verification.reproduction_dict()
            fields["verification"] = state.verification.verification_dict()
        final = self._end(aid, status, fields)
        self.audit("heal_finished", attempt_id=aid, status=final.get("status", status),
                   iterations=len(state.iterations), pr_url=final.get("pr_url", ""),
                   reason=str(final.get("reason") or "")[:500])
        return AttemptEnd(str(final.get("status", status)), final, state.iterations,
                          state.tree, state.commits, state.living, state.summary)

    def _end(self, aid: str, status: str, fields: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.attempts.transition(aid, status, expect=st.INVESTIGATING, **fields)
        except st.TransitionError:
            log.warning("attempt %s was settled elsewhere; not moving it to %s", aid, status)
            return self.attempts.require(aid)  # recovery settled (and escalates) it

    async def _investigate(self, signal: CodeSignal, state: _Run
                           ) -> tuple[str, dict[str, Any]]:
        aid, code = signal.attempt_id, self.settings.code
        for text in (*signal.report.values(), *signal.sentry.get("breadcrumbs", [])):
            self.sanitizer.ensure_publishable(str(text), "healing prompt")
        layers = await asyncio.to_thread(living_context, self.settings)
        state.living = layers is not None
        sh = self.settings.selfheal
        repo = await asyncio.to_thread(
            wt.repo_root, Path(sh.repo).expanduser() if sh.repo else Path.cwd())
        earlier = (self.attempts.get(aid) or {}).get("worktree")
        if earlier:  # resumed after a hold: the clone of the run it stopped
            await asyncio.to_thread(wt.remove, "", earlier)
        tree = await asyncio.to_thread(wt.create, repo, self.settings.state_path, aid,
                                       signal.fingerprint, sh.base_branch)
        state.tree = tree
        self.attempts.update(aid, branch=tree.branch, base=tree.base, base_sha=tree.base_sha,
                             worktree=str(tree.path), repo=str(repo),
                             gitdir_seal=tree.seal.as_dict() if tree.seal else {})
        test_argv = testcmd.test_command(code, tree.path) if code.test_command else None
        env = {**wt.git_identity(tree.path), "HEALER_HEALING_RUN": "1",
               "HEALER_ATTEMPT_ID": aid}
        holds_before = sum(1 for h in (self.attempts.get(aid) or {}).get("history", [])
                           if h.get("status") == st.HELD)
        previous = ""
        for n in range(1, code.max_iterations + 1):
            if self.should_stop():
                return st.FAILED, {"reason": "the incident was resolved at its source during "
                                   "the healing run", "stopped": True}
            # An attempt resumed after a hold runs its iterations again, under ids of their own.
            run_id = f"{aid}-r{holds_before}-i{n}" if holds_before else f"{aid}-i{n}"
            self.audit("iteration_started", attempt_id=aid, iteration=n)
            req = AgentRequest(n, run_id, tree.path, tree.branch, self.agent_timeout_s, env,
                               prompt_vars(signal, layers, branch=tree.branch, iteration=n,
                                           max_iterations=code.max_iterations,
                                           previous_failure=previous,
                                           max_blast_radius=self.settings.context
                                           .max_blast_radius))
            before = await asyncio.to_thread(tree.commits)
            try:
                run = await self.run_agent(req)
            except Exception:
                await asyncio.to_thread(self._inspect, tree, n)  # tampering says more
                raise
            await asyncio.to_thread(self._inspect, tree, n)
            state.summary = self._clean(run.summary)
            self.audit("agent_finished", attempt_id=aid, iteration=n, status=run.status,
                       run_id=run_id, error=self._clean(run.error, 500))
            entry: dict[str, Any] = {"n": n, "agent_status": run.status}
            state.iterations.append(entry)
            if run.timed_out:
                entry.update(verdict="timeout", reasons=[self._clean(run.error or
                                                                     "time limit exceeded")])
                return st.TIMEOUT, {"reason": entry["reasons"][0]}
            unfixable = await asyncio.to_thread(tree.unfixable_text)
            if unfixable is not None or run.status in STOP_STATUSES:
                why = unfixable if unfixable is not None else (run.summary or run.error
                                                               or "no reason given")
                entry.update(verdict="unfixable", reasons=[self._clean(_cut_words(why), 500)])
                said = "wrote UNFIXABLE" if unfixable is not None else f"reported {run.status}"
                return st.UNFIXABLE, {"unfixable_reason": self._clean(_cut_words(why)),
                                      "reason": self._clean(f"the agent {said}: "
                                                            f"{' '.join(why.split())[:300]}")}
            commits = await asyncio.to_thread(tree.commits)
            if commits == before and run.hold is not None:
                # healer's own model access stopped the run: the cause is told once by the
                # runtime; this attempt waits (earlier iterations' rejections are not lost).
                entry.update(verdict="held", reasons=[])
                return st.HELD, {"hold": {**run.hold, "since": self.clock()},
                                 "reason": self._why("the healing run waits for healer's "
                                                     "model access", run)}
            if not commits and run.status == DEFERRED:
                entry.update(verdict="deferred", reasons=[])
                return st.FAILED, {"deferred": True,
                                   "reason": self._why("the healing run was deferred", run)}
            await asyncio.to_thread(commit_leftovers, tree, n)
            commits = await asyncio.to_thread(tree.commits)
            if not commits:
                entry.update(verdict="rejected", reasons=["the healing agent made no commits"])
                return st.FAILED, {"reason": self._why("the healing agent made no commits",
                                                       run)}
            why_not = await asyncio.to_thread(tree.unreviewable)
            if why_not is not None:  # markers, whitespace, net zero: nothing a PR could show
                entry.update(verdict="rejected", reasons=[self._clean(why_not)])
                return st.FAILED, {"reason": self._why(why_not, run)}
            head = await asyncio.to_thread(tree.head)
            v = await asyncio.to_thread(self._verify, signal, tree, head, f"{aid}-i{n}",
                                        layers, test_argv)
            state.verification = v
            entry.update(verdict=v.verdict, reasons=list(v.reasons))
            self.audit("verdict", attempt_id=aid, iteration=n, passed=v.passed,
                       reasons=v.reasons, warnings=v.warnings)
            if v.passed:
                # The tests ran the agent's code: look again before healer reads the branch.
                await asyncio.to_thread(tree.require_untouched, "before publishing")
                return await asyncio.to_thread(self._publish, signal, tree, repo, v, n, state)
            self.attempts.update(aid, iterations=state.iterations)
            previous = "\n".join(f"- {r}" for r in entry["reasons"])
            if run.error:
                previous += f"\n- the agent run itself reported: {self._clean(run.error, 500)}"
        return self._rejected(state)

    def _rejected(self, state: _Run) -> tuple[str, dict[str, Any]]:
        """Every iteration rejected: could not reproduce (unfixable), or a wrong fix. A change
        to the tests that judge it is a wrong fix, whatever else it lacked: it ends failed."""
        reasons = [r for it in state.iterations for r in it.get("reasons", [])]
        last = "; ".join(state.iterations[-1].get("reasons", [])) if state.iterations else ""
        cheated = any(r.startswith(EDITS_CHECKS) for r in reasons)
        never = bool(state.iterations) and not cheated and all(
            any(r.startswith((NO_REPRODUCTION, NOT_REPRODUCED)) for r in it.get("reasons", []))
            for it in state.iterations)
        if never and reasons:
            return st.UNFIXABLE, {
                "reason": self._clean(f"could not reproduce the reported error in "
                                      f"{len(state.iterations)} iteration(s): {last}"),
                "unfixable_reason": self._clean(_cut_words(
                    state.summary or "the agent gave no reasoning"))}
        return st.FAILED, {"reason": self._clean(
            f"no fix passed verification in {len(state.iterations)} iteration(s); the last was "
            f"rejected because {last or 'of nothing recorded'}")}

    def _verify(self, signal: CodeSignal, tree: wt.Worktree, head: str, label: str,
                layers: Layers | None, test_argv: list[str] | None) -> Verification:
        cx, code = self.settings.context, self.settings.code
        return verify_fix(
            tree, head, label, error_type=signal.report.get("error_type", ""),
            test_argv=test_argv, timeout_s=code.test_timeout_s, clean=self.sanitizer.scrub,
            sandbox=sandbox_for(self.settings, secrets=secret_env_names(self.settings)),
            layers=layers, check_dirs=checks.repo_dirs(tree.repo, [cx.dir]),
            failing_file=signal.file, scenario_timeout_s=cx.scenario_timeout_s,
            max_blast_radius=cx.max_blast_radius, require_scenarios=cx.require_scenarios)

    @staticmethod
    def _inspect(tree: wt.Worktree, n: int) -> None:
        """The clone's git dir as healer made it, or the attempt ends here (quarantined)."""
        try:
            tree.require_untouched(f"after iteration {n}")
        except GitDirTamperedError:
            tree.quarantine()
            raise

    def _why(self, why: str, run: AgentRun) -> str:
        """A failure reason, with the agent run's own error (a rate limit …) when it had one."""
        if run.error and run.status not in ("fixed", "ok"):
            why += f" ({self._clean(run.error)})"
        return self._clean(why)

    def _publish(self, signal: CodeSignal, tree: wt.Worktree, repo: Path, v: Verification,
                 n: int, state: _Run) -> tuple[str, dict[str, Any]]:
        """Validate everything that would leave the machine, then open the PR."""
        commits, diff, diffstat, head = tree.commits(), tree.diff(), tree.diffstat(), tree.head()
        state.commits = commits
        where = signal.site if signal.source == "report_error" else signal.file or signal.site
        title = pr_title(signal.error_type, where, signal.fingerprint)
        body = pr_body(signal, commits, diffstat, v, iteration=n, summary=state.summary,
                       living=state.living)
        own = tuple(x for x in (signal.incident, signal.fingerprint, signal.attempt_id,
                                tree.branch) if x)
        for what, text in (("PR title", title), ("PR body", body), ("diff", diff)):
            self.sanitizer.ensure_publishable(text, what, own=own)
        # The last step before the forge, and judged on the very commit the PR would carry.
        tree.require_reviewable(head)
        labels = (*LABELS, LIVING_LABEL) if state.living else LABELS
        meta = {"attempt_id": signal.attempt_id, "fingerprint": signal.fingerprint}
        if signal.incident:
            meta["incident"] = signal.incident
        pr = PullRequest(title=title, body=body, head=tree.branch, base=tree.base,
                         head_sha=head, base_sha=tree.base_sha, diff=diff, labels=labels,
                         source=str(tree.path), meta=meta)
        where = {"head_sha": head, "base_sha": tree.base_sha, "branch": tree.branch,
                 "repo": str(repo), "commits": len(commits), "pr_title": title}
        hold = publication.check(self.settings, repo, diff)
        if hold.held:  # a person decides; the forge is not asked
            return st.AWAITING_APPROVAL, {
                **publication.held_fields(self.settings, signal.attempt_id, hold, pr), **where}
        forge = self.forge or open_forge(self.settings, repo, self.sanitizer)
        ref = forge.open_pr(pr)
        return st.PR_OPEN, {"pr_number": ref.number, "pr_url": ref.url, **where}


async def run_attempt(settings: Any, store: Store, signal: CodeSignal, run_agent: AgentCall, *,
                      agent_timeout_s: float, sanitizer: Sanitizer, forge: Forge | None = None,
                      audit: Callable[..., None] | None = None,
                      should_stop: Callable[[], bool] | None = None,
                      clock: Callable[[], float] = time.time) -> AttemptEnd:
    """Run the admitted attempt ``signal.attempt_id`` (``dispatch_pending``) to its end."""
    flow = CodeAttempt(settings, store, run_agent, agent_timeout_s, sanitizer, forge,
                       audit or (lambda *_a, **_k: None), should_stop or (lambda: False), clock)
    return await flow.run(signal)
