"""The shell commands the skills tell Claude to run, taken from their Markdown.

Every fenced ```bash / ```sh block of SKILL.md, skills/**/*.md and the references is split
into commands (a line, plus its ``\\`` continuation lines). A command whose line carries
``# example-only`` is illustrative and not run; everything else must run and exit 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from healer.resources import bundle_root

SHELLS = {"bash", "sh", "shell"}
EXAMPLE_ONLY = "# example-only"
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\s`]*)")


@dataclass(frozen=True)
class Command:
    """One command of a skill's documentation."""

    file: Path
    line: int
    text: str

    @property
    def example_only(self) -> bool:
        return EXAMPLE_ONLY in self.text

    def where(self) -> str:
        return f"{self.file.relative_to(bundle_root())}:{self.line}"


def commands(path: Path) -> list[Command]:
    """The commands of every shell block in ``path``, in document order."""
    out: list[Command] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    fence = ""
    shell = False
    pending: list[str] = []
    start = 0
    for no, raw in enumerate(lines, 1):
        m = _FENCE.match(raw)
        if not fence:
            if m:
                fence, shell = m.group("fence"), m.group("info").lower() in SHELLS
            continue
        if m and m.group("fence")[0] == fence[0] and len(m.group("fence")) >= len(fence) \
                and not m.group("info"):
            fence = ""
            continue
        if not shell:
            continue
        text = raw.strip()
        if not pending and (not text or text.startswith("#")):
            continue
        if not pending:
            start = no
        pending.append(text[:-1].rstrip() if text.endswith("\\") else text)
        if not text.endswith("\\"):
            out.append(Command(path, start, " ".join(pending)))
            pending = []
    return out


def skill_docs(skill: str) -> list[Path]:
    """A skill's SKILL.md, then its references in name order (the bundle skill: root SKILL.md)."""
    root = bundle_root()
    if skill == "healer-bundle":
        return [root / "SKILL.md"]
    folder = root / "skills" / skill
    return [folder / "SKILL.md", *sorted((folder / "references").glob("*.md"))]


def skill_dir(skill: str) -> Path:
    root = bundle_root()
    return root if skill == "healer-bundle" else root / "skills" / skill
