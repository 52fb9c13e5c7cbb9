"""Reproduce, then fix, then verify: the one rule a code fix must pass, whatever its source.

The agent writes a failing test from the report (the reproduction) and fixes the code,
committing both. ``verify_fix`` then decides, on the commit the PR would carry:

1. **Split.** The agent's change is split into checks (``healer.selfheal.checks.is_check``)
   and the rest. The reproduction is the test files the agent *added*. Editing or deleting an
   existing test or scenario rejects the fix ("the fix edits the tests that judge it"); no
   added test rejects it ("no reproduction").
2. **Reproduce on base.** In a clean checkout of the base commit plus only the added tests,
   the reproduction must fail — for the reported reason: its output names the reported
   exception type (when the report names one). Else: "does not reproduce".
3. **Baseline.** The project's test command (``healer.code.testcmd``) on the base commit.
4. **Verify.** In a clean checkout of base + the agent's non-check changes + the added tests:
   the reproduction must pass, no test that passed on base may fail, and the living context's
   scenarios, invariants, blast radius and anti-patterns must hold when the repository has a
   living context (``healer.context.scenarios.verify``).

Every command runs in the agent sandbox (``healer.agents.sandbox``: it runs the agent's code)
with ``code.test_timeout_s``; checkouts are clones of their own, removed afterwards. The
result serialises to the attempt record (``reproduction``, ``verification``: each run as
``{exit, passed, failed, timed_out, output}``, the output a trimmed, scrubbed tail) and renders
the PR body's "Reproduction (before the fix)" and "Verification (after the fix)" sections.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer.agents.sandbox import Sandbox, run_confined
from healer.code import testcmd
from healer.context.diff import Diff, diff_of
from healer.context.layers import Layers
from healer.context.scenarios import RUN_VARS
from healer.context.scenarios import verify as verify_scenarios
from healer.core.git import git
from healer.errors import AgentUnavailableError, HealerError
from healer.selfheal import checks, gitdir
from healer.selfheal import worktree as wt

OUTPUT_KEPT = 4000
SHOWN_IN_PR = 1500
_EXCEPTION_LIKE = re.compile(r"(Error|Exception|Exit|Interrupt|Fault|Panic|Failure)$")

EDITS_CHECKS = "the fix edits the tests that judge it"
NO_REPRODUCTION = "no reproduction: the change adds no test that fails without the fix"
NOT_REPRODUCED = "does not reproduce"


@dataclass
class Run:
    """One test run: how it ended, its counts (None: the output did not say) and its tail."""

    exit: int | None
    passed: int | None = None
    failed: int | None = None
    timed_out: bool = False
    output: str = ""
    failed_names: list[str] = field(default_factory=list)
    error: str = ""  # the command could not start (no sandbox, not found)

    @property
    def ok(self) -> bool:
        return self.exit == 0 and not self.timed_out and not self.error

    def as_dict(self) -> dict[str, Any]:
        return {"exit": self.exit, "passed": self.passed, "failed": self.failed,
                "timed_out": self.timed_out, "output": self.output}

    def summary(self) -> str:
        if self.error:
            return self.error
        if self.timed_out:
            return "timed out"
        counts = ", ".join(f"{n} {w}" for n, w in ((self.passed, "passed"),
                                                   (self.failed, "failed")) if n is not None)
        return f"exit {self.exit}" + (f" ({counts})" if counts else "")


@dataclass
class Verification:
    """What ``verify_fix`` found; ``passed`` only without a reason to reject."""

    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # the reproduction
    command: list[str] = field(default_factory=list)
    reproduction_before: Run | None = None
    reproduced: bool = False
    reproduction_after: Run | None = None
    suite_before: Run | None = None
    suite_after: Run | None = None
    scenarios: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return not self.reasons

    @property
    def verdict(self) -> str:
        return "verified" if self.passed else "rejected"

    def reproduction_dict(self) -> dict[str, Any]:
        before = self.reproduction_before
        return {"files": list(self.files), "before": before.as_dict() if before else None,
                "reproduced": self.reproduced}

    def verification_dict(self) -> dict[str, Any]:
        def d(r: Run | None) -> dict[str, Any] | None:
            return r.as_dict() if r else None

        return {"passed": self.passed, "reasons": list(self.reasons),
                "warnings": list(self.warnings),
                "reproduction_after": d(self.reproduction_after),
                "suite_before": d(self.suite_before), "suite_after": d(self.suite_after),
                "command": list(self.command), "scenarios": self.scenarios}

    def markdown(self) -> str:
        """The PR body's before/after sections (the outputs already scrubbed and trimmed)."""
        cmd = " ".join(self.command) or "(none)"
        lines = ["### Reproduction (before the fix)", "",
                 f"The agent added {', '.join(f'`{f}`' for f in self.files) or 'no test'}; on "
                 "the base commit with only those tests added, they fail:", ""]
        lines += _run_lines("reproduction", self.reproduction_before)
        lines += _run_lines(f"test suite (`{cmd}`) on base", self.suite_before)
        lines += ["### Verification (after the fix)", "",
                  "In a clean checkout of the base commit, the fix's non-test changes and the "
                  "added tests:", ""]
        lines += _run_lines("reproduction", self.reproduction_after)
        lines += _run_lines(f"test suite (`{cmd}`)", self.suite_after)
        if self.scenarios is not None:
            ran = self.scenarios.get("scenarios") or []
            ok = sum(1 for s in ran if s.get("outcome") == "passed")
            lines += [f"Living-context scenarios: {ok} of {len(ran)} passed; invariants, blast "
                      "radius and anti-patterns held.", ""]
        lines += [f"- ⚠ {w}" for w in self.warnings]
        return "\n".join(lines).rstrip() + "\n"


