"""Fixtures for the skill bundle: a sandbox per skill in which its documented commands run.

A sandbox is a project folder (the commands' working directory), an environment confined to
temp dirs, and whatever the skill's examples talk about: a `healer serve` for the play API,
a git repository with a bug and its context layers, a real local fleet on loopback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from skills_docs import Command, skill_dir

from healer.resources import bundle_root
from healer.testing.git import git
from healer.testing.loop import healer_env

VENV_BIN = str(Path(sys.executable).parent)
CLAUDE_TEST_ENV = {
    # Fail fast, never leave the machine: proxies point at a closed loopback port.
    "CLAUDE_CODE_MAX_RETRIES": "0",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
}
AGENT_LOG = """\
2025-03-01T10:00:00Z level=info msg="agent rex starting" errors=0
2025-03-01T10:00:02Z Tool inventory MISMATCH: missing tools: brave_search
2025-03-01T10:00:05Z level=info msg="retrying in 5s" will retry
2025-03-01T10:01:10Z level=error msg="dial tcp 127.0.0.1:5432: connection refused"
2025-03-01T10:01:11Z level=info msg="task 1 done"
"""
ESCALATION_AT = datetime(2025, 3, 1, 10, 15, tzinfo=UTC).timestamp()




def git_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "dev@example.com")
    git(path, "config", "user.name", "Dev")
    return path


def child_env(**extra: str) -> dict[str, str]:
    """This environment without any HEALER setting, with the venv's tools first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HEALER", "CLAUDE"))}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


@dataclass
class Sandbox:
    """Where one skill's documented commands run, in document order, sharing state."""

    skill: str
    cwd: Path
    env: dict[str, str]
    before: dict[str, Callable[[], None]] = field(default_factory=dict)
    settle: Callable[[], None] = lambda: None

    def run(self, cmd: Command, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        for needle, hook in self.before.items():
            if needle in cmd.text:
                hook()
        env = {**self.env, "CLAUDE_SKILL_DIR": str(skill_dir(self.skill))}
        # The documentation's own shell line, exactly as a user (or Claude's Bash tool) runs it.
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd.text], cwd=self.cwd,
                              env=env, capture_output=True, text=True, timeout=timeout)
        self.settle()
        return proc


@pytest.fixture
def base_env(tmp_path: Path) -> dict[str, str]:
    state, results, fleet = tmp_path / "state", tmp_path / "results", tmp_path / "fleet"
    for d in (state, results, fleet):
        d.mkdir(exist_ok=True)
    env = healer_env(state, results, fleet, HEALER_EXECUTOR="playbook")
    env.update(child_env(**{k: v for k, v in env.items() if k.startswith("HEALER")}))
    env["CLAUDE_CONFIG_DIR"] = str(tmp_path / "claude-config")
    return env


@pytest.fixture
def bundle_sandbox(tmp_path: Path, base_env: dict[str, str]) -> Sandbox:
    """The entry skill's install steps: a git project to install into."""
    return Sandbox("healer-bundle", git_repo(tmp_path / "project"), base_env)


@pytest.fixture
def healer_sandbox(tmp_path: Path, base_env: dict[str, str]) -> Iterator[Sandbox]:
    """A running `healer serve`, an agent log, a session body, one waiting escalation."""
    from healer.core import seeds
    from healer.testing.api import ServeProcess

    project = tmp_path / "project"
    project.mkdir()
    (project / "agent.log").write_text(AGENT_LOG)
    shutil.copy(skill_dir("healer") / "references" / "session-start.example.json",
                project / "session.json")
    seeds.write(Path(base_env["HEALER_FLEET_DIR"]), seeds.Seed(
        sender="ops", to=seeds.HUMAN, subject="[HEAL-A10] rex is missing declared tools",
        body="# rex is missing declared tools\n\n## What you should do next\n\n- Add the "
             "tool.\n", type="escalation", severity="critical", incident="inc-1"),
        clock=ESCALATION_AT)
    serve = ServeProcess({**base_env, "HEALER__PLAY__REEVALUATE_AFTER_S": "0"})
    try:
        yield Sandbox("healer", project, {**base_env, "HEALER_URL": serve.url})
    finally:
        serve.close()


FIX_AGENT = """\
import pathlib, subprocess
pathlib.Path("test_calc_strings.py").write_text(
    "from src.app.calc import total\\n\\n\\ndef test_amounts_as_strings():\\n"
    "    assert total([1, '2']) == 3\\n")
pathlib.Path("src/app/calc.py").write_text(
    "def total(items):\\n    return sum(float(x) for x in items)\\n")
subprocess.run(["git", "add", "src/app/calc.py", "test_calc_strings.py"], check=True)
subprocess.run(["git", "commit", "-qm", "fix: sum amounts that arrive as strings"], check=True)
"""


