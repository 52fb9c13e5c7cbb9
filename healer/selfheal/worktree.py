"""Healing clones: one self-contained clone per attempt, on its own branch, removed after a TTL.

A healing agent works in ``<state>/worktrees/heal-<attempt_id>``: a clone of the repository
being healed (``git clone --no-hardlinks --dissociate``: objects of its own, no alternates, no
hardlink into the operator's object store) on branch ``healer/<fp12>-<suffix>`` started from
the base commit. Nothing in it is shared with the repository healer works in: not hooks, not
config, not objects, not refs. healer writes the clone's ``.git/config``, ``hooks/`` and
``info/`` itself and seals them (``healer.selfheal.gitdir``); after every agent run
``Worktree.require_untouched`` checks the seal before any other git command of healer's runs
there. The agent commits in the clone; the dispatcher reads the commits, the diff and an
``UNFIXABLE`` file back, and the forge takes the branch from the clone (``PullRequest.source``).
The operator's repository gets the branch only when the local forge records a PR.

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

from healer.core.git import BRANCH_PREFIX, GitError, git
from healer.core.names import safe_name
from healer.core.proc import ProcResult
from healer.errors import GitDirTamperedError, NothingToReviewError, UsageError
from healer.selfheal import gitdir

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
    """The committer identity of a healing run (the clone's config holds the same one; this
    is for git processes that do not read it, such as an agent's own git)."""
    name, email = gitdir.IDENTITY
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


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
    """One healing clone: where it came from (``repo``), where it is, its branch and base.

    Every git command here names the clone's git dir explicitly (no discovery that could walk
    up into the operator's repository), and should follow ``require_untouched``.
    """

    repo: Path
    path: Path
    branch: str
    base: str
    base_sha: str
    seal: gitdir.Seal | None = None

    @property
    def git_dir(self) -> Path:
        return self.path / gitdir.GIT_NAME

    def _git(self, *args: str, check: bool = True, env: dict[str, str] | None = None
             ) -> ProcResult:
        return git(self.path, *args, check=check, env=env, git_dir=self.git_dir)

    def inspect(self) -> list[str]:
        """What the agent changed in the parts of the git dir healer made (empty: nothing)."""
        if self.seal is None:
            return ["the clone has no seal (it was not made by healer.selfheal.worktree)"]
        return gitdir.inspect(self.seal)

    def require_untouched(self, where: str = "") -> None:
        """``GitDirTamperedError`` unless the git dir is as healer made it (call after every
        agent run, before any other git command of healer's in the clone)."""
        changes = self.inspect()
        if changes:
            raise GitDirTamperedError(changes, where=where)

    def quarantine(self) -> None:
        """Make a tampered clone's git dir unusable by any git (kept for investigation)."""
        gitdir.quarantine(self.path)

    def commits(self) -> list[tuple[str, str]]:
        """(sha, subject) of the commits the agent made, oldest first."""
        res = self._git("log", "--reverse", "--format=%H%x09%s", f"{self.base_sha}..HEAD")
        out = []
        for line in res.stdout.splitlines():
            sha, _, subject = line.partition("\t")
            if sha:
                out.append((sha, subject))
        return out

    def head(self) -> str:
        return self._git("rev-parse", "HEAD").stdout.strip()

    def diff(self) -> str:
        """The agent's change as one unified diff against the base."""
        res = self._git("diff", "--no-color", "--no-ext-diff", "--no-textconv", "--find-renames",
                  f"{self.base_sha}", "HEAD")
        text = res.stdout
        if len(text.encode()) > MAX_DIFF_BYTES:
            raise UsageError(f"the diff is larger than {MAX_DIFF_BYTES} bytes")
        return text

    def diffstat(self) -> str:
        return self._git("diff", "--stat", "--no-color", "--no-ext-diff", "--no-textconv",
                         f"{self.base_sha}", "HEAD").stdout

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
        raw = self._git("diff", "--raw", *opts, spec).stdout.split("\0")
        paths: list[str] = []
        moved: set[str] = set()
        for meta, path in zip(raw[0::2], raw[1::2], strict=False):
            old_mode, new_mode = meta.lstrip(":").split(" ", 2)[:2]
            paths.append(path)
            if "000000" not in (old_mode, new_mode) and old_mode != new_mode:
                moved.add(path)  # chmod +x of a script can be the whole fix
        numstat = self._git("diff", "--numstat", "--ignore-all-space",
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
        if self._git("cat-file", "-e", f"{self.base_sha}:{UNFIXABLE}", check=False).ok:
            return None  # the project itself carries such a file: not the agent's signal
        res = self._git("show", "--no-textconv", f"HEAD:{UNFIXABLE}", check=False)
        if res.ok:
            return res.stdout[:MAX_UNFIXABLE_BYTES]
        f = self.path / UNFIXABLE
        if f.is_file() and not f.is_symlink():
            with f.open("rb") as fh:
                return fh.read(MAX_UNFIXABLE_BYTES).decode("utf-8", "replace")
        return None


def branch_name(fingerprint: str, attempt_id: str) -> str:
    """``healer/<fp12>-<suffix>``: healing branches live under healer's own prefix."""
    return f"{BRANCH_PREFIX}{fingerprint[:12]}-{attempt_id.rsplit('-', 1)[-1]}"


def worktree_dir(state_dir: Path | str, attempt_id: str) -> Path:
    return Path(state_dir).resolve() / "worktrees" / f"heal-{safe_name(attempt_id, 'attempt id')}"


def _object_format(repo: Path) -> str:
    res = git(repo, "rev-parse", "--show-object-format", check=False)
    return res.stdout.strip() if res.ok and res.stdout.strip() else "sha1"


def clone(source: Path, dest: Path, sha: str, *, branch: str = "") -> gitdir.Seal:
    """A self-contained clone of ``source`` at ``dest``, checked out at ``sha`` (on a new
    ``branch``, else detached), with healer's own config, hooks and info; its seal.

    ``source`` is a repository whose git dir healer trusts: the operator's, or a clone healer
    inspected. No hardlinks and no alternates: what is written in ``dest`` stays there.
    """
    if dest.exists() or dest.is_symlink():
        raise UsageError(f"{dest} already exists")
    dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fmt = _object_format(source)
    git("/", "clone", "--quiet", "--no-hardlinks", "--dissociate", "--no-checkout",
        "--template=", "--no-tags", str(source), str(dest))
    try:
        gitdir.make(dest / gitdir.GIT_NAME, object_format=fmt)
        where = ["-b", branch] if branch else ["--detach"]
        git(dest, "checkout", "--quiet", *where, sha, git_dir=dest / gitdir.GIT_NAME)
        return gitdir.seal(dest, object_format=fmt)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def create(repo: Path | str, state_dir: Path | str, attempt_id: str, fingerprint: str,
           base: str = "") -> Worktree:
    """A fresh clone for ``attempt_id`` on a new branch from the base branch."""
    repo = repo_root(repo)
    base = base_branch(repo, base)
    base_sha = git(repo, "rev-parse", "--verify", f"{base}^{{commit}}").stdout.strip()
    path = worktree_dir(state_dir, attempt_id)
    branch = branch_name(fingerprint, attempt_id)
    sealed = clone(repo, path, base_sha, branch=branch)
    return Worktree(repo=repo, path=path, branch=branch, base=base, base_sha=base_sha,
                    seal=sealed)


def remove(repo: Path | str, path: Path | str, *, branch: str = "",
           delete_branch: bool = False) -> None:
    """Remove a clone (and its branch in ``repo`` when no PR needs it); tolerant of half-gone
    state. No git runs in the clone: it may hold whatever the agent left."""
    path = Path(path)
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)
    if not repo or Path(repo).resolve() == path.resolve():
        return
    git(repo, "worktree", "prune", check=False)  # worktrees made before clones
    if delete_branch and branch:
        with contextlib.suppress(GitError):
            git(repo, "branch", "-D", branch)
