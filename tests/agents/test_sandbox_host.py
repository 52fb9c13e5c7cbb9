"""The machine has the sandbox it should have.

``scripts/setup.sh`` installs bubblewrap on every Debian-like machine (default, demo and test
setups); without it no agent with tools starts there. Where it should be and is not — or is
there and cannot start a sandbox — this test fails loudly, instead of the sandbox tests
skipping quietly.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from healer.agents.sandbox import BwrapSandbox
from healer.config import load_settings


def test_bubblewrap_is_installed_and_starts_where_setup_installs_it(tmp_path: Path) -> None:
    if not sys.platform.startswith("linux") or shutil.which("apt-get") is None:
        pytest.skip("scripts/setup.sh installs bubblewrap with apt-get: not on this machine")
    assert shutil.which("bwrap"), "bubblewrap is missing: run scripts/setup.sh --test"
    settings = load_settings(env={}, overrides=[f"state_dir={tmp_path}"])
    assert BwrapSandbox(settings).unavailable() == ""
