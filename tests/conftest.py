"""Shared fixtures: confined dirs and env for healer processes, a CLI runner; and the order
the suite runs in (the slowest files first, see ``tests/durations.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import durations
import pytest

from healer.testing.loop import healer_env


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest files first (xdist keeps this order with --no-loadscope-reorder), so no
    long file starts last while the other worker has nothing left to do."""
    seconds = durations.load()
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], 0.0))


@dataclass
class Dirs:
    root: Path
    state: Path
    results: Path
    fleet: Path

    @property
    def env(self) -> dict[str, str]:
        return healer_env(self.state, self.results, self.fleet)


@pytest.fixture
def dirs(tmp_path: Path) -> Dirs:
    d = Dirs(tmp_path, tmp_path / "state", tmp_path / "results", tmp_path / "fleet")
    for p in (d.state, d.results, d.fleet):
        p.mkdir()
    return d


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never pick up a healer.yaml, cto-config.json or env from the developer's setup."""
    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):
        if key.startswith("HEALER") or key == "GITHUB_TOKEN":  # the watcher would poll GitHub
            monkeypatch.delenv(key)


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            input: str | None = None, timeout: float = 60) -> CliResult:
    """Run the real `healer` command in a child process."""
    proc = subprocess.run(
        [sys.executable, "-m", "healer", *args], env=env, cwd=cwd, input=input,
        capture_output=True, text=True, timeout=timeout,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli(dirs: Dirs):
    def _run(*args: str, **kw):  # type: ignore[no-untyped-def]
        kw.setdefault("env", dirs.env)
        kw.setdefault("cwd", dirs.root)
        return run_cli(*args, **kw)

    return _run
