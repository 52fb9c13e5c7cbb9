"""Git worktrees for healing runs: one per attempt, on its own branch, removed after a TTL.

A healing agent works in ``<state>/worktrees/heal-<attempt_id>``, a worktree of the repository
being healed on branch ``healing/<fp12>-<suffix>`` started from the base branch. The agent
commits there; the dispatcher reads the commits, the diff and an ``UNFIXABLE`` file back.
The branch stays after the worktree is removed when a PR points at it.

No PR is opened from a branch whose diff against the base (``base...head``, what the PR would
show) changes nothing a person could review: no file, or only ``MARKER_FILES``, files that
stay empty, or whitespace and blank lines (``Worktree.require_reviewable``).
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from healer.core.git import GitError, git
from healer.core.names import safe_name
from healer.errors import NothingToReviewError, UsageError

UNFIXABLE = "UNFIXABLE"
MAX_UNFIXABLE_BYTES = 64 * 1024
MAX_DIFF_BYTES = 1 << 20
MAX_NAMED = 10  # paths named in a "nothing to review" reason

# Files that mark state instead of changing the program: a branch that touches only these
# holds nothing to review (a rate-limited agent "recovered" into a PR of one marker file).
# A pattern without "/" matches a file's name at any depth, one with "/" its path from the
# repository root (``*`` crosses "/").
MARKER_FILES: tuple[str, ...] = (
    UNFIXABLE,             # the healing agent's "not a code bug" note (prompts/healing-agent)
    "HEALED",              # "done" flags an agent may leave in place of a fix
    "*.marker",
    ".heal-*",
    ".healer/**",          # healer's own state dir and living context (state_dir, context.dir)
    ".healer-skill.json",  # what healer writes into an installed skill (healer.skills.MARKER)
    "heal-*-[0-9]*.json",  # an agent's result file (heal-<kind>-<target>-<epoch>.json) put here
)


def is_marker(path: str) -> bool:
    """Whether ``path`` (relative, "/"-separated) is one of ``MARKER_FILES``."""
    name = path.rsplit("/", 1)[-1]
    return any(fnmatchcase(path if "/" in pat else name, pat) for pat in MARKER_FILES)


def _named(paths: list[str]) -> str:
    shown = ", ".join(sorted(paths)[:MAX_NAMED])
    return shown + (f" and {len(paths) - MAX_NAMED} more" if len(paths) > MAX_NAMED else "")


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

    def unreviewable(self, head: str = "HEAD") -> str | None:
        """Why ``base...head`` (what a PR would show) holds nothing to review; None if it does.

        git decides what changed: a path counts when its content differs ignoring all
        whitespace and blank lines (so commits that add then revert, files that stay empty and
        whitespace-only edits, re-indentation included, do not) or its mode changed, and it
        is not a marker file.
        """
        spec = f"{self.base_sha}...{head}"
        # No renames: a renamed file is a deletion plus an addition, each judged by its lines.
        opts = ("--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", "-z")
        raw = git(self.path, "diff", "--raw", *opts, spec).stdout.split("\0")
        paths: list[str] = []
        moved: set[str] = set()
        for meta, path in zip(raw[0::2], raw[1::2], strict=False):
            old_mode, new_mode = meta.lstrip(":").split(" ", 2)[:2]
            paths.append(path)
            if "000000" not in (old_mode, new_mode) and old_mode != new_mode:
                moved.add(path)  # chmod +x of a script can be the whole fix
        numstat = git(self.path, "diff", "--numstat", "--ignore-all-space",
                      "--ignore-blank-lines", *opts, spec).stdout.split("\0")
        edited = {rest[-1] for rest in (e.split("\t", 2) for e in numstat if e)
                  if len(rest) == 3 and rest[:2] != ["0", "0"]}  # binary files: "-", "-"
        if any(not is_marker(p) for p in edited | moved):
            return None
        if not paths:
            return "the healing branch changes nothing to review (its commits change no file)"
        markers = [p for p in paths if is_marker(p)]
        idle = [p for p in paths if not is_marker(p)]
        what = ([f"marker files: {_named(markers)}"] if markers else []) + (
            [f"whitespace or empty-file changes: {_named(idle)}"] if idle else [])
        return f"the healing branch changes nothing to review (only {'; '.join(what)})"

    def require_reviewable(self, head: str = "HEAD") -> None:
        """Raise ``NothingToReviewError`` unless ``base...head`` changes something to review."""
        why = self.unreviewable(head)
        if why is not None:
            raise NothingToReviewError(why)

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
