"""A fix as the verifier sees it: the files it changes and the lines it adds.

``diff_of(worktree, base)`` asks git (committed changes ``base..HEAD``, or the working tree
against ``base``); ``parse_patch(text)`` reads a unified diff from anywhere (``healer context
verify --diff FILE``). Paths come back repo-relative and POSIX.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from healer.core.git import git
from healer.errors import UsageError

GIT_TIMEOUT_S = 60.0
MAX_DIFF_BYTES = 4 << 20
_HEADER = re.compile(r"^diff --git (?P<a>\"?a/.*?\"?) (?P<b>\"?b/.*?\"?)$")


@dataclass
class Diff:
    """Changed files (new names; deleted files included) and the lines added to each."""

    files: list[str] = field(default_factory=list)
    added: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    text: str = ""

    def added_lines(self, files: list[str] | None = None) -> list[tuple[str, int, str]]:
        wanted = self.added if files is None else {f: self.added.get(f, []) for f in files}
        return [(f, n, line) for f, lines in wanted.items() for n, line in lines]


def _unquote(name: str) -> str:
    """git's C-style quoted path (``"a/sp\\303\\251c.py"``) as text."""
    if not (name.startswith('"') and name.endswith('"')):
        return name
    raw = name[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    return raw.encode("latin-1", "replace").decode("utf-8", "replace")


def _strip_prefix(name: str) -> str:
    name = _unquote(name.strip())
    if name == "/dev/null":
        return ""
    return name[2:] if name[:2] in ("a/", "b/") else name


def parse_patch(text: str) -> Diff:
    """Files and added lines of a unified diff (git's or plain ``diff -u``)."""
    diff = Diff(text=text)
    current = ""
    old = ""
    new_line = 0
    for raw in text.splitlines():
        if raw.startswith("diff --git "):
            m = _HEADER.match(raw)
            current = _strip_prefix(m.group("b")) if m else ""
            old = _strip_prefix(m.group("a")) if m else ""
            if current and current not in diff.files:
                diff.files.append(current)
            continue
        if raw.startswith("--- "):
            old = _strip_prefix(raw[4:].split("\t")[0])
            continue
        if raw.startswith("+++ "):
            name = _strip_prefix(raw[4:].split("\t")[0])
            if name:
                current = name
            elif old:
                current = old
                if old not in diff.deleted:
                    diff.deleted.append(old)
            if current and current not in diff.files:
                diff.files.append(current)
            continue
        if raw.startswith("@@"):
            m = re.match(r"@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@", raw)
            new_line = int(m.group(1)) if m else 0
            continue
        if raw.startswith("+") and current:
            diff.added.setdefault(current, []).append((new_line, raw[1:]))
            new_line += 1
        elif raw.startswith(" "):
            new_line += 1
    return diff


def diff_of(worktree: Path | str, base: str, *, committed: bool = True,
            git_dir: Path | str | None = None) -> Diff:
    """The change in ``worktree`` against ``base``: ``base..HEAD`` or the working tree.

    ``git_dir``: the checkout's git dir, named instead of discovered (a healing clone's).
    """
    args = ["diff", "--no-color", "--no-ext-diff", "--no-textconv", "--find-renames", "-U0",
            base]
    if committed:
        args.append("HEAD")
    res = git(worktree, *args, check=False, timeout=GIT_TIMEOUT_S, git_dir=git_dir)
    if not res.ok:
        raise UsageError(f"git diff against {base!r} failed in {worktree}: "
                         f"{(res.stderr.strip().splitlines() or ['?'])[-1]}")
    if len(res.stdout.encode()) > MAX_DIFF_BYTES:
        raise UsageError(f"the diff is larger than {MAX_DIFF_BYTES >> 20} MiB")
    return parse_patch(res.stdout)
