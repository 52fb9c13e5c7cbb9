"""Run fixtures × replays: a fresh repository, healer's real intake, the hidden check, a grade.

One case (``run_case``):

1. copy the fixture's ``repo/`` into a new git repository on ``main`` (one commit, a committer
   identity), in a temporary folder of its own;
2. settings confined to that folder: its own state, results and fleet dirs, ``selfheal.repo``
   = the new repository, the local forge (PR records under ``<state>/forge``), every severity
   healed;
3. the agent: ``scripted`` runs the real Claude Code CLI against a scripted model replaying
   the fixture's replay (``evals/scripted.py``, loaded by path); any other executor name
   (``claude`` with ``ANTHROPIC_API_KEY``, ``command`` …) runs as configured;
4. ``drive``: the report through the intake, the attempt to its end;
5. the hidden check, in the agent sandbox, on the PR head (or, without a PR, on the agent's
   last commit, to tell a caught wrong fix from a missed correct one): the commit's files,
   ``hidden/`` copied over them, the language's test runner on the hidden files;
6. the grade (``grade``), with turns, cost and time.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from healer.code.eval import drive, grade
from healer.code.eval.fixtures import Fixture
from healer.core.git import git
from healer.errors import HealerError, UsageError
from healer.resources import bundle_root

SCRIPTED = "scripted"
MODEL_REPLAY = "model"  # what a real model's case is called: it plays no replay
HIDDEN_TIMEOUT_S = 120.0
OUTPUT_TAIL = 2000
IDENTITY = {"GIT_AUTHOR_NAME": "Eval", "GIT_AUTHOR_EMAIL": "eval@example.com",
            "GIT_COMMITTER_NAME": "Eval", "GIT_COMMITTER_EMAIL": "eval@example.com"}
# The scripted model is on loopback; nothing else may be reached, and nothing retried.
QUIET_CLAUDE_ENV = {
    "CLAUDE_CODE_MAX_RETRIES": "0", "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
}


@dataclass
class CaseResult:
    """One fixture × replay, graded."""

    fixture: str
    replay: str
    expected: str          # the fixture's right answer
    want: str              # the grade this replay should earn
    grade: str
    status: str            # the attempt's final status
    reason: str = ""
    pr_url: str = ""
    hidden: str = "not run"  # passed | failed | not run
    hidden_output: str = ""
    turns: int | None = None
    cost_usd: float = 0.0
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not grade.below(self.grade, self.want)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


@dataclass(frozen=True)
class Options:
    """How to run: the executor, settings to start from, where the replay glue lives."""

    executor: str = SCRIPTED
    config: str | None = None          # a settings file (for a real executor's own settings)
    overrides: tuple[str, ...] = ()    # KEY=VALUE, on top
    scripted_glue: Path | None = None  # default: <bundle>/evals/scripted.py
    env: tuple[tuple[str, str], ...] = ()  # extra environment for the agent


def cases(fixtures: Sequence[Fixture], replays: Sequence[str], executor: str
          ) -> list[tuple[Fixture, str]]:
    """Every case to run: each fixture × replay (a real model plays no replay: one each)."""
    if executor != SCRIPTED:
        return [(f, MODEL_REPLAY) for f in fixtures]
    return [(f, r) for f in fixtures for r in replays]


# --- the repository and the settings --------------------------------------------------------


def make_repo(fixture: Fixture, where: Path) -> Path:
    """The fixture's repository as a fresh git repository on ``main``, one commit."""
    repo = where / "repo"
    shutil.copytree(fixture.repo, repo, symlinks=True)
    git(where, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{fixture.name}: the code with the bug", env=IDENTITY)
    return repo


def case_settings(where: Path, repo: Path, options: Options, executor: str) -> Any:
    from healer.config import load_settings

    over = [f"state_dir={where / 'state'}", f"results_dir={where / 'results'}",
            f"fleet_dir={where / 'fleet'}", f"cto_config={where / 'none.json'}",
            f"fleet.config={where / 'none.json'}", f"selfheal.repo={repo}",
            "selfheal.severity_threshold=4", "selfheal.worker=task",
            f"executor.default={executor}", *options.overrides]
    return load_settings(options.config, overrides=over)


def load_glue(path: Path | None) -> ModuleType:
    """``evals/scripted.py`` (test glue, outside healer's package: loaded by path)."""
    path = path or bundle_root() / "evals" / "scripted.py"
    if not path.is_file():
        raise UsageError(f"the scripted executor needs {path} (run from a healer checkout, "
                         "or give --scripted-glue)")
    spec = importlib.util.spec_from_file_location("healer_eval_scripted", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the hidden check -----------------------------------------------------------------------


def hidden_command(fixture: Fixture) -> list[str]:
    files = fixture.hidden_files()
    if fixture.hidden_command:
        return list(fixture.hidden_command)
    if fixture.language == "python":
        return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
    return ["node", "--test", *files]


def candidate(repo: Path, record: dict[str, Any]) -> str | None:
    """The commit the attempt produced, fetched into ``repo``: the PR head, else the clone's
    last commit; None when there is none (or the clone was tampered with: not touched)."""
    if record.get("status") in grade.PUBLISHED and record.get("head_sha"):
        sha = str(record["head_sha"])
        if git(repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False).ok:
            return sha
    clone = record.get("worktree")
    if not clone or record.get("tampered") or not Path(clone, ".git").is_dir():
        return None
    res = git(repo, "-c", "fetch.fsckObjects=true", "fetch", "--quiet", "--no-tags",
              "--no-write-fetch-head", str(clone), "+HEAD:refs/eval/candidate", check=False)
    if not res.ok:
        return None
    sha = git(repo, "rev-parse", "refs/eval/candidate").stdout.strip()
    base = str(record.get("base_sha") or git(repo, "rev-parse", "main").stdout.strip())
    return None if sha == base else sha


def changed_code(repo: Path, base: str, sha: str) -> bool:
    """Whether ``sha`` changes more than the UNFIXABLE note."""
    names = git(repo, "diff", "--name-only", "--no-ext-diff", base, sha).stdout.split()
    return any(n != "UNFIXABLE" for n in names)


def run_hidden(settings: Any, fixture: Fixture, repo: Path, sha: str, where: Path
               ) -> tuple[bool, str]:
    """The hidden check on commit ``sha``: (passed, the output's tail). Runs in the sandbox:
    it executes the agent's code."""
    from healer.agents.sandbox import run_confined, sandbox_for

    tree = where / "check"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir()
    tar = where / "candidate.tar"
    git(repo, "archive", "--format=tar", "-o", str(tar), sha, timeout=60)
    with tarfile.open(tar) as archive:
        archive.extractall(tree, filter="data")  # no links out, no devices, no odd modes
    for rel in fixture.hidden_files():
        dest = tree / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fixture.hidden / rel, dest)
    res = run_confined(sandbox_for(settings), hidden_command(fixture), cwd=str(tree),
                       env={"PYTHONDONTWRITEBYTECODE": "1"}, timeout=HIDDEN_TIMEOUT_S,
                       writable=[str(tree)])
    output = (res.stdout + res.stderr)[-OUTPUT_TAIL:]
    return res.ok, output


# --- one case -------------------------------------------------------------------------------


@contextmanager
def _no_model() -> Iterator[tuple[dict[str, str], Callable[[], int | None]]]:
    yield {}, lambda: None


async def run_case(fixture: Fixture, replay: str, options: Options,
                   glue: ModuleType | None = None) -> CaseResult:
    """Heal one fixture with one replay (or a real model) and grade it."""
    want = grade.expected_grade(fixture.expected, replay)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"healer-eval-{fixture.name}-") as tmp:
        where = Path(tmp)
        try:
            return await _run_case(fixture, replay, options, glue, where, want, started)
        except (HealerError, OSError, subprocess.SubprocessError, ValueError) as exc:
            return CaseResult(fixture.name, replay, fixture.expected, want, grade.ERROR,
                              status="error", reason=f"{type(exc).__name__}: {exc}"[:500],
                              duration_s=time.monotonic() - started)


