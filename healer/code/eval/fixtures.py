"""An eval fixture on disk, read and validated before anything runs.

::

    evals/fixtures/<name>/
      fixture.yaml     name, language (python|javascript), expected (fixed|unfixable|no_change),
                       description; optional hidden_command (argv list)
      repo/            the repository with the bug and its own passing tests
      report.json      a report_error payload ("${repo}" stands for the repository's path) …
      envelope.bin     … or a sentry-sdk envelope captured from the buggy code (evals/capture.py)
      hidden/          files copied over the PR head to judge it (never shown to the agent)
      replays/         correct.yaml, wrong.yaml, unfixable.yaml (see evals/scripted.py)

A fixture that breaks a rule is a ``UsageError`` naming the fixture and the rule, never a
traceback: fixtures are contributed by people.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from healer.core.names import is_safe_name
from healer.errors import UsageError

LANGUAGES = ("python", "javascript")
EXPECTED = ("fixed", "unfixable", "no_change")
REPLAYS = ("correct", "wrong", "unfixable")
REPORT_FILES = ("report.json", "envelope.bin", "envelope.json")


@dataclass(frozen=True)
class Fixture:
    """One fixture, validated. ``report`` is the file the intake receives."""

    name: str
    path: Path
    language: str
    expected: str
    description: str
    report: Path
    hidden_command: tuple[str, ...] = ()

    @property
    def repo(self) -> Path:
        return self.path / "repo"

    @property
    def hidden(self) -> Path:
        return self.path / "hidden"

    @property
    def envelope(self) -> bool:
        return self.report.name.startswith("envelope")

    def replay(self, name: str) -> Path:
        """The replay file; an unfixable fixture's correct answer is its unfixable note."""
        path = self.path / "replays" / f"{name}.yaml"
        if name == "correct" and not path.is_file() and self.expected != "fixed":
            return self.path / "replays" / "unfixable.yaml"
        return path

    def hidden_files(self) -> list[str]:
        """The hidden check's files, relative to ``hidden/`` (and to the repository)."""
        return sorted(str(p.relative_to(self.hidden)) for p in self.hidden.rglob("*")
                      if p.is_file() and not p.is_symlink())

    def report_payload(self, repo: Path) -> dict[str, Any]:
        """``report.json`` with ``${repo}`` replaced by ``repo`` (tracebacks name real files)."""
        data = json.loads(self.report.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise UsageError(f"fixture {self.name}: report.json must be a JSON object")
        return {k: v.replace("${repo}", str(repo)) if isinstance(v, str) else v
                for k, v in data.items()}


def _fail(name: str, why: str) -> UsageError:
    return UsageError(f"fixture {name}: {why}")


def _no_symlinks(name: str, folder: Path) -> None:
    # Fixture files are copied into repositories healer heals: a link could pull in anything.
    for p in folder.rglob("*"):
        if p.is_symlink():
            raise _fail(name, f"{p.relative_to(folder.parent)} is a symbolic link")


def load_fixture(path: Path) -> Fixture:
    """The fixture in folder ``path`` (``UsageError`` saying what is wrong with it)."""
    name = path.name
    meta_file = path / "fixture.yaml"
    if not meta_file.is_file():
        raise _fail(name, "fixture.yaml is missing")
    try:
        meta = yaml.safe_load(meta_file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise _fail(name, f"fixture.yaml is not YAML: {exc}") from None
    if not isinstance(meta, dict):
        raise _fail(name, "fixture.yaml must be a mapping")
    if meta.get("name") != name or not is_safe_name(name):
        raise _fail(name, "fixture.yaml's name must be the folder's name (letters, digits, "
                          "-, _)")
    language, expected = meta.get("language"), meta.get("expected")
    if language not in LANGUAGES:
        raise _fail(name, f"language must be one of {', '.join(LANGUAGES)}")
    if expected not in EXPECTED:
        raise _fail(name, f"expected must be one of {', '.join(EXPECTED)}")
    command = meta.get("hidden_command") or ()
    if not isinstance(command, list | tuple) or not all(isinstance(a, str) for a in command):
        raise _fail(name, "hidden_command must be a list of strings (an argv)")
    reports = [path / f for f in REPORT_FILES if (path / f).is_file()]
    if len(reports) != 1:
        raise _fail(name, "needs exactly one of " + ", ".join(REPORT_FILES))
    for folder in ("repo", "hidden", "replays"):
        if not (path / folder).is_dir():
            raise _fail(name, f"{folder}/ is missing")
        _no_symlinks(name, path / folder)
    fixture = Fixture(name=name, path=path, language=language, expected=expected,
                      description=str(meta.get("description") or "").strip(),
                      report=reports[0], hidden_command=tuple(command))
    for replay in REPLAYS:
        if not fixture.replay(replay).is_file():
            raise _fail(name, f"replays/{replay}.yaml is missing")
    if not fixture.hidden_files():
        raise _fail(name, "hidden/ holds no check")
    return fixture


def discover(root: Path, names: Sequence[str] = ()) -> list[Fixture]:
    """The fixtures under ``root`` (all, or those named), sorted by name."""
    if not root.is_dir():
        raise UsageError(f"no fixtures folder at {root}")
    found = {p.name: p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")}
    for name in names:
        if name not in found:
            raise UsageError(f"no fixture named {name!r} in {root} (have: "
                             f"{', '.join(sorted(found)) or 'none'})")
    return [load_fixture(found[n]) for n in sorted(names or found)]
