"""The scenario runner: the four checks a fix must pass before anyone sees it.

1. **Scenarios** — every scenario covering the failing file or a changed file runs its
   ``test_command`` (argv from ``shlex.split``, never a shell; cwd the fix's checkout;
   ``context.scenario_timeout_s``). A run where nothing ran is not a pass: pytest's exit 5 (no
   tests), a summary with only skips, unittest's ``Ran 0 tests`` or ``OK (skipped=N)`` with
   every test skipped, jest's "N skipped, N total", go's ``[no tests to run]``. No scenario at
   all is not a pass either (unless ``context.require_scenarios`` is false).
2. **Invariants** — each invariant about a changed file is checked: its command (exit 0 =
   holds), a ``forbid`` regex no added line may match, or a ``require`` regex every changed
   file it covers must still contain. A violated critical invariant rejects the fix.
3. **Blast radius** — the changed files plus their importers (impact map) must stay under
   ``context.max_blast_radius``.
4. **Anti-patterns** — the added lines must not repeat an anti-pattern of a past incident about
   the same files (``anti_pattern_match`` regex, else the ``code spans`` of ``anti_pattern``).

``verify`` returns a ``Verdict`` whose ``reasons`` say why a fix was rejected; those reasons are
what the next healing iteration is told.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from healer.agents.sandbox import Sandbox, run_confined
from healer.context.diff import Diff
from healer.context.layers import Invariant, Layers, PastIncident, Scenario
from healer.core import proc
from healer.errors import AgentUnavailableError

SHELL_TOKENS = frozenset({"&&", "||", "|", ";", ">", ">>", "<", "&", "2>&1", "$(", "`"})
OUTPUT_KEPT = 4000

PASSED, FAILED, SKIPPED, NO_TESTS, TIMEOUT, ERROR = (
    "passed", "failed", "skipped", "no_tests", "timeout", "error")
HELD, VIOLATED, UNCHECKED = "held", "violated", "unchecked"

_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")
_PYTEST_SUMMARY = re.compile(r"(?:\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|"
                             r"deselected|warnings?)|no tests ran)[^\n]* in [\d.]+s")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ", re.M)
_UNITTEST_SKIPS = re.compile(r"^OK \((?:[^)]*?)skipped=(\d+)", re.M)
_JEST_TESTS = re.compile(r"^Tests:\s+(.*?)(\d+) total", re.M)
_GO_NONE = re.compile(r"\[no tests to run\]|\[no test files\]")
_GO_PACKAGE = re.compile(r"^(?:ok|\?|FAIL)[ \t]+\S+[ \t].*$", re.M)
_BACKTICKED = re.compile(r"`([^`\n]{3,})`")


@dataclass
class ScenarioResult:
    id: str
    name: str
    command: str
    outcome: str
    detail: str = ""
    exit_code: int | None = None
    duration_s: float = 0.0
    output: str = ""

    @property
    def passed(self) -> bool:
        return self.outcome == PASSED


@dataclass
class InvariantResult:
    id: str
    rule: str
    severity: str
    status: str
    detail: str = ""


@dataclass
class AntiPatternHit:
    incident: str
    anti_pattern: str
    file: str
    line: int
    text: str


@dataclass
class Verdict:
    """What the runner found; ``passed`` only when there is no reason to reject."""

    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    changed_files: list[str] = field(default_factory=list)
    scenarios: list[ScenarioResult] = field(default_factory=list)
    invariants: list[InvariantResult] = field(default_factory=list)
    blast_radius: list[str] = field(default_factory=list)
    max_blast_radius: int = 5
    anti_patterns: list[AntiPatternHit] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.reasons

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["passed"] = self.passed
        out["blast_radius"] = {"count": len(self.blast_radius), "files": self.blast_radius,
                               "max": self.max_blast_radius}
        return out

    def markdown(self) -> str:
        """The verdict for a PR body or an escalation."""
        lines = [f"**Verdict: {'PASSED' if self.passed else 'REJECTED'}**", ""]
        notes = [f"- ✗ {r}" for r in self.reasons] + [f"- ⚠ {w}" for w in self.warnings]
        lines += [*notes, ""] if notes else []
        lines += ["| scenario | command | outcome |", "|---|---|---|"]
        for s in self.scenarios:
            lines.append(f"| {s.id} {s.name} | `{s.command}` | {s.outcome}"
                         + (f" ({s.detail})" if s.detail and not s.passed else "") + " |")
        if not self.scenarios:
            lines.append("| — | — | no scenario ran |")
        if self.invariants:
            lines += ["", "| invariant | severity | status |", "|---|---|---|"]
            lines += [f"| {i.id} {i.rule} | {i.severity} | {i.status}"
                      + (f": {i.detail}" if i.detail else "") + " |" for i in self.invariants]
        lines += ["", f"Blast radius: {len(self.blast_radius)} file(s) (limit: under "
                      f"{self.max_blast_radius}): " + (", ".join(self.blast_radius) or "none")]
        return "\n".join(lines)


def judge_output(code: int, output: str) -> tuple[str, str]:
    """(outcome, detail) of a test command from its exit code and output."""
    tail = output[-20_000:]
    summary = next((ln for ln in reversed(tail.splitlines()) if _PYTEST_SUMMARY.search(ln)), "")
    if code == 5 and (summary or "collected 0 items" in tail or "no tests" in tail.lower()
                      or not tail.strip()):
        return NO_TESTS, "no tests were collected or selected (pytest exit 5)"
    if summary:
        counts: dict[str, int] = {}
        for n, word in _PYTEST_COUNT.findall(summary):
            counts["error" if word.startswith("error") else word] = int(n)
        ran = sum(counts.get(k, 0) for k in ("passed", "failed", "xpassed", "xfailed", "error"))
        if code == 0 and ran == 0:
            if counts.get("skipped"):
                return SKIPPED, f"all {counts['skipped']} test(s) were skipped"
            return NO_TESTS, "no tests ran"
    ran_m = _UNITTEST_RAN.findall(tail)
    if ran_m:
        ran = int(ran_m[-1])
        if ran == 0:
            return NO_TESTS, "Ran 0 tests"
        skips = _UNITTEST_SKIPS.findall(tail)
        if code == 0 and skips and int(skips[-1]) >= ran:
            return SKIPPED, f"all {ran} test(s) were skipped"
    jest = _JEST_TESTS.findall(tail)
    if jest:
        parts, total = jest[-1]
        skipped = re.search(r"(\d+) (?:skipped|todo)", parts)
        if int(total) == 0:
            return NO_TESTS, "no tests ran"
        if code == 0 and skipped and int(skipped.group(1)) >= int(total):
            return SKIPPED, f"all {total} test(s) were skipped"
    packages = _GO_PACKAGE.findall(tail)
    if code == 0 and packages and all(_GO_NONE.search(line) for line in packages):
        return NO_TESTS, "go test found no tests to run"
    if code == 0:
        return PASSED, ""
    return FAILED, f"exit code {code}"


def split_command(command: str) -> list[str]:
    """argv of a layer's command; ``ValueError`` for quoting errors or shell syntax."""
    argv = shlex.split(command)
    if not argv:
        raise ValueError("empty command")
    bad = [t for t in argv if t in SHELL_TOKENS or t.startswith(("$(", "`"))]
    if bad:
        raise ValueError(f"{bad[0]!r} is shell syntax; commands run without a shell — wrap "
                         "several steps in a script")
    return argv