@pytest.fixture
def selfheal_sandbox(tmp_path: Path, base_env: dict[str, str]) -> Sandbox:
    """A git project with a bug, its context layers, a scripted healing agent that fixes it."""
    from healer.core.store import FileStore
    from healer.selfheal.attempts import Attempts

    project = git_repo(tmp_path / "project")
    (project / "src" / "app").mkdir(parents=True)
    (project / "src" / "__init__.py").write_text("")
    (project / "src" / "app" / "__init__.py").write_text("")
    (project / "src" / "app" / "calc.py").write_text("def total(items):\n    return sum(items)\n")
    (project / "test_calc.py").write_text(
        "from src.app.calc import total\n\n\ndef test_total():\n    assert total([1, 2]) == 3\n")
    (project / ".gitignore").write_text(".healer/\n__pycache__/\n.pytest_cache/\n")
    git(project, "add", ".")
    git(project, "commit", "-qm", "initial")
    # The fix `healer context verify` measures: an uncommitted change in the working tree.
    (project / "src" / "app" / "calc.py").write_text(
        "def total(items):\n    # amounts may arrive as strings\n    return sum(items)\n")
    scenarios = project / ".healer" / "context" / "scenarios"
    scenarios.mkdir(parents=True)
    (scenarios / "src-app-calc.scenarios.yaml").write_text(yaml.safe_dump({
        "module": "app", "file": "src/app/calc.py", "scenarios": [{
            "id": "S001", "name": "totals add up", "why": "invoices show the sum of lines",
            "constraint": "the total of no lines is 0",
            "test_command": f"{sys.executable} -m pytest -q -p no:cacheprovider test_calc.py",
            "tags": ["critical"]}]}))
    (project / "error.json").write_text(json.dumps({
        "message": "TypeError: unsupported operand type(s) for +: 'int' and 'str'",
        "file": "src/app/calc.py", "line": 2, "source": "manual", "severity": "high"}))
    (project / "tb.txt").write_text(textwrap.dedent("""\
        Traceback (most recent call last):
          File "src/app/calc.py", line 2, in total
            return sum(items)
        TypeError: unsupported operand type(s) for +: 'int' and 'str'
        """))
    (project / "UNFIXABLE").write_text(
        "Root cause: the payment processor's API answers HTTP 503 to every request.\n"
        "This is an upstream outage, not a bug in this code.\n"
        "Recommendation: the operator should check the provider's status page.\n")
    agent = tmp_path / "fix_agent.py"
    agent.write_text(FIX_AGENT)
    (project / "healer.yaml").write_text(yaml.safe_dump({
        "selfheal": {"repo": str(project)},
        "executor": {"default": "command",
                     "commands": {"healing-agent": [sys.executable, str(agent)]}}}))
    env = {k: v for k, v in base_env.items() if k != "HEALER_EXECUTOR"}
    attempts = Attempts(FileStore(Path(env["HEALER_STATE_DIR"])))

    def settle() -> None:
        """Let a detached healing worker finish before the next command (and the test end)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            active = [a for a in attempts.all()
                      if a.get("status") in ("dispatch_pending", "investigating")]
            if not active:
                return
            time.sleep(0.1)
        raise AssertionError(f"healing attempts still running: {active}")

    return Sandbox("self-healing", project, env, settle=settle)


@pytest.fixture(scope="module")
def local_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real two-node fleet on loopback (NATS, sshd, node daemons, tunnels)."""
    from healer.testing.fleet import LocalFleet, nats_server_binary, sshd_binary

    if not nats_server_binary() or not sshd_binary():
        pytest.skip("nats-server or sshd is not installed")
    fleet = LocalFleet(tmp_path_factory.mktemp("fleet"), nodes=2).start()
    try:
        yield fleet
    finally:
        fleet.stop()


def settings_yaml(overrides: list[str]) -> dict[str, Any]:
    """``key.sub=value`` overrides (as LocalFleet gives them) → a nested healer.yaml."""
    tree: dict[str, Any] = {}
    for item in overrides:
        key, _, raw = item.partition("=")
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        try:
            node[leaf] = json.loads(raw)
        except ValueError:
            node[leaf] = raw
    return tree


@pytest.fixture
def fleet_sandbox(tmp_path: Path, local_fleet: Any) -> Sandbox:
    """The local fleet as the project's fleet; `heal n2` finds n2's tunnel dead first."""
    local_fleet.reset()
    project = tmp_path / "project"
    project.mkdir()
    (project / "healer.yaml").write_text(yaml.safe_dump(settings_yaml(local_fleet.overrides())))
    return Sandbox("fleet-healer", project,
                   child_env(CLAUDE_CONFIG_DIR=str(tmp_path / "claude-config")),
                   before={"healer fleet heal n2": lambda: local_fleet.kill_tunnel("n2")})


@pytest.fixture
def bundle() -> Path:
    return bundle_root()
