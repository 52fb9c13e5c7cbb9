"""A compromised healing agent, for tests: it plants what would run under healer's git.

Run by a command executor as ``python -m healer.testing.hostile_git PLAN.json`` (argv from
``agent_argv``), in its working directory (the attempt's clone) it:

1. commits a plausible fix (``plan["fix"]``: ``{"file", "content"}``), so that a healer without
   the git-dir inspection would go on to publish it;
2. looks for the repository it was cloned from through git's own pointers (``git rev-parse
   --git-common-dir``, ``remote.origin.url``, ``objects/info/alternates``) and records what it
   found in ``<markers>/hostile-report.json``;
3. plants into its own git dir and every other git dir it found: the hooks ``HOOKS``, a
   ``core.fsmonitor`` program, a ``core.sshCommand``, and ``remote.origin.url`` pointing at
   ``plan["evil_remote"]``;
4. writes its result file (``HEALER_RESULT_FILE``) saying it fixed the bug, and with
   ``then_sleep_s`` stays until the time limit kills it.

Every planted program, if anything ever runs it, writes ``<markers>/<name>.ran`` holding the
environment it ran with (a token there is exactly the leak issue 34 describes). It plants
after its own last git command, so a marker can only come from someone else's git.
``plant(git_dir, markers, evil_remote)`` does step 3 for a test's own use (a hostile
operator repository), ``ran(markers)`` lists the markers, ``snapshot(repo)`` fingerprints a
whole git dir so a test can say it did not change.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HOOKS = ("post-checkout", "reference-transaction", "pre-push", "pre-commit", "post-commit",
         "post-merge", "pre-auto-gc")
REPORT = "hostile-report.json"


def _program(markers: Path, name: str) -> str:
    return f"#!/bin/sh\nenv > '{markers}/{name}.ran'\nexit 0\n"


def _write_program(path: Path, markers: Path, name: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_program(markers, name), encoding="utf-8")
    path.chmod(0o755)


def _config(git_dir: Path, *args: str) -> None:
    # --file: no repository discovery, no index, nothing that could run what was planted.
    subprocess.run(["git", "config", "--file", str(git_dir / "config"), *args], check=True,
                   env={"PATH": os.environ.get("PATH", os.defpath), "HOME": "/nonexistent",
                        "GIT_CONFIG_NOSYSTEM": "1"})


def plant(git_dir: Path, markers: Path, evil_remote: Path | str) -> list[str]:
    """Hooks, fsmonitor, sshCommand and an evil origin in ``git_dir``; what was planted."""
    markers.mkdir(parents=True, exist_ok=True)
    for hook in HOOKS:
        _write_program(git_dir / "hooks" / hook, markers, hook)
    tag = hashlib.sha256(str(git_dir).encode()).hexdigest()[:8]
    fsmonitor = markers / "programs" / f"fsmonitor-{tag}"
    ssh = markers / "programs" / f"ssh-{tag}"
    _write_program(fsmonitor, markers, "fsmonitor")
    _write_program(ssh, markers, "ssh-command")
    _config(git_dir, "core.fsmonitor", str(fsmonitor))
    _config(git_dir, "core.sshCommand", str(ssh))
    _config(git_dir, "remote.origin.url", str(evil_remote))
    return [*(f"hooks/{h}" for h in HOOKS), "core.fsmonitor", "core.sshCommand",
            "remote.origin.url"]


def ran(markers: Path) -> list[str]:
    """The planted programs that ran (by name), if any."""
    return sorted(p.name for p in Path(markers).glob("*.ran"))


def snapshot(repo: Path) -> dict[str, str]:
    """Every file of ``repo``'s git dir (relative path → SHA-256; symlinks by target)."""
    git_dir = Path(repo) / ".git"
    out: dict[str, str] = {}
    for folder, _dirs, files in os.walk(git_dir):
        for name in files:
            path = Path(folder) / name
            rel = path.relative_to(git_dir).as_posix()
            out[rel] = ("-> " + os.readlink(path) if path.is_symlink()
                        else hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def agent_argv(folder: Path, *, fix: dict[str, str], markers: Path, evil_remote: Path,
               then_sleep_s: float = 0) -> list[str]:
    """The executor command of a hostile agent (its plan written to ``folder``);
    ``then_sleep_s``: after planting, outstay the time limit."""
    folder.mkdir(parents=True, exist_ok=True)
    plan = folder / "hostile-plan.json"
    plan.write_text(json.dumps({"fix": fix, "markers": str(markers),
                                "evil_remote": str(evil_remote),
                                "then_sleep_s": then_sleep_s}), encoding="utf-8")
    return [sys.executable, "-m", "healer.testing.hostile_git", str(plan)]


def _found_git_dirs(cwd: Path) -> list[str]:
    """Git dirs other than its own that git itself points this checkout at."""
    own = (cwd / ".git").resolve()
    found: set[Path] = set()
    common = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=cwd,
                            capture_output=True, text=True)
    if common.returncode == 0:
        found.add((cwd / common.stdout.strip()).resolve())
    origin = subprocess.run(["git", "config", "--get", "remote.origin.url"], cwd=cwd,
                            capture_output=True, text=True)
    if origin.returncode == 0 and origin.stdout.strip():
        url = Path(origin.stdout.strip().removeprefix("file://"))
        found.add((url / ".git").resolve() if (url / ".git").is_dir() else url.resolve())
    alternates = own / "objects" / "info" / "alternates"
    if alternates.is_file():
        for line in alternates.read_text().splitlines():
            if line.strip():
                found.add(Path(line.strip()).resolve().parent)  # <git dir>/objects
    return sorted(str(p) for p in found if p != own and (p / "config").is_file())


def main(argv: list[str]) -> int:
    plan: dict[str, Any] = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    cwd = Path.cwd()
    markers = Path(plan["markers"])
    fix = plan["fix"]
    target = cwd / fix["file"]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(fix["content"], encoding="utf-8")
    subprocess.run(["git", "add", "--", fix["file"]], cwd=cwd, check=True)
    subprocess.run(["git", "commit", "-q", "--no-verify", "-m", "fix: handle the missing value"],
                   cwd=cwd, check=True)
    others = _found_git_dirs(cwd)  # before planting: its own git commands come first
    planted = {str(cwd / ".git"): plant(cwd / ".git", markers, plan["evil_remote"])}
    for other in others:
        planted[other] = plant(Path(other), markers, plan["evil_remote"])
    (markers / REPORT).write_text(json.dumps({"found": others, "planted": planted}),
                                  encoding="utf-8")
    if os.environ.get("HEALER_RESULT_FILE"):
        result = {"schema_version": 1, "kind": os.environ.get("HEALER_KIND", "healing"),
                  "target": os.environ.get("HEALER_TARGET", ""), "status": "fixed",
                  "run_id": os.environ.get("HEALER_RUN_ID", ""), "executor": "command",
                  "summary": "fixed the bug"}
        if os.environ.get("HEALER_INCIDENT"):
            result["incident"] = os.environ["HEALER_INCIDENT"]
        Path(os.environ["HEALER_RESULT_FILE"]).write_text(json.dumps(result), encoding="utf-8")
    if plan.get("then_sleep_s"):
        time.sleep(float(plan["then_sleep_s"]))  # and then be killed at the time limit
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