def _run(command: str, cwd: Path, timeout: float, env: Mapping[str, str],
         sandbox: Sandbox | None = None) -> tuple[str, str, int | None, float, str]:
    """(outcome, detail, exit code, seconds, output tail) of one command; in ``sandbox``
    (writing only ``cwd``; ``env`` then holds just the run's own variables) when given."""
    started = time.monotonic()
    try:
        argv = split_command(command)
    except ValueError as exc:
        return ERROR, f"bad command: {exc}", None, 0.0, ""
    try:
        if sandbox is None:
            res = proc.run(argv, timeout=timeout, cwd=cwd, env=env)
        else:
            res = run_confined(sandbox, argv, cwd=str(cwd), env=env, timeout=timeout,
                               writable=[str(cwd)])
    except AgentUnavailableError as exc:
        return ERROR, str(exc), None, 0.0, ""
    except FileNotFoundError:
        return ERROR, f"command not found: {argv[0]}", None, 0.0, ""
    except OSError as exc:
        return ERROR, f"cannot run {argv[0]}: {exc.strerror or exc}", None, 0.0, ""
    took = time.monotonic() - started
    output = (res.stdout + ("\n" + res.stderr if res.stderr else ""))
    if res.timed_out:
        return TIMEOUT, f"timed out after {timeout:g} s", None, took, output[-OUTPUT_KEPT:]
    outcome, detail = judge_output(res.returncode, output)
    return outcome, detail, res.returncode, took, output[-OUTPUT_KEPT:]


def run_scenario(s: Scenario, cwd: Path, timeout: float, env: Mapping[str, str],
                 sandbox: Sandbox | None = None) -> ScenarioResult:
    outcome, detail, code, took, output = _run(s.test_command, cwd, timeout, env, sandbox)
    return ScenarioResult(s.id, s.name, s.test_command, outcome, detail, code, round(took, 3),
                          output)


def check_invariant(inv: Invariant, diff: Diff, cwd: Path, timeout: float,
                    env: Mapping[str, str], sandbox: Sandbox | None = None
                    ) -> InvariantResult:
    base = InvariantResult(inv.id, inv.rule, inv.severity, UNCHECKED)
    chk = inv.check
    if chk is None:
        base.detail = "no check given: review by hand"
        return base
    if chk.kind == "command":
        outcome, detail, code, _, output = _run(chk.value, cwd, timeout, env, sandbox)
        if outcome == ERROR:
            base.status, base.detail = VIOLATED, detail
        else:
            held = code == 0 and outcome != TIMEOUT
            base.status = HELD if held else VIOLATED
            base.detail = "" if held else (detail or output.strip().splitlines()[-1:] or [""])[0]
        return base
    covered = [f for f in diff.files if inv.applies_to(f)]
    rx = re.compile(chk.value)
    if chk.kind == "forbid":
        for file, n, text in diff.added_lines(covered):
            if rx.search(text):
                base.status, base.detail = VIOLATED, f"{file}:{n} adds {text.strip()[:120]!r}"
                return base
        base.status = HELD
        return base
    for file in covered:  # require
        path = cwd / file
        if file in diff.deleted or not path.is_file():
            base.status, base.detail = VIOLATED, f"{file} was removed"
            return base
        if not rx.search(path.read_text(encoding="utf-8", errors="replace")):
            base.status, base.detail = VIOLATED, f"{file} no longer matches {chk.value!r}"
            return base
    base.status = HELD
    return base


