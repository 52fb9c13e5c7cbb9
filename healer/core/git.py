"""Running git: the one helper (argv, timeout, no prompts) and its error.

Core, because both the healing worktrees (``healer.selfheal.worktree``) and the forge that
pushes their branches (``healer.core.publish.forge``) run git.
"""

from __future__ import annotations

import os
from pathlib import Path

from healer.core import proc
from healer.errors import UsageError

GIT_TIMEOUT_S = 120.0


class GitError(UsageError):
    """A git command failed (``argv``, ``stderr``)."""

    def __init__(self, argv: tuple[str, ...], stderr: str):
        self.argv = argv
        self.stderr = stderr.strip()
        super().__init__(f"{' '.join(argv[:4])}: {self.stderr.splitlines()[-1:] or 'failed'}")


def git_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GIT_TERMINAL_PROMPT"] = "0"  # never wait for a password nobody will type
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    return env


def git(repo: Path | str, *args: str, check: bool = True, timeout: float = GIT_TIMEOUT_S,
        env: dict[str, str] | None = None) -> proc.ProcResult:
    """Run ``git -C repo args…`` (argv, timeout); ``GitError`` on failure when ``check``."""
    res = proc.run(["git", "-C", str(repo), *args], timeout=timeout, env=env or git_env())
    if check and not res.ok:
        raise GitError(res.argv, res.stderr or ("timed out" if res.timed_out else "failed"))
    return res
