"""git for test rigs: the real binary, without the user's or the system's git config."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: A developer's ~/.gitconfig (hooks, signing, templates) must not change what a test sees;
#: commits get a fixed author, so they work on a machine with no identity configured.
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull,
           "GIT_AUTHOR_NAME": "healer tests", "GIT_AUTHOR_EMAIL": "tests@healer.invalid",
           "GIT_COMMITTER_NAME": "healer tests", "GIT_COMMITTER_EMAIL": "tests@healer.invalid"}


def git(repo: Path, *args: str) -> str:
    """``git args`` in ``repo``; its stdout. Raises CalledProcessError when git fails."""
    return subprocess.run(["git", *args], cwd=repo, check=True, env=GIT_ENV,
                          capture_output=True, text=True).stdout
