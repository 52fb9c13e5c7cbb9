"""The git dir of a healing clone: made by healer, sealed, inspected after every run.

A healing agent is as untrusted as the text that reached it, and git runs whatever a git dir
tells it to (hooks, ``core.fsmonitor``, filters, ``core.sshCommand``, a remote's URL). So:

1. **healer makes the parts that can execute or redirect** (``make``): ``.git/config`` (the
   content of ``config_text``: no remote, no hooks path, healer's committer identity),
   an empty ``hooks/``, ``info/`` holding only an empty ``exclude``, and no
   ``objects/info/alternates``. The clone has objects of its own (``git clone --no-hardlinks``,
   dissociated), so nothing the agent writes reaches the operator's repository.
2. **A seal is taken** (``seal``): the identity (device, inode) of the clone's directory and of
   ``.git``, and a SHA-256 of each part healer made; ``Seal.digest`` goes into the attempt
   record.
3. **After every agent run, before any other git command of healer's there**, ``inspect``
   compares the git dir with the seal and lists what differs; ``require_untouched`` raises
   ``GitDirTamperedError`` when anything does. Findings:

   ============================================  ==========================================
   what the agent did                            finding
   ============================================  ==========================================
   wrote a hook                                  ``hooks/<name> added``
   changed ``config`` (fsmonitor, a remote …)    ``config changed: + core.fsmonitor=…``
   replaced ``.git`` by a gitfile or symlink     ``.git is now a gitfile/a symlink …``
   replaced ``.git`` or the clone's directory    ``.git was replaced by another directory``
   added alternates                              ``objects/info/alternates added``
   added ``info/attributes``, ``info/grafts`` …  ``info/<name> added``
   made a link to another git dir                ``commondir/worktrees/modules/… added``
   put a symlink (or fifo …) into the git dir    ``symlink in the git dir: refs/x -> …``
   ============================================  ==========================================

   Ordinary git work — commits, branches, the index, reflogs, packs, ``COMMIT_EDITMSG`` —
   changes none of these.
4. **A tampered clone is quarantined** (``quarantine``): its ``.git`` is renamed to
   ``git-dir.tampered`` so that no git — healer's, or a person's who opens the folder — runs
   what it holds; the files stay for whoever investigates.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer.errors import GitDirTamperedError

GIT_NAME = ".git"
QUARANTINE_NAME = "git-dir.tampered"
IDENTITY = ("healer", "healer@localhost")  # who commits in a clone
# Entries of a git dir that point git somewhere else, or are git dirs of their own.
FOREIGN = ("commondir", "gitdir", "config.worktree", "worktrees", "modules", "remotes",
           "branches")
ALTERNATES = ("objects/info/alternates", "objects/info/http-alternates")
INFO_DATA = ("refs",)  # what git itself writes into info/ (``git gc``: the dumb-http ref list)
MAX_FINDINGS = 40
MAX_WALK = 200_000  # entries looked at for symlinks before the walk itself is a finding


def config_text(object_format: str = "sha1") -> str:
    """The whole ``.git/config`` of a healing clone."""
    lines = ["[core]", f"\trepositoryformatversion = {1 if object_format != 'sha1' else 0}",
             "\tfilemode = true", "\tbare = false", "\tlogallrefupdates = true"]
    if object_format != "sha1":
        lines += ["[extensions]", f"\tobjectformat = {object_format}"]
    lines += ["[user]", f"\tname = {IDENTITY[0]}", f"\temail = {IDENTITY[1]}",
              "[gc]", "\tauto = 0"]
    return "\n".join(lines) + "\n"


def make(git_dir: Path, *, object_format: str = "sha1") -> None:
    """Write healer's parts of ``git_dir`` (after ``git clone``): config, hooks, info."""
    for rel in ALTERNATES:
        if (git_dir / rel).exists():
            raise GitDirTamperedError([f"{rel} present after the clone was dissociated"])
    (git_dir / "config").write_text(config_text(object_format), encoding="utf-8")
    hooks = git_dir / "hooks"
    if hooks.is_dir() and not hooks.is_symlink():
        for entry in hooks.iterdir():
            entry.unlink()
    hooks.mkdir(exist_ok=True)
    info = git_dir / "info"
    info.mkdir(exist_ok=True)
    for entry in info.iterdir():
        entry.unlink()
    (info / "exclude").write_text("", encoding="utf-8")


