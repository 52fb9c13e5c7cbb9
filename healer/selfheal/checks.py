"""A fix is verified by the base branch's checks, never by its own.

A healing agent's commit may change anything, the tests that would judge it included. So the
checkout a fix is verified in (``base_checks_checkout``) holds the agent's changes to every
file **except its checks**, which stay as they are on the base commit:

=========================================  ==============================================
kind                                       a path is a check when
=========================================  ==============================================
test folders                               a component of it is one of ``CHECK_DIRS``
                                           (``tests/``, ``test/``, ``__tests__/``,
                                           ``spec/``, ``__snapshots__/``, ``testdata/``)
test files and test configuration          its name matches ``CHECK_NAMES`` (``test_*.py``,
                                           ``*_test.py``, ``conftest.py``, ``*.test.js``,
                                           ``*.spec.ts``, ``*_test.go``, ``*_spec.rb`` …)
scenario matrices                          its name matches ``*.scenarios.yaml``/``.yml``
the living context                         it lies under ``context.dir`` (when that is in the
                                           repository), passed as ``check_dirs``
=========================================  ==============================================

A check the agent changed goes back to its base version; one it added is left out; one it
deleted comes back. ``Checkout.left_out`` names them, so the verdict can say which of the
agent's changes to checks did not take part (the PR still carries them, for a person to
review). The checkout is a clone of its own (``healer.selfheal.worktree.clone``): the code
under test runs there, never in the agent's clone or the operator's repository.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from healer.core.git import git
from healer.selfheal import gitdir
from healer.selfheal import worktree as wt

CHECK_DIRS: tuple[str, ...] = ("tests", "test", "__tests__", "spec", "__snapshots__", "testdata")
CHECK_NAMES: tuple[str, ...] = (
    # Python
    "test_*.py", "*_test.py", "conftest.py", "pytest.ini", "tox.ini", "noxfile.py",
    # JavaScript / TypeScript
    "*.test.[jt]s", "*.test.[jt]sx", "*.test.[mc]js", "*.spec.[jt]s", "*.spec.[jt]sx",
    "*.spec.[mc]js", "jest.config.*", "vitest.config.*", ".mocharc*", "karma.conf.*",
    # Go, Ruby, JVM, PHP, Rust
    "*_test.go", "*_spec.rb", "*Test.java", "*Tests.java", "*Test.kt", "phpunit.xml*",
    "*_test.rs",
    # scenario matrices of the living context
    "*.scenarios.yaml", "*.scenarios.yml",
)
MAX_PATHS_PER_CALL = 200


def is_check(path: str, check_dirs: Sequence[str] = ()) -> bool:
    """Whether ``path`` (repository-relative, "/"-separated) is one of a fix's checks."""
    parts = path.split("/")
    if any(p in CHECK_DIRS for p in parts):
        return True
    if any(fnmatchcase(parts[-1], pat) for pat in CHECK_NAMES):
        return True
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in check_dirs if d)


def repo_dirs(repo: Path, folders: Iterable[Path | str]) -> list[str]:
    """The repository-relative form of those ``folders`` (e.g. ``context.dir``) that lie in
    ``repo``; the others are not the fix's to change."""
    root = Path(repo).resolve()
    out = []
    for folder in folders:
        try:
            rel = Path(folder).expanduser().resolve().relative_to(root)
        except ValueError:
            continue
        if rel.parts:
            out.append(rel.as_posix())
    return out


@dataclass(frozen=True)
class Checkout:
    """A verification checkout: the fix with the base's checks, and what was left out."""

    path: Path
    head: str
    left_out: list[str] = field(default_factory=list)  # the agent's changes to checks

    def note(self) -> str:
        """The verdict's line about the checks left out ("" when none)."""
        if not self.left_out:
            return ""
        shown = ", ".join(self.left_out[:10]) + (
            f" and {len(self.left_out) - 10} more" if len(self.left_out) > 10 else "")
        return ("the fix was verified with the base branch's tests and scenarios: the agent's "
                f"changes to them were left out ({shown})")


def _changed(tree: wt.Worktree, head: str) -> list[tuple[str, str]]:
    """(status letter, path) of every path ``base..head`` changes, renames split in two."""
    raw = git(tree.path, "diff", "--name-status", "--no-renames", "-z", "--no-ext-diff",
              "--no-textconv", tree.base_sha, head, git_dir=tree.git_dir).stdout.split("\0")
    return [(s[:1], p) for s, p in zip(raw[0::2], raw[1::2], strict=False) if p]


def _chunks(paths: list[str]) -> Iterable[list[str]]:
    for i in range(0, len(paths), MAX_PATHS_PER_CALL):
        yield [f":(literal){p}" for p in paths[i:i + MAX_PATHS_PER_CALL]]


def base_checks_checkout(tree: wt.Worktree, head: str, dest: Path, *,
                         check_dirs: Sequence[str] = ()) -> Checkout:
    """A clone of ``tree`` at ``dest`` holding ``head``, but with every check as it is on the
    base commit (``tree.base_sha``). Call ``tree.require_untouched()`` first: the clone is made
    from the agent's clone."""
    changed = _changed(tree, head)
    left_out = sorted({p for _, p in changed if is_check(p, check_dirs)})
    wt.clone(tree.path, dest, head)
    git_dir = dest / gitdir.GIT_NAME
    added = [p for s, p in changed if s == "A" and p in left_out]
    restored = [p for p in left_out if p not in added]
    for chunk in _chunks(added):
        git(dest, "rm", "--quiet", "--force", "--ignore-unmatch", "--", *chunk, git_dir=git_dir)
    for chunk in _chunks(restored):
        git(dest, "checkout", "--quiet", tree.base_sha, "--", *chunk, git_dir=git_dir)
    return Checkout(dest, head, left_out)