async def _run_case(fixture: Fixture, replay: str, options: Options,
                    glue: ModuleType | None, where: Path, want: str, started: float
                    ) -> CaseResult:
    from healer.selfheal.runner import ExecutorRunner

    repo = await asyncio.to_thread(make_repo, fixture, where)
    scripted = options.executor == SCRIPTED
    settings = case_settings(where, repo, options, "claude" if scripted else options.executor)
    served: AbstractContextManager[tuple[dict[str, str], Callable[[], int | None]]]
    if scripted:
        assert glue is not None
        served = glue.serve(fixture.replay(replay), repo)
    else:
        served = _no_model()
    with served as (model_env, turns):
        env = {**(QUIET_CLAUDE_ENV if scripted else {}), **model_env, **dict(options.env)}
        runner = ExecutorRunner(settings, executor=settings.executor.default, env=env)
        record = await drive.drive(settings, fixture, repo, runner)
        taken = turns()
    base = str(record.get("base_sha") or "")
    sha = await asyncio.to_thread(candidate, repo, record) if base else None
    changed = bool(sha) and await asyncio.to_thread(changed_code, repo, base, str(sha))
    passed: bool | None = None
    output = ""
    if sha and changed:
        passed, output = await asyncio.to_thread(run_hidden, settings, fixture, repo, sha,
                                                 where)
    got = grade.grade(record, expected=fixture.expected, changed=changed,
                      hidden_passed=passed)
    return CaseResult(
        fixture.name, replay, fixture.expected, want, got, status=str(record.get("status")),
        reason=str(record.get("reason") or record.get("unfixable_reason") or "")[:500],
        pr_url=str(record.get("pr_url") or ""),
        hidden="not run" if passed is None else ("passed" if passed else "failed"),
        hidden_output=output, turns=taken, cost_usd=drive.spent_usd(settings),
        duration_s=time.monotonic() - started)


async def run_all(todo: Sequence[tuple[Fixture, str]], options: Options, *, jobs: int = 1,
                  on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Every case, ``jobs`` at a time; results in the order of ``todo``."""
    glue = load_glue(options.scripted_glue) if options.executor == SCRIPTED else None
    limit = asyncio.Semaphore(max(1, jobs))

    async def one(fixture: Fixture, replay: str) -> CaseResult:
        async with limit:
            result = await run_case(fixture, replay, options, glue)
        if on_result is not None:
            on_result(result)
        return result

    return list(await asyncio.gather(*(one(f, r) for f, r in todo)))