def _squash(text: str) -> str:
    return " ".join(text.split())


def anti_pattern_hits(incidents: Iterable[PastIncident], diff: Diff) -> list[AntiPatternHit]:
    hits = []
    added = diff.added_lines()
    for inc in incidents:
        if inc.anti_pattern_match:
            rx = re.compile(inc.anti_pattern_match)
            found = next(((f, n, t) for f, n, t in added if rx.search(t)), None)
        else:
            snippets = [_squash(s) for s in _BACKTICKED.findall(inc.anti_pattern)]
            found = next(((f, n, t) for f, n, t in added
                          for s in snippets if s and s in _squash(t)), None)
        if found:
            hits.append(AntiPatternHit(inc.id, inc.anti_pattern, found[0], found[1],
                                       found[2].strip()[:200]))
    return hits


# What every test command gets: marked as a healing run (a test that reports an error is not
# healed in turn), and no bytecode left in the checkout.
RUN_VARS = {"HEALER_HEALING_RUN": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def scenario_env(settings: Any = None, extra: Mapping[str, str] | None = None
                 ) -> dict[str, str]:
    """What test commands run with: this environment without healer's secrets, marked as a
    healing run (so a test that reports an error is not healed in turn)."""
    from healer.agents.executors import secret_env_names
    from healer.config import Settings

    secrets_ = secret_env_names(settings if settings is not None else Settings())
    env = {k: v for k, v in os.environ.items() if k not in secrets_}
    env.update(RUN_VARS)
    env.update(extra or {})
    return env


def verify(layers: Layers, cwd: Path | str, diff: Diff, *, failing_file: str = "",
           timeout_s: float = 30.0, max_blast_radius: int = 5, require_scenarios: bool = True,
           env: Mapping[str, str] | None = None, sandbox: Sandbox | None = None) -> Verdict:
    """Run the four checks on the fix in ``cwd`` whose change is ``diff``.

    With ``sandbox`` (healing: the commands run an agent's code) every command runs confined
    like an agent, writing only ``cwd``, with ``RUN_VARS`` on the sandbox's environment
    allow-list; without, they run as the operator's own commands with ``env``."""
    cwd = Path(cwd)
    if sandbox is not None:
        env = {**RUN_VARS, **(env or {})}
    env = dict(env) if env is not None else scenario_env()
    changed = list(diff.files)
    v = Verdict(changed_files=changed, max_blast_radius=max_blast_radius)
    if not changed:
        v.reasons.append("the fix changes nothing")
    about = [f for f in {*changed, failing_file} if f]

    for s in layers.scenarios_for(about):
        v.scenarios.append(run_scenario(s, cwd, timeout_s, env, sandbox))
    for r in v.scenarios:
        if not r.passed:
            v.reasons.append(f"scenario {r.id} ({r.name}) {r.outcome}"
                             + (f": {r.detail}" if r.detail else ""))
    if not v.scenarios:
        msg = (f"no scenario covers {', '.join(sorted(about)) or 'the change'}: nothing was "
               "verified (a run where nothing ran is not a pass)")
        (v.reasons if require_scenarios else v.warnings).append(msg)

    for inv in layers.invariants_for(changed):
        res = check_invariant(inv, diff, cwd, timeout_s, env, sandbox)
        v.invariants.append(res)
        if res.status == VIOLATED:
            label = "critical invariant" if inv.critical else "invariant"
            text = f"{label} {inv.id} violated ({inv.rule})" + (
                f": {res.detail}" if res.detail else "")
            (v.reasons if inv.critical else v.warnings).append(text)
        elif res.status == UNCHECKED and inv.critical:
            v.warnings.append(f"critical invariant {inv.id} has no check: review by hand")

    v.blast_radius = layers.blast_radius(changed)
    if len(v.blast_radius) >= max_blast_radius:
        v.reasons.append(f"blast radius too large: {len(v.blast_radius)} files (changed files and "
                         f"their importers) — the limit is under {max_blast_radius}")

    relevant = [i for i in layers.incidents if not i.file or any(i.about(f) for f in about)]
    v.anti_patterns = anti_pattern_hits(relevant, diff)
    for hit in v.anti_patterns:
        v.reasons.append(f"repeats the anti-pattern of {hit.incident} ({hit.anti_pattern}) at "
                         f"{hit.file}:{hit.line}")
    return v
