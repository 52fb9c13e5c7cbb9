"""Fixtures for self-healing: a real git repository with a bug, scripted "agents", settings."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from selfheal_helpers import AGENTS, BUGGY

from healer.config import load_settings
from healer.core.store import FileStore
from healer.selfheal.service import SelfHealService
from healer.testing.git import git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository on ``main`` with a buggy module, and a committer identity."""
    r = tmp_path / "repo"
    (r / "src" / "app").mkdir(parents=True)
    (r / "src" / "app" / "tools.py").write_text(BUGGY)
    subprocess.run(["git", "init", "-q", "-b", "main", str(r)], check=True)
    git(r, "config", "user.email", "dev@example.com")
    git(r, "config", "user.name", "Dev")
    git(r, "add", ".")
    git(r, "commit", "-qm", "initial")
    return r


@pytest.fixture
def agent_script(tmp_path: Path) -> Callable[[str], list[str]]:
    """``agent_script("fix")`` → the argv of that scripted healing agent."""

    def make(name: str) -> list[str]:
        path = tmp_path / "agents" / f"{name}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(AGENTS[name]))
        return [sys.executable, str(path)]

    return make


@pytest.fixture
def make_settings(tmp_path: Path, repo: Path, agent_script: Callable[[str], list[str]]
                  ) -> Callable[..., Any]:
    """Settings confined to the test's dirs, healing ``repo`` with a scripted agent."""

    def make(agent: str | None = "fix", **selfheal: Any) -> Any:
        over: dict[str, Any] = {
            "state_dir": str(tmp_path / "state"), "results_dir": str(tmp_path / "results"),
            "fleet_dir": str(tmp_path / "fleet"), "cto_config": str(tmp_path / "none.json"),
            "fleet": {"config": str(tmp_path / "none.json")},
            "selfheal": {"repo": str(repo), **selfheal},
            "executor": {"default": "command",
                         "commands": {"healing-agent": agent_script(agent)} if agent else {}},
        }
        return load_settings(env={}, overrides=over)

    return make


@pytest.fixture
def service(make_settings: Callable[..., Any]) -> Callable[..., SelfHealService]:
    """A service whose background runs are only recorded (gate tests)."""

    def make(agent: str | None = "fix", *, launched: list[str] | None = None,
             env: dict[str, str] | None = None, **selfheal: Any) -> SelfHealService:
        settings = make_settings(agent, **selfheal)
        sink = launched if launched is not None else []
        return SelfHealService(settings, FileStore(settings.state_path),
                               launcher=sink.append, env=env or {})

    return make