def _sha(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def _ident(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_dev, st.st_ino


@dataclass(frozen=True)
class Seal:
    """What a clone's git dir looked like when healer made it."""

    clone: str
    clone_id: tuple[int, int]
    git_dir_id: tuple[int, int]
    parts: dict[str, str] = field(default_factory=dict)  # relative path → SHA-256
    object_format: str = "sha1"

    @property
    def digest(self) -> str:
        doc = {"clone_id": list(self.clone_id), "git_dir_id": list(self.git_dir_id),
               "parts": self.parts}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def as_dict(self) -> dict[str, Any]:
        """The seal as the attempt record keeps it (``from_dict`` reads it back)."""
        return {"clone": self.clone, "clone_id": list(self.clone_id),
                "git_dir_id": list(self.git_dir_id), "parts": dict(self.parts),
                "object_format": self.object_format, "digest": self.digest}

    @classmethod
    def from_dict(cls, doc: Any) -> Seal | None:
        """A recorded seal, or None when ``doc`` is not one."""
        try:
            seal = cls(str(doc["clone"]), (int(doc["clone_id"][0]), int(doc["clone_id"][1])),
                       (int(doc["git_dir_id"][0]), int(doc["git_dir_id"][1])),
                       {str(k): str(v) for k, v in doc["parts"].items()},
                       str(doc.get("object_format", "sha1")))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return None
        return seal if doc.get("digest") in (None, seal.digest) else None


def seal(clone: Path, *, object_format: str = "sha1") -> Seal:
    """The seal of ``clone``'s git dir, as ``make`` left it."""
    git_dir = clone / GIT_NAME
    parts = {"config": _sha(git_dir / "config"), "info/exclude": _sha(git_dir / "info/exclude")}
    return Seal(str(clone), _ident(clone), _ident(git_dir), parts, object_format)


def _config_change(old: str, new: str) -> str:
    before, after = old.splitlines(), new.splitlines()
    added = [f"+ {ln.strip()}" for ln in after if ln not in before]
    removed = [f"- {ln.strip()}" for ln in before if ln not in after]
    shown = (added + removed)[:8]
    return "config changed: " + (", ".join(shown) if shown else "(rewritten)")


def _gitfile(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            return fh.read(300).decode("utf-8", "replace").strip()
    except OSError:
        return "?"


def _walk_specials(git_dir: Path, out: list[str]) -> None:
    """Symlinks and other non-regular files anywhere in the git dir (links never followed)."""
    seen = 0
    for folder, dirs, files in os.walk(git_dir, followlinks=False):
        for name in [*dirs, *files]:
            seen += 1
            path = Path(folder) / name
            rel = path.relative_to(git_dir).as_posix()
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                out.append(f"symlink in the git dir: {rel} -> {os.readlink(path)}")
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                out.append(f"special file in the git dir: {rel}")
            if len(out) >= MAX_FINDINGS:
                return
        if seen > MAX_WALK:
            out.append(f"more than {MAX_WALK} entries in the git dir")
            return


def inspect(s: Seal) -> list[str]:
    """What differs from the seal in the clone's git dir (empty: untouched)."""
    clone = Path(s.clone)
    git_dir = clone / GIT_NAME
    out: list[str] = []
    try:
        st = os.lstat(clone)
    except FileNotFoundError:
        return ["the clone was removed"]
    if stat.S_ISLNK(st.st_mode):
        return [f"the clone's directory is now a symlink to {os.readlink(clone)}"]
    if (st.st_dev, st.st_ino) != s.clone_id:
        out.append("the clone's directory was replaced")
    try:
        gst = os.lstat(git_dir)
    except FileNotFoundError:
        return [*out, ".git was removed"]
    if stat.S_ISLNK(gst.st_mode):
        return [*out, f".git is now a symlink to {os.readlink(git_dir)}"]
    if stat.S_ISREG(gst.st_mode):
        return [*out, f".git is now a gitfile ({_gitfile(git_dir)[:200]})"]
    if not stat.S_ISDIR(gst.st_mode):
        return [*out, ".git is no longer a directory"]
    if (gst.st_dev, gst.st_ino) != s.git_dir_id:
        out.append(".git was replaced by another directory")

    config = git_dir / "config"
    if config.is_symlink() or _sha(config) != s.parts.get("config"):
        try:
            now = config.read_text(encoding="utf-8", errors="replace")
        except OSError:
            now = ""
        out.append(_config_change(config_text(s.object_format), now) if now
                   else "config removed")
    hooks = git_dir / "hooks"
    if hooks.is_symlink() or not hooks.is_dir():
        out.append("hooks/ replaced" if hooks.exists() or hooks.is_symlink() else
                   "hooks/ removed")
    else:
        out += [f"hooks/{e.name} added" for e in sorted(hooks.iterdir())]
    info = git_dir / "info"
    if info.is_symlink() or not info.is_dir():
        out.append("info/ replaced" if info.exists() or info.is_symlink() else "info/ removed")
    else:
        for entry in sorted(info.iterdir()):
            if entry.name in INFO_DATA and entry.is_file() and not entry.is_symlink():
                continue
            if entry.name != "exclude":
                out.append(f"info/{entry.name} added")
            elif entry.is_symlink() or _sha(entry) != s.parts.get("info/exclude"):
                out.append("info/exclude changed")
    out += [f"{rel} added" for rel in ALTERNATES if os.path.lexists(git_dir / rel)]
    out += [f"{name} added (it points git at another git dir)" for name in FOREIGN
            if os.path.lexists(git_dir / name)]
    _walk_specials(git_dir, out)
    return out[:MAX_FINDINGS]


def require_untouched(s: Seal, *, where: str = "") -> None:
    """Raise ``GitDirTamperedError`` unless the clone's git dir is as healer made it."""
    changes = inspect(s)
    if changes:
        raise GitDirTamperedError(changes, where=where)


def check_recorded(doc: Any) -> list[str]:
    """``inspect`` from a seal kept on an attempt record (none kept: nothing to say), and the
    clone quarantined when something changed — for ends that left no ``Worktree`` at hand
    (a time limit, a crash)."""
    s = Seal.from_dict(doc) if doc else None
    if s is None or not os.path.lexists(s.clone):
        return []
    changes = inspect(s)
    if changes:
        quarantine(s.clone)
    return changes


def quarantine(clone: Path | str) -> Path | None:
    """Rename a tampered clone's ``.git`` (whatever it is now) so no git ever uses it."""
    clone = Path(clone)
    git_dir = clone / GIT_NAME
    if clone.is_symlink() or not os.path.lexists(git_dir):
        return None
    target = clone / QUARANTINE_NAME
    with contextlib.suppress(OSError):
        os.rename(git_dir, target)
        return target
    return None


TAMPERED_STEPS = [
    "Treat this as an attack: text that reached the healing agent (the error report, its "
    "message or traceback) made it change the git dir healer gave it, in the ways listed "
    "above. healer ran no git command in that clone afterwards, published nothing, and moved "
    "its git dir aside (`git-dir.tampered`). The repository healer works in never shared a git "
    "dir with it.",
    "Do not run git in the clone, and do not copy its git dir anywhere: read what was planted "
    "with plain file tools (commands below).",
    "Find the report that carried the instructions (evidence below) and the source that sent "
    "it; consider requiring approval for that source.",
]


def tampered_commands(clone: str) -> list[str]:
    """Plain file commands to look at what an agent planted (no git: it would run it)."""
    moved = f"{clone}/{QUARANTINE_NAME}"
    return ["# what was planted (plain file tools only; do not run git there)",
            f"ls -la {moved} {moved}/hooks {moved}/info", f"cat {moved}/config"]