def _fence(text: str) -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}text\n{text.rstrip()}\n{ticks}"


def _run_lines(what: str, run: Run | None) -> list[str]:
    if run is None:
        return [f"- {what}: not run", ""]
    out = [f"- {what}: {run.summary()}", ""]
    if run.output.strip():
        out += [_fence(run.output[-SHOWN_IN_PR:]), ""]
    return out


def mentions(output: str, error_type: str) -> bool:
    """Whether a failing reproduction failed for the reported reason: its output names the
    reported exception type. A type that is no exception name (an alert's name) asks
    nothing."""
    etype = error_type.strip()
    short = re.split(r"[.:]", etype)[-1] if etype else ""
    if not short or not _EXCEPTION_LIKE.search(short):
        return True
    return etype in output or short in output


def _run(sandbox: Sandbox, argv: Sequence[str], cwd: Path, timeout: float,
         clean: Callable[[str], str]) -> Run:
    try:
        res = run_confined(sandbox, list(argv), cwd=str(cwd), env=dict(RUN_VARS),
                           timeout=timeout, writable=[str(cwd)])
    except AgentUnavailableError as exc:
        return Run(None, error=clean(str(exc))[:500])
    except FileNotFoundError:
        return Run(None, error=f"command not found: {argv[0]}")
    except OSError as exc:
        return Run(None, error=clean(f"cannot run {argv[0]}: {exc.strerror or exc}")[:500])
    output = res.stdout + ("\n" + res.stderr if res.stderr else "")
    counts = testcmd.parse_counts(output)
    tail = clean(output.replace(str(cwd), "<checkout>"))[-OUTPUT_KEPT:]
    if res.timed_out:
        return Run(None, counts.passed, counts.failed, True, tail, counts.failed_names)
    return Run(res.returncode, counts.passed, counts.failed, False, tail, counts.failed_names)


def _checkout_files(dest: Path, sha: str, files: Sequence[str]) -> None:
    for i in range(0, len(files), checks.MAX_PATHS_PER_CALL):
        chunk = [f":(literal){p}" for p in files[i:i + checks.MAX_PATHS_PER_CALL]]
        git(dest, "checkout", "--quiet", sha, "--", *chunk, git_dir=dest / gitdir.GIT_NAME)


def _without(diff: Diff, left_out: Sequence[str]) -> Diff:
    """The diff less the added tests: what the living context's checks judge."""
    drop = set(left_out)
    return Diff(files=[f for f in diff.files if f not in drop],
                added={f: v for f, v in diff.added.items() if f not in drop},
                deleted=[f for f in diff.deleted if f not in drop], text=diff.text)


def _suite_regressions(before: Run, after: Run) -> list[str]:
    """Why the suite with the fix is less green than on base ([] when it is not)."""
    if after.error:
        return [f"the test suite could not run with the fix: {after.error}"]
    if after.timed_out and not before.timed_out:
        return ["the test suite timed out with the fix (it did not on base)"]
    if after.ok:
        return []
    if before.ok:
        return [f"the test suite passed on base and fails with the fix ({after.summary()})"]
    new = sorted(set(after.failed_names) - set(before.failed_names))
    if new:
        shown = ", ".join(new[:10]) + (f" and {len(new) - 10} more" if len(new) > 10 else "")
        return [f"tests that passed on base fail with the fix: {shown}"]
    if after.failed is not None and before.failed is not None and after.failed > before.failed:
        return [f"more tests fail with the fix ({after.failed}) than on base ({before.failed})"]
    return []


