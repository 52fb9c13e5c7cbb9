"""`healer skills install|uninstall|list`: every skill lands where Claude Code looks, safely."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from skills_helpers import VENV_BIN, child_env, git_repo

from healer.skills import MARKER

SKILLS = ["fleet-healer", "healer", "healer-bundle", "self-healing"]


def skills_cmd(*args: str, cwd: Path, config: Path) -> tuple[int, Any, str]:
    proc = subprocess.run([sys.executable, "-m", "healer", "skills", *args, "--json"], cwd=cwd,
                          env=child_env(CLAUDE_CONFIG_DIR=str(config)), capture_output=True,
                          text=True, timeout=60)
    out = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None
    return proc.returncode, out, proc.stderr


def actions(out: Any) -> dict[str, str]:
    return {s["name"]: s["action"] for s in out["skills"]}


class TestInstall:
    def test_default_target_is_the_personal_skills_folder(self, tmp_path: Path) -> None:
        """Without flags every skill is copied to $CLAUDE_CONFIG_DIR/skills, scripts keep
        their exec bit, the root SKILL.md becomes healer-bundle/SKILL.md."""
        config = tmp_path / "claude"
        code, out, err = skills_cmd("install", cwd=tmp_path, config=config)
        assert code == 0, err
        target = config / "skills"
        assert out["target"] == str(target) and out["changed"] is True
        assert actions(out) == dict.fromkeys(SKILLS, "installed")
        assert sorted(p.name for p in target.iterdir()) == SKILLS
        assert (target / "healer-bundle" / "SKILL.md").read_text().startswith(
            "---\nname: healer-bundle\n")
        script = target / "healer" / "scripts" / "play.py"
        assert os.access(script, os.X_OK)
        assert json.loads((target / "healer" / MARKER).read_text())["installed_by"] == "healer"

    def test_installed_skills_validate_and_their_scripts_run(self, tmp_path: Path) -> None:
        """The copies pass the reference validator and `healer skills validate` (scripts run
        from the installed folder)."""
        config = tmp_path / "claude"
        assert skills_cmd("install", cwd=tmp_path, config=config)[0] == 0
        target = config / "skills"
        for name in SKILLS:
            proc = subprocess.run([str(Path(VENV_BIN) / "agentskills"), "validate",
                                   str(target / name)], capture_output=True, text=True,
                                  timeout=60)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        code, out, _ = skills_cmd("validate", str(target), cwd=tmp_path, config=config)
        assert code == 0 and out["ok"], out

    def test_a_second_install_changes_nothing(self, tmp_path: Path) -> None:
        """Installing again reports every skill unchanged and leaves the files alone."""
        config = tmp_path / "claude"
        skills_cmd("install", cwd=tmp_path, config=config)
        skill_md = config / "skills" / "healer" / "SKILL.md"
        before = skill_md.stat().st_mtime_ns
        code, out, _ = skills_cmd("install", cwd=tmp_path, config=config)
        assert code == 0 and actions(out) == dict.fromkeys(SKILLS, "unchanged")
        assert skill_md.stat().st_mtime_ns == before

    def test_an_edited_copy_is_updated(self, tmp_path: Path) -> None:
        """A copy of healer's that differs from the bundle is replaced by the bundle's, and a
        file that is no longer in the bundle goes with it."""
        config = tmp_path / "claude"
        skills_cmd("install", cwd=tmp_path, config=config)
        copy = config / "skills" / "self-healing"
        (copy / "SKILL.md").write_text("stale")
        (copy / "references" / "old.md").write_text("gone in this version")
        code, out, _ = skills_cmd("install", cwd=tmp_path, config=config)
        assert code == 0 and actions(out)["self-healing"] == "updated"
        assert (copy / "SKILL.md").read_text().startswith("---\nname: self-healing")
        assert not (copy / "references" / "old.md").exists()
        assert not list((config / "skills").glob(".*"))  # no temp folders left behind

    def test_a_foreign_skill_of_the_same_name_stops_everything(self, tmp_path: Path) -> None:
        """A 'healer' skill healer did not install is a conflict: exit 1, nothing installed,
        the foreign skill untouched; --force replaces it."""
        config = tmp_path / "claude"
        foreign = config / "skills" / "healer"
        foreign.mkdir(parents=True)
        (foreign / "SKILL.md").write_text("someone else's")
        code, out, _ = skills_cmd("install", cwd=tmp_path, config=config)
        assert code == 1 and out["changed"] is False
        assert actions(out)["healer"] == "conflict"
        assert sorted(p.name for p in (config / "skills").iterdir()) == ["healer"]
        assert (foreign / "SKILL.md").read_text() == "someone else's"
        code, out, _ = skills_cmd("install", "--force", cwd=tmp_path, config=config)
        assert code == 0 and actions(out)["healer"] == "updated"
        assert (foreign / MARKER).is_file()

    def test_a_symlink_in_the_way_is_replaced_not_followed(self, tmp_path: Path) -> None:
        """With --force a symlinked skill folder is replaced by a copy; what it pointed at
        stays as it was."""
        config = tmp_path / "claude"
        elsewhere = tmp_path / "mine"
        elsewhere.mkdir()
        (elsewhere / "SKILL.md").write_text("mine")
        (config / "skills").mkdir(parents=True)
        (config / "skills" / "healer").symlink_to(elsewhere)
        assert skills_cmd("install", cwd=tmp_path, config=config)[0] == 1
        assert skills_cmd("install", "--force", cwd=tmp_path, config=config)[0] == 0
        assert not (config / "skills" / "healer").is_symlink()
        assert (elsewhere / "SKILL.md").read_text() == "mine"

    def test_project_installs_into_the_repository(self, tmp_path: Path) -> None:
        """--project puts the skills in .claude/skills at the top of the current git
        repository, also when run from a sub-folder."""
        repo = git_repo(tmp_path / "repo")
        sub = repo / "src" / "deep"
        sub.mkdir(parents=True)
        code, out, _ = skills_cmd("install", "--project", cwd=sub, config=tmp_path / "c")
        assert code == 0 and out["target"] == str(repo / ".claude" / "skills")
        assert sorted(p.name for p in (repo / ".claude" / "skills").iterdir()) == SKILLS

    def test_only_and_dry_run(self, tmp_path: Path) -> None:
        """--only picks skills; --dry-run says what would happen and writes nothing; an
        unknown name is a usage error."""
        target = tmp_path / "t"
        code, out, _ = skills_cmd("install", "--target", str(target), "--only",
                                  "self-healing", "--dry-run", cwd=tmp_path, config=tmp_path)
        assert code == 0 and actions(out) == {"self-healing": "installed"}
        assert not target.exists()
        code, _, err = skills_cmd("install", "--target", str(target), "--only", "nope",
                                  cwd=tmp_path, config=tmp_path)
        assert code == 2 and "unknown skill nope" in err

    def test_a_target_that_is_a_file_is_refused(self, tmp_path: Path) -> None:
        """--target pointing at a file: exit 2, one line, no traceback."""
        f = tmp_path / "file"
        f.write_text("x")
        code, _, err = skills_cmd("install", "--target", str(f), cwd=tmp_path, config=tmp_path)
        assert code == 2 and "not a directory" in err and "Traceback" not in err


class TestUninstallAndList:
    def test_uninstall_removes_only_healers_copies(self, tmp_path: Path) -> None:
        """Uninstall removes what healer installed and leaves a foreign skill of the same
        name (reported as a conflict, exit 1)."""
        config = tmp_path / "claude"
        skills_cmd("install", cwd=tmp_path, config=config)
        healer_copy = config / "skills" / "healer"
        for p in sorted(healer_copy.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        (healer_copy / "SKILL.md").write_text("now someone else's")
        code, out, _ = skills_cmd("uninstall", cwd=tmp_path, config=config)
        assert code == 1 and actions(out)["healer"] == "conflict"
        assert [p.name for p in (config / "skills").iterdir()] == ["healer"]

    def test_list_shows_the_state_of_each_skill(self, tmp_path: Path) -> None:
        """list reports installed, outdated, foreign and not installed, with descriptions."""
        config = tmp_path / "claude"
        skills_cmd("install", "--only", "healer", "--only", "self-healing", cwd=tmp_path,
                   config=config)
        marker = config / "skills" / "self-healing" / MARKER
        marker.write_text(json.dumps({**json.loads(marker.read_text()), "digest": "old"}))
        foreign = config / "skills" / "fleet-healer"
        foreign.mkdir()
        (foreign / "SKILL.md").write_text("x")
        code, out, _ = skills_cmd("list", cwd=tmp_path, config=config)
        assert code == 0
        state = {s["name"]: s["state"] for s in out["skills"]}
        assert state == {"healer-bundle": "not installed", "healer": "installed",
                         "self-healing": "outdated", "fleet-healer": "foreign"}
        assert all("Use when" in s["description"] for s in out["skills"])
