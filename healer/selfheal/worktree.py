"""Git worktrees for healing runs: one per attempt, on its own branch, removed after a TTL.

A healing agent works in ``<state>/worktrees/heal-<attempt_id>``, a worktree of the repository
being healed on branch ``healing/<fp12>-<suffix>`` started from the base branch. The agent
commits there; the dispatcher reads the commits, the diff and an ``UNFIXABLE`` file back.
The branch stays after the worktree is removed when a PR points at it.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from healer.core.git import GitError, git
from healer.core.names import safe_name
from healer.errors import UsageError

UNFIXABLE = "UNFIXABLE"
MAX_UNFIXABLE_BYTES = 64 * 1024
MAX_DIFF_BYTES = 1 << 20


def git_identity(worktree: Path) -> dict[str, str]:
    """A committer identity for the agent when the repository has none (else git refuses)."""
    if git(worktree, "config", "--get", "user.email", check=False).stdout.strip():
        return {}
    return {"GIT_AUTHOR_NAME": "healer", "GIT_AUTHOR_EMAIL": "healer@localhost",
            "GIT_COMMITTER_NAME": "healer", "GIT_COMMITTER_EMAIL": "healer@localhost"}


def repo_root(path: Path | str) -> Path:
    """The top of the git repository containing ``path``."""
    res = git(path, "rev-parse", "--show-toplevel", check=False, timeout=30)
    if not res.ok:
        raise UsageError(f"{path}: not inside a git repository (set selfheal.repo)")
    return Path(res.stdout.strip())


def base_branch(repo: Path | str, configured: str = "") -> str:
    """The branch healing starts from: the configured one, ``main``, or the current one."""
    for candidate in ([configured] if configured else ["main"]):
        if git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{candidate}^{{commit}}",
               check=False).ok:
            return candidate
        if configured:
            raise UsageError(f"selfheal.base_branch {configured!r} does not exist in {repo}")
    res = git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    if res.ok and res.stdout.strip():
        return res.stdout.strip()
    return git(repo, "rev-parse", "HEAD").stdout.strip()


@dataclass(frozen=True)
class Worktree:
    """One healing worktree."""

    repo: Path
    path: Path
    branch: str
    base: str
    base_sha: str

    def commits(self) -> list[tuple[str, str]]:
        """(sha, subject) of the commits the agent made, oldest first."""
        res = git(self.path, "log", "--reverse", "--format=%H%x09%s", f"{self.base_sha}..HEAD")
        out = []
        for line in res.stdout.splitlines():
            sha, _, subject = line.partition("\t")
            if sha:
                out.append((sha, subject))
        return out

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD").stdout.strip()

    def diff(self) -> str:
        """The agent's change as one unified diff against the base."""
        res = git(self.path, "diff", "--no-color", "--no-ext-diff", "--find-renames",
                  f"{self.base_sha}", "HEAD")
        text = res.stdout
        if len(text.encode()) > MAX_DIFF_BYTES:
            raise UsageError(f"the diff is larger than {MAX_DIFF_BYTES} bytes")
        return text

    def diffstat(self) -> str:
        return git(self.path, "diff", "--stat", "--no-color", f"{self.base_sha}", "HEAD").stdout

    def unfixable_text(self) -> str | None:
        """The ``UNFIXABLE`` explanation, committed or just left in the worktree, if any."""
        if git(self.path, "cat-file", "-e", f"{self.base_sha}:{UNFIXABLE}", check=False).ok:
            return None  # the project itself carries such a file: not the agent's signal
        res = git(self.path, "show", f"HEAD:{UNFIXABLE}", check=False)
        if res.ok:
            return res.stdout[:MAX_UNFIXABLE_BYTES]
        f = self.path / UNFIXABLE
        if f.is_file() and not f.is_symlink():
            with f.open("rb") as fh:
                return fh.read(MAX_UNFIXABLE_BYTES).decode("utf-8", "replace")
        return None


def branch_name(fingerprint: str, attempt_id: str) -> str:
    return f"healing/{fingerprint[:12]}-{attempt_id.rsplit('-', 1)[-1]}"


def worktree_dir(state_dir: Path | str, attempt_id: str) -> Path:
    return Path(state_dir).resolve() / "worktrees" / f"heal-{safe_name(attempt_id, 'attempt id')}"


def create(repo: Path | str, state_dir: Path | str, attempt_id: str, fingerprint: str,
           base: str = "") -> Worktree:
    """A fresh worktree for ``attempt_id`` on a new branch from the base branch."""
    repo = repo_root(repo)
    base = base_branch(repo, base)
    base_sha = git(repo, "rev-parse", f"{base}^{{commit}}").stdout.strip()
    path = worktree_dir(state_dir, attempt_id)
    branch = branch_name(fingerprint, attempt_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "add", "--quiet", "-b", branch, str(path), base_sha)
    return Worktree(repo=repo, path=path, branch=branch, base=base, base_sha=base_sha)


def remove(repo: Path | str, path: Path | str, *, branch: str = "",
           delete_branch: bool = False) -> None:
    """Remove a worktree (and its branch when no PR needs it); tolerant of half-gone state."""
    path = Path(path)
    git(repo, "worktree", "remove", "--force", str(path), check=False)
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
    git(repo, "worktree", "prune", check=False)
    if delete_branch and branch:
        with contextlib.suppress(GitError):
            git(repo, "branch", "-D", branch)