def verify_fix(tree: wt.Worktree, head: str, label: str, *, error_type: str,
               test_argv: Sequence[str] | None, sandbox: Sandbox, timeout_s: float,
               clean: Callable[[str], str], layers: Layers | None = None,
               check_dirs: Sequence[str] = (), failing_file: str = "",
               scenario_timeout_s: float = 30.0, max_blast_radius: int = 5,
               require_scenarios: bool = True) -> Verification:
    """Judge ``head`` of the agent's clone ``tree`` by the rule above (blocking).

    ``test_argv``: the project's test command (None: detect it in the checkout). ``layers``:
    the living context, when the repository has one. ``clean`` scrubs what is kept. Call
    ``tree.require_untouched()`` first: the checkouts are cloned from the agent's clone.
    """
    v = Verification()
    changed = checks._changed(tree, head)
    edited = sorted(p for s, p in changed if s != "A" and checks.is_check(p, check_dirs))
    added = sorted(p for s, p in changed if s == "A" and checks.is_check(p, check_dirs))
    v.files = [p for p in added if testcmd.is_test_file(p)
               and not any(p == d or p.startswith(d.rstrip("/") + "/") for d in check_dirs)]
    if edited:
        shown = ", ".join(edited[:10]) + (f" and {len(edited) - 10} more"
                                          if len(edited) > 10 else "")
        v.reasons.append(f"{EDITS_CHECKS} ({shown}): a fix may add tests, not change or "
                         "delete the existing ones")
    if not v.files:
        v.reasons.append(NO_REPRODUCTION)
    if v.reasons:
        return v

    before = tree.path.parent / f"verify-{label}-before"
    after = tree.path.parent / f"verify-{label}-after"
    for path in (before, after):
        wt.remove("", path)  # what a crashed run may have left
    try:
        wt.clone(tree.path, before, tree.base_sha)
        _checkout_files(before, head, added)
        argv = list(test_argv) if test_argv else testcmd.detect(before)
        if not argv:
            v.reasons.append("no test command: set code.test_command (none of pytest, npm test, "
                             "go test, cargo test was detected)")
            return v
        v.command = argv
        repro = testcmd.targeted(argv, v.files)
        v.reproduction_before = _run(sandbox, repro, before, timeout_s, clean)
        rb = v.reproduction_before
        if rb.error:
            v.reasons.append(f"the reproduction could not run: {rb.error}")
            return v
        if rb.ok or rb.timed_out:
            v.reasons.append(f"{NOT_REPRODUCED}: the added tests "
                             + ("time out" if rb.timed_out else "pass")
                             + " on the base commit, so they do not show the reported error")
            return v
        if not mentions(rb.output, error_type):
            v.reasons.append(f"{NOT_REPRODUCED}: the added tests fail on the base commit, but "
                             f"not with the reported {error_type}")
            return v
        v.reproduced = True
        # The baseline: the base commit as it is (the added tests taken out again).
        git(before, "rm", "--quiet", "--force", "--ignore-unmatch", "--",
            *[f":(literal){p}" for p in added], git_dir=before / gitdir.GIT_NAME)
        v.suite_before = _run(sandbox, argv, before, timeout_s, clean)

        checkout = checks.base_checks_checkout(tree, head, after, check_dirs=check_dirs)
        _checkout_files(after, head, added)
        v.reproduction_after = _run(sandbox, repro, after, timeout_s, clean)
        if not v.reproduction_after.ok:
            v.reasons.append("the reproduction still fails with the fix "
                             f"({v.reproduction_after.summary()})")
        v.suite_after = _run(sandbox, argv, after, timeout_s, clean)
        v.reasons += _suite_regressions(v.suite_before, v.suite_after)
        if layers is not None:
            diff = _without(diff_of(tree.path, tree.base_sha, git_dir=tree.git_dir), added)
            verdict = verify_scenarios(
                layers, after, diff, failing_file=failing_file, timeout_s=scenario_timeout_s,
                max_blast_radius=max_blast_radius, require_scenarios=require_scenarios,
                sandbox=sandbox)
            v.scenarios = verdict.as_dict()
            for s in v.scenarios.get("scenarios") or []:
                s["output"] = clean(str(s.get("output") or ""))[-OUTPUT_KEPT:]
            v.reasons += verdict.reasons
            v.warnings += verdict.warnings
        note = checkout.note()
        if note and set(checkout.left_out) - set(added):
            v.warnings.append(note)
        return v
    except HealerError as exc:
        v.reasons.append(clean(f"verification could not run: {exc}")[:1000])
        return v
    finally:
        for path in (before, after):
            shutil.rmtree(path, ignore_errors=True)
