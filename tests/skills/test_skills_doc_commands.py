"""Every command a skill tells Claude to run exists and exits 0 on its documented example.

The commands come from the fenced shell blocks of the skills' Markdown (skills_docs); each
skill's run in a sandbox that holds what its examples talk about (conftest).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from skills_docs import EXAMPLE_ONLY, Command, commands, skill_docs
from skills_helpers import Sandbox

SKILLS = ("healer-bundle", "healer", "self-healing", "fleet-healer")
MAX_EXAMPLE_ONLY = 3


LIVE_RETRIES = 2


def _live_probe(text: str) -> bool:
    return bool(re.search(r"\bhealer fleet (status|probe)\b", text))


def all_commands(skill: str) -> list[Command]:
    return [c for doc in skill_docs(skill) for c in commands(doc)]


def run_all(sandbox: Sandbox) -> list[tuple[Command, str]]:
    """Run a skill's commands in order; return the ones that failed, with the evidence."""
    failures = []
    ran = 0
    for cmd in all_commands(sandbox.skill):
        if cmd.example_only:
            continue
        ran += 1
        proc = sandbox.run(cmd)
        for _ in range(LIVE_RETRIES if _live_probe(cmd.text) else 0):
            if proc.returncode != 1:
                break
            # A live probe of a real fleet found a channel slow on a loaded machine (exit 1:
            # something is broken); the documented command itself worked. Ask again.
            proc = sandbox.run(cmd)
        if proc.returncode != 0:
            failures.append((cmd, f"exit {proc.returncode}\nstdout: {proc.stdout[-1500:]}\n"
                                  f"stderr: {proc.stderr[-1500:]}"))
    assert ran, f"{sandbox.skill}: no runnable command found"
    return failures


def report(failures: list[tuple[Command, str]]) -> str:
    return "\n\n".join(f"{c.where()}: {c.text}\n{why}" for c, why in failures)


class TestDocumentedCommands:
    def test_the_entry_skill_install_steps_run(self, bundle_sandbox: Sandbox) -> None:
        """The install and first-run commands of the root SKILL.md work in a fresh project,
        and `healer skills install --project` leaves every skill in .claude/skills."""
        failures = run_all(bundle_sandbox)
        assert not failures, report(failures)
        installed = bundle_sandbox.cwd / ".claude" / "skills"
        assert sorted(p.name for p in installed.iterdir()) == sorted(SKILLS)

    def test_the_healer_skill_commands_run(self, healer_sandbox: Sandbox) -> None:
        """Scanning, the play-session API (start, inventory, logs, show, finish), curl
        against it, and the escalation inbox all work as documented."""
        failures = run_all(healer_sandbox)
        assert not failures, report(failures)
        # The documented archive step really moved the escalation.
        human = Path(healer_sandbox.env["HEALER_FLEET_DIR"]) / "human"
        assert (human / "archive" / "20250301-101500-from-ops.md").is_file()

    def test_the_self_healing_skill_commands_run(self, selfheal_sandbox: Sandbox) -> None:
        """report → a healing run that ends with a PR, the status commands, the context
        checks, the UNFIXABLE steps and the living-context commands all work as documented."""
        failures = run_all(selfheal_sandbox)
        assert not failures, report(failures)
        proc = selfheal_sandbox.run(Command(Path("x"), 0, "healer status --json"))
        attempts = json.loads(proc.stdout)["attempts"]
        assert [a["status"] for a in attempts] == ["pr_open"], attempts

    @pytest.mark.e2e
    def test_the_fleet_healer_skill_commands_run(self, fleet_sandbox: Sandbox) -> None:
        """Against a real two-node fleet: status, probe, the report script, heal (of a
        tunnel killed just before), send, and the agent commands all work as documented."""
        failures = run_all(fleet_sandbox)
        assert not failures, report(failures)


class TestExampleOnlyLines:
    def test_few_lines_are_exempt_and_each_says_why(self) -> None:
        """At most a few documented commands are marked example-only, each with a reason."""
        exempt = [c for s in SKILLS for c in all_commands(s) if c.example_only]
        assert len(exempt) <= MAX_EXAMPLE_ONLY, [c.where() for c in exempt]
        for c in exempt:
            reason = c.text.split(EXAMPLE_ONLY, 1)[1]
            assert re.search(r"\w{3,}", reason), f"{c.where()}: say why it is not run"

    def test_example_only_healer_commands_exist_with_their_flags(self) -> None:
        """A healer command that is not run still exists: its --help exits 0 and names every
        flag the example uses."""
        for c in (c for s in SKILLS for c in all_commands(s) if c.example_only):
            argv = shlex.split(c.text.split(EXAMPLE_ONLY, 1)[0], comments=True)
            if argv[0] != "healer":
                continue
            words = [a for a in argv[1:] if not a.startswith("-")][:1]
            proc = subprocess.run([sys.executable, "-m", "healer", *words, "--help"],
                                  capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, c.where()
            for flag in (a for a in argv if a.startswith("--")):
                assert flag in proc.stdout, f"{c.where()}: {flag} is not an option"

    def test_every_skill_documents_runnable_commands(self) -> None:
        """Each skill shows at least three commands, and every script of a skill appears in
        one of its runnable commands."""
        for skill in SKILLS:
            runnable = [c for c in all_commands(skill) if not c.example_only]
            assert len(runnable) >= 3, skill
            if skill == "healer-bundle":
                continue  # the entry skill has no scripts of its own
            folder = skill_docs(skill)[0].parent
            text = " ".join(c.text for c in runnable)
            for script in sorted((folder / "scripts").glob("[a-z]*.py")):
                assert f"scripts/{script.name}" in text, f"{skill}: {script.name} never run"
