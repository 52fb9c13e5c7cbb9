"""The project's test command, and what its output says: how many passed, which failed.

=============================================  ==========================================
the repository has                             the test command (``code.test_command`` wins)
=============================================  ==========================================
``pyproject.toml``, ``setup.cfg``,             ``<python> -m pytest -q -p no:cacheprovider``
``setup.py``, ``pytest.ini``, ``test_*.py``    (the interpreter healer runs on)
or ``tests/*.py``
``package.json`` with ``scripts.test``         ``npm test``
``go.mod``                                     ``go test ./...``
``Cargo.toml``                                 ``cargo test``
=============================================  ==========================================

``targeted(argv, files)`` narrows a test command to the reproduction's files (pytest, ``npm
test --``, ``node --test``, ``go test`` of their packages, ``cargo test --test`` of their
stems). ``parse_counts(output)`` reads the pass/fail counts and the names of the failed tests
from the runners' summaries (pytest, ``node --test``/TAP, jest, go, cargo); ``None`` where
the output does not say.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from healer.context.scenarios import split_command
from healer.errors import UsageError

PYTEST = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider")
TEST_SUFFIXES = (".py", ".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx", ".go",
                 ".rs")

_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|errors?)\b")
_PYTEST_SUMMARY = re.compile(r"^=*\s*(?:\d+ \w+(?:, )?)+.* in [\d.]+s", re.M)
_PYTEST_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)
_TAP_COUNT = re.compile(r"^# (pass|fail) (\d+)$", re.M)
_TAP_FAILED = re.compile(r"^\s*not ok \d+ - (.+?)(?:\s+#.*)?$", re.M)
_JEST = re.compile(r"^Tests:\s+(.*?)(\d+) total", re.M)
_JEST_FAILED = re.compile(r"^\s+● (.+?)$", re.M)
_GO_FAILED = re.compile(r"^\s*--- FAIL: (\S+)", re.M)
_GO_PASSED = re.compile(r"^\s*--- PASS: (\S+)", re.M)
_CARGO = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed", re.M)
_CARGO_FAILED = re.compile(r"^test (\S+) \.\.\. FAILED$", re.M)


def detect(repo: Path) -> list[str] | None:
    """The test command a repository's files call for, or None."""
    repo = Path(repo)
    pkg = repo / "package.json"
    if pkg.is_file() and not pkg.is_symlink():
        try:
            scripts = json.loads(pkg.read_text(encoding="utf-8")).get("scripts") or {}
        except (ValueError, OSError, AttributeError):
            scripts = {}
        if isinstance(scripts, dict) and scripts.get("test"):
            return ["npm", "test"]
    if (repo / "go.mod").is_file():
        return ["go", "test", "./..."]
    if (repo / "Cargo.toml").is_file():
        return ["cargo", "test"]
    if any((repo / n).is_file() for n in ("pyproject.toml", "setup.cfg", "setup.py",
                                          "pytest.ini")) or any(repo.glob("test_*.py")) or (
            (repo / "tests").is_dir() and any((repo / "tests").glob("*.py"))):
        return list(PYTEST)
    return None


def test_command(settings_code: object, repo: Path) -> list[str] | None:
    """``code.test_command`` as argv (``UsageError`` for shell syntax), else ``detect``."""
    configured = str(getattr(settings_code, "test_command", "") or "").strip()
    if configured:
        try:
            return split_command(configured)
        except ValueError as exc:
            raise UsageError(f"code.test_command: {exc}") from exc
    return detect(repo)


def is_test_file(path: str) -> bool:
    """Whether a (check) file the agent added is a test a runner can be pointed at."""
    name = PurePosixPath(path)
    return name.suffix in TEST_SUFFIXES and name.name not in ("conftest.py", "__init__.py") \
        and "config" not in name.name


def targeted(argv: Sequence[str], files: Sequence[str]) -> list[str]:
    """``argv`` narrowed to ``files`` (repository-relative tests), as well as the runner
    allows; the whole command where it does not."""
    argv = list(argv)
    if not files:
        return argv
    joined = " ".join(argv)
    if argv[:2] == ["go", "test"]:
        pkgs = sorted({"./" + (str(PurePosixPath(f).parent) or ".") for f in files})
        return ["go", "test", *[p if p != "./." else "." for p in pkgs]]
    if argv[:2] == ["cargo", "test"]:
        stems = [PurePosixPath(f).stem for f in files if f.startswith("tests/")]
        return ["cargo", "test", *[a for s in stems for a in ("--test", s)]] if stems else argv
    if argv[:2] == ["npm", "test"] or argv[:3] == ["npm", "run", "test"]:
        return [*argv, "--", *files]
    if "pytest" in joined or "node" in PurePosixPath(argv[0]).name or "jest" in joined \
            or "vitest" in joined or "mocha" in joined:
        return [*argv, *files]
    return argv


@dataclass
class Counts:
    """What a run's output says: passed/failed counts (None: not said), failed test names."""

    passed: int | None = None
    failed: int | None = None
    failed_names: list[str] = field(default_factory=list)


def parse_counts(output: str) -> Counts:
    """Counts from the last summary of a known runner in ``output``."""
    tail = output[-50_000:]
    summaries = _PYTEST_SUMMARY.findall(tail)
    if summaries:
        nums: dict[str, int] = {}
        for n, word in _PYTEST_COUNT.findall(summaries[-1]):
            nums["failed" if word != "passed" else "passed"] = nums.get(
                "failed" if word != "passed" else "passed", 0) + int(n)
        return Counts(nums.get("passed", 0), nums.get("failed", 0),
                      _PYTEST_FAILED.findall(tail))
    jest = _JEST.findall(tail)
    if jest:
        parts, _total = jest[-1]
        p = re.search(r"(\d+) passed", parts)
        f = re.search(r"(\d+) failed", parts)
        return Counts(int(p.group(1)) if p else 0, int(f.group(1)) if f else 0,
                      [n.strip() for n in _JEST_FAILED.findall(tail)])
    tap = dict(_TAP_COUNT.findall(tail))
    if tap:
        return Counts(int(tap.get("pass", 0)), int(tap.get("fail", 0)),
                      [n.strip() for n in _TAP_FAILED.findall(tail)])
    cargo = _CARGO.findall(tail)
    if cargo:
        return Counts(sum(int(p) for p, _ in cargo), sum(int(f) for _, f in cargo),
                      _CARGO_FAILED.findall(tail))
    go_failed, go_passed = _GO_FAILED.findall(tail), _GO_PASSED.findall(tail)
    if go_failed or go_passed:
        return Counts(len(go_passed), len(go_failed), go_failed)
    return Counts()
