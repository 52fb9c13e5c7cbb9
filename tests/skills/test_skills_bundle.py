"""The bundle passes both official validators, and `healer skills validate` catches mistakes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from skills_helpers import VENV_BIN, child_env

from healer.agents.executors import claude_cli
from healer.config import load_settings
from healer.skills import BUNDLE_SKILL, bundle_skills

SKILLS = {"healer-bundle", "healer", "fleet-healer", "self-healing"}


def healer(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "healer", *args], cwd=cwd,
                          env=env or child_env(), capture_output=True, text=True, timeout=120)


def agentskills(path: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(VENV_BIN) / "agentskills"
    if not exe.exists():
        pytest.skip("skills-ref (agentskills) is not installed")
    return subprocess.run([str(exe), "validate", str(path)], capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def claude() -> Path:
    cli = claude_cli(load_settings(env={}))
    if cli is None:
        pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")
    return Path(cli)


def plugin_validate(claude: Path, target: Path, home: Path) -> dict[str, Any]:
    proc = subprocess.run([str(claude), "plugin", "validate", "--strict", "--json", str(target)],
                          env=child_env(HOME=str(home), CLAUDE_CONFIG_DIR=str(home / ".claude")),
                          capture_output=True, text=True, timeout=120)
    data: dict[str, Any] = json.loads(proc.stdout)
    assert (proc.returncode == 0) == data["success"], proc.stderr
    return data


def broken_skill(root: Path, name: str, front: str, body: str = "# x\n",
                 files: dict[str, str] | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text(f"---\n{front}\n---\n{body}")
    for rel, text in (files or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


class TestReferenceValidator:
    def test_every_skill_passes_agentskills_validate(self, bundle: Path, tmp_path: Path) -> None:
        """skills-ref accepts each skill folder, and the root SKILL.md in the folder it installs
        as (healer-bundle), where its name equals its folder."""
        skills = bundle_skills(bundle)
        assert {s.name for s in skills} == SKILLS
        for s in skills:
            folder = s.path
            if s.name == BUNDLE_SKILL:
                folder = tmp_path / BUNDLE_SKILL
                folder.mkdir()
                shutil.copy(s.path, folder / "SKILL.md")
            proc = agentskills(folder)
            assert proc.returncode == 0, f"{s.name}: {proc.stdout}{proc.stderr}"

    def test_agentskills_and_healer_agree_on_a_name_that_is_not_the_folder(
            self, tmp_path: Path) -> None:
        """A skill whose name differs from its folder fails both validators."""
        d = broken_skill(tmp_path, "right-name", "name: wrong-name\ndescription: Use when x.")
        assert agentskills(d).returncode != 0
        proc = healer("skills", "validate", str(d), "--json")
        assert proc.returncode == 1
        assert any("must equal its folder" in e
                   for e in json.loads(proc.stdout)["skills"][0]["errors"])


class TestHealerValidate:
    def test_the_bundle_is_valid(self, bundle: Path) -> None:
        """`healer skills validate --json` passes the bundle: four skills and the plugin, every
        script answering --help."""
        proc = healer("skills", "validate", "--json", cwd=bundle)
        data = json.loads(proc.stdout)
        assert proc.returncode == 0 and data["ok"], json.dumps(data, indent=1)
        assert {s["name"] for s in data["skills"]} == SKILLS
        for s in data["skills"]:
            assert s["body_lines"] < 500 and s["warnings"] == [], s
        assert data["plugin"]["ok"] and data["plugin"]["plugin"] == "healer"
        assert len(data["plugin"]["agents"]) == len(list((bundle / "agents").glob("*.md")))

    def test_mistakes_are_reported_one_by_one(self, tmp_path: Path) -> None:
        """Angle brackets, no 'when', unknown fields, a long body, a missing reference, a
        script that is not executable and one whose --help fails: each is an error, exit 1."""
        root = tmp_path / "skills"
        broken_skill(root, "angles", "name: angles\ndescription: Does <things>. Use when asked.")
        broken_skill(root, "no-when", "name: no-when\ndescription: Does things.")
        broken_skill(root, "extra", "name: extra\ndescription: Use when.\ntools: Bash")
        broken_skill(root, "long", "name: long\ndescription: Use when.", "line\n" * 501)
        broken_skill(root, "dangling", "name: dangling\ndescription: Use when.",
                     "Read references/missing.md and [this](../elsewhere.md).\n")
        lazy = broken_skill(root, "lazy", "name: lazy\ndescription: Use when.",
                            "Run `scripts/tool.py` and `scripts/bad.py`.\n",
                            {"scripts/tool.py": "#!/usr/bin/env python3\nprint('{}')\n",
                             "scripts/bad.py": "#!/bin/sh\nexit 4\n"})
        (lazy / "scripts" / "bad.py").chmod(0o755)
        proc = healer("skills", "validate", str(root), "--json")
        assert proc.returncode == 1
        errors = {s["name"]: " | ".join(s["errors"]) for s in json.loads(proc.stdout)["skills"]}
        assert "'<' or '>'" in errors["angles"]
        assert "say when" in errors["no-when"]
        assert "tools" in errors["extra"]
        assert "501 lines" in errors["long"]
        assert "references/missing.md" in errors["dangling"]
        assert "outside the skill folder" in errors["dangling"]
        assert "scripts/tool.py is not executable" in errors["lazy"]
        assert "scripts/bad.py --help failed (exit 4)" in errors["lazy"]

    def test_the_entry_skill_may_not_point_at_files(self, tmp_path: Path) -> None:
        """The root SKILL.md installs alone, so a link or scripts/ path in it is an error."""
        (tmp_path / "skills").mkdir()
        broken_skill(tmp_path / "skills", "one", "name: one\ndescription: Use when.")
        (tmp_path / "SKILL.md").write_text(
            "---\nname: healer-bundle\ndescription: Use when.\n---\nSee [it](docs/a.md).\n")
        proc = healer("skills", "validate", str(tmp_path), "--json")
        assert proc.returncode == 1
        entry = next(s for s in json.loads(proc.stdout)["skills"] if s["name"] == BUNDLE_SKILL)
        assert "installs alone" in " ".join(entry["errors"])

    def test_a_path_without_skills_is_a_usage_error(self, tmp_path: Path) -> None:
        """Validating a folder with no SKILL.md anywhere exits 2 with one line."""
        proc = healer("skills", "validate", str(tmp_path))
        assert proc.returncode == 2 and "no SKILL.md" in proc.stderr
        assert "Traceback" not in proc.stderr

    def test_the_script_helpers_are_one_file(self, bundle: Path) -> None:
        """Each skill carries its own copy of scripts/_healer.py (skills install alone); the
        copies are identical."""
        copies = {p.read_bytes() for p in bundle.glob("skills/*/scripts/_healer.py")}
        assert len(list(bundle.glob("skills/*/scripts/_healer.py"))) == 3 and len(copies) == 1


class TestClaudePluginValidate:
    @pytest.mark.e2e
    def test_the_repository_passes_strict_plugin_validation(
            self, claude: Path, bundle: Path, tmp_path: Path) -> None:
        """`claude plugin validate --strict .` passes, and the plugin provides the four skills,
        every agent in agents/, the MCP server through launch/healer and the hooks; no bin/
        folder (claude.ai refuses a plugin with one)."""
        data = plugin_validate(claude, bundle, tmp_path)
        assert data["success"], json.dumps(data["manifest"], indent=1)
        assert data["manifest"]["errors"] == [] and data["manifest"]["warnings"] == []
        provides = data["provides"]
        assert set(provides["skills"]) == {f"healer:{s}" for s in SKILLS}
        agents = {f"healer:{p.stem}" for p in (bundle / "agents").glob("*.md")}
        assert set(provides["agents"]) == agents
        targets = {s["target"] for s in provides["mcpServers"] if s["name"] == "healer"}
        assert "${CLAUDE_PLUGIN_ROOT}/launch/healer" in targets
        assert {h["event"] for h in provides["hooks"]} == {
            "SessionStart", "SessionEnd", "Stop", "StopFailure", "SubagentStop",
            "PostToolUseFailure", "Notification"}
        assert provides["bin"] == []

    @pytest.mark.e2e
    def test_the_manifest_alone_and_each_agent_pass(
            self, claude: Path, bundle: Path, tmp_path: Path) -> None:
        """plugin.json validates on its own, and every agents/*.md is accepted by the CLI when
        it is the only agent of a plugin."""
        assert plugin_validate(claude, bundle / ".claude-plugin" / "plugin.json",
                               tmp_path)["success"]
        for agent in sorted((bundle / "agents").glob("*.md")):
            plug = tmp_path / agent.stem
            (plug / ".claude-plugin").mkdir(parents=True)
            (plug / "agents").mkdir()
            shutil.copy(agent, plug / "agents")
            (plug / ".claude-plugin" / "plugin.json").write_text(json.dumps({
                "name": "one-agent", "version": "0.1.0", "description": "one agent",
                "author": {"name": "test"}, "license": "MIT"}))
            (plug / "README.md").write_text("A plugin with one agent, for a test. " * 4)
            data = plugin_validate(claude, plug, tmp_path)
            assert data["success"], (agent.name, data["manifest"])
            assert data["provides"]["agents"] == [f"one-agent:{agent.stem}"]

    def test_the_plugin_files_are_executable(self, bundle: Path) -> None:
        """The MCP launcher and the hook are executable files (Claude Code runs them as is)."""
        for rel in ("launch/healer", "hooks/healer_session.py"):
            assert os.access(bundle / rel, os.X_OK), rel
