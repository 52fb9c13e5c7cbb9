"""A small shop project with living-context layers, and plans for the scripted agent."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from healer.testing.git import git

PY = sys.executable
AGENT_SCRIPT = Path(__file__).with_name("scripted_agent.py")
SECRET = "sentry-client-secret-for-tests"
AM_TOKEN = "alertmanager-token-for-tests"
SLACK_SECRET = "slack-signing-secret-for-tests"

PAYMENT = '''"""Payments."""


def average(total, count):
    """The mean amount, in cents."""
    return total / count
'''

TESTS = '''import unittest

from app.payment import average


class TestAverage(unittest.TestCase):
    def test_average(self):
        self.assertEqual(average(10, 2), 5)

    def test_empty_basket(self):
        self.assertEqual(average(10, 0), 0)
'''

BUGGY = "    return total / count\n"
GOOD_FIX = "    return total // count if count else 0\n"
FLOAT_FIX = "    return float(total) / count if count else 0\n"
SWALLOW_FIX = ("    try:\n        return total // count\n    except ZeroDivisionError:\n"
               "        return 0\n")





def make_project(root: Path) -> Path:
    """A git repository: app/payment.py (divides by zero), two importers, a unittest suite."""
    repo = root / "shop"
    files = {
        "app/__init__.py": "",
        "app/payment.py": PAYMENT,
        "app/api.py": "from app.payment import average\n\n\ndef report(t, c):\n"
                      "    return {'avg': average(t, c)}\n",
        "app/jobs.py": "from app import payment\n\n\ndef nightly():\n"
                       "    return payment.average(1, 1)\n",
        "app/util.py": "def clamp(x):\n    return max(0, x)\n",
        "tests/__init__.py": "",
        "tests/test_payment.py": TESTS,
        ".gitignore": "__pycache__/\n",
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.invalid")
    git(repo, "config", "user.name", "dev")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "shop")
    return repo


def write_layers(folder: Path, repo: Path, *, scenario_command: str | None = None) -> Path:
    """The four layers for the shop (impact map from its real imports)."""
    from healer.context.impact import build_graph

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scenarios").mkdir(exist_ok=True)
    command = scenario_command or f"{PY} -m unittest -q tests.test_payment"
    (folder / "scenarios" / "payments.scenarios.yaml").write_text(yaml.safe_dump({
        "module": "payments", "file": "app/payment.py", "scenarios": [
            {"id": "S001", "name": "Average of a basket", "why": "receipts show it",
             "constraint": "an empty basket averages to 0, never crashes",
             "test_command": command, "tags": ["money"]}]}, sort_keys=False))
    (folder / "invariants.yaml").write_text(yaml.safe_dump([
        {"id": "INV-001", "rule": "money never goes through float", "files": ["app/*.py"],
         "check": {"forbid": r"float\("}, "severity": "critical", "category": "money"},
        {"id": "INV-002", "rule": "average keeps its signature (total, count)",
         "files": ["app/payment.py"], "severity": "critical",
         "check": f"{PY} -c \"import inspect, app.payment as p; "
                  "assert list(inspect.signature(p.average).parameters) == ['total', 'count']\""},
        {"id": "INV-003", "rule": "functions keep their docstrings", "files": ["app/payment.py"],
         "check": {"require": r'def average\([^)]*\):\n\s+"""'}, "severity": "warning"},
    ], sort_keys=False))
    (folder / "impact-map.yaml").write_text(yaml.safe_dump(build_graph(repo).impact_map()))
    (folder / "incident-memory.yaml").write_text(
        "# the shop's incident memory\n" + yaml.safe_dump([
            {"id": "INC-001", "timestamp": "2024-03-01T09:00:00Z",
             "error": "ZeroDivisionError: division by zero", "file": "app/payment.py",
             "line": 6, "root_cause": "empty baskets", "fix": "reverted",
             "lesson": "handle the empty basket explicitly",
             "anti_pattern": "catching `ZeroDivisionError` hides empty baskets",
             "anti_pattern_match": r"except\s+ZeroDivisionError", "healing_iterations": 2,
             "success": False}], sort_keys=False))
    return folder


def plan(folder: Path, *iterations: dict[str, Any]) -> Path:
    """A plan file for the scripted agent."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "plan.json"
    path.write_text(json.dumps({"iterations": list(iterations)}))
    return path


# The reproduction a scripted fix adds (the verification rule): it fails on base with the
# reported ZeroDivisionError and passes with a correct fix.
REPRO_FILE = "tests/test_empty_basket_repro.py"
REPRO = ("from app.payment import average\n\n\ndef test_an_empty_basket_averages_to_zero():\n"
         "    assert average(10, 0) == 0\n")


def edit(old: str, new: str, *, commit: str | None = "fix: empty basket", status: str = "fixed",
         file: str = "app/payment.py", summary: str = "guarded the empty basket",
         repro: bool = True) -> dict[str, Any]:
    """One iteration of the scripted agent: the edit, and (``repro``) the reproduction."""
    edits: list[dict[str, str]] = [{"file": file, "old": old, "new": new}]
    if repro:
        edits.append({"file": REPRO_FILE, "content": REPRO})
    return {"edits": edits, "commit": commit, "status": status, "summary": summary}


def agent_command(plan_path: Path) -> list[str]:
    return [PY, str(AGENT_SCRIPT), str(plan_path)]
