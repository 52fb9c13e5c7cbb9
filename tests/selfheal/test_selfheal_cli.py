"""`healer report` and `healer status` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from selfheal_helpers import TRACEBACK, child_env, wait_status

from healer.testing.git import git

pytestmark = pytest.mark.e2e


@pytest.fixture
def project(tmp_path: Path, repo: Path, agent_script: Callable[[str], list[str]]
            ) -> Callable[..., Path]:
    def make(agent: str = "fix", **selfheal: Any) -> Path:
        d = tmp_path / "project"
        d.mkdir(exist_ok=True)
        (d / "healer.yaml").write_text(yaml.safe_dump({
            "state_dir": str(d / "state"), "results_dir": str(d / "results"),
            "cto_config": str(d / "none.json"),
            "selfheal": {"repo": str(repo), **selfheal},
            "executor": {"default": "command",
                         "commands": {"healing-agent": agent_script(agent)}},
        }))
        return d

    return make


def healer(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "healer", *args], cwd=cwd, input=stdin,
                          capture_output=True, text=True, env=child_env(), timeout=60)


def status_json(cwd: Path, *args: str) -> dict[str, Any]:
    out = healer(cwd, "status", "--json", *args)
    assert out.returncode in (0, 1), out.stderr
    return dict(json.loads(out.stdout))


class TestReport:
    def test_report_then_status_then_merge(self, project: Any, repo: Path) -> None:
        """report accepts (exit 0), status follows it to pr_open, --refresh sees the merge."""
        d = project("fix")
        tb = d / "tb.txt"
        tb.write_text(TRACEBACK.format(root=repo))
        out = healer(d, "report", "--type", "KeyError", "--message", "'user_id'",
                     "--traceback-file", str(tb), "--json")
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout)
        assert res["accepted"] is True
        fp = res["fingerprint"]
        att = wait_status(lambda: (status_json(d, fp[:12])["attempts"] or [None])[0],
                          {"pr_open", "failed", "timeout"})
        assert att["status"] == "pr_open" and att["call_site"] == "src/app/tools.py:lookup"
        table = healer(d, "status")
        assert table.returncode == 0 and "pr_open" in table.stdout and fp[:12] in table.stdout
        git(repo, "merge", "--quiet", "--no-ff", "-m", "merge", att["branch"])
        assert status_json(d, fp, "--refresh")["attempts"][0]["status"] == "pr_merged"

    def test_duplicate_and_rejection_exit_codes(self, project: Any) -> None:
        """Joining a running attempt exits 0; a gate's refusal exits 1 with the reason."""
        d = project("hang", timeout_s=3)
        args = ["report", "--type", "KeyError", "--message", "'x'", "--call-site",
                "src/app/tools.py:lookup"]
        assert healer(d, *args).returncode == 0
        dup = healer(d, *args)
        assert dup.returncode == 0 and dup.stdout.startswith("already_investigating:")
        fp = dup.stdout.split("fingerprint: ")[1].split()[0]
        wait_status(lambda: (status_json(d, fp)["attempts"] or [None])[0], {"timeout"})
        cool = healer(d, *args)
        assert cool.returncode == 1 and cool.stdout.startswith("cooldown:")
        listed = healer(d, "status")
        assert listed.returncode == 1  # a timed-out attempt needs a person

    def test_traceback_from_stdin(self, project: Any, repo: Path) -> None:
        """--traceback-file - reads stdin; the call site comes from the traceback."""
        d = project("nothing")
        out = healer(d, "report", "--type", "KeyError", "--message", "'user_id'",
                     "--traceback-file", "-", "--json", stdin=TRACEBACK.format(root=repo))
        fp = json.loads(out.stdout)["fingerprint"]
        att = status_json(d, fp)["attempts"][0]
        assert att["call_site"] == "src/app/tools.py:lookup"


class TestUsage:
    def test_usage_errors_exit_2_without_traceback(self, project: Any) -> None:
        """Missing flags, unreadable files and bad fingerprints: one clear line, exit 2."""
        d = project()
        missing = healer(d, "report", "--message", "m")
        assert missing.returncode == 2 and "--type" in missing.stderr
        nofile = healer(d, "report", "--type", "E", "--message", "m", "--traceback-file",
                        str(d / "absent.txt"))
        assert nofile.returncode == 2 and "absent.txt" in nofile.stderr
        badfp = healer(d, "status", "../../etc")
        assert badfp.returncode == 2 and "hex" in badfp.stderr
        for res in (missing, nofile, badfp):
            assert "Traceback" not in res.stderr

    @pytest.mark.parametrize("command", ["report", "status", "mcp"])
    def test_help(self, project: Any, command: str) -> None:
        """Every command has --help with its exit codes."""
        out = healer(project(), command, "--help")
        assert out.returncode == 0 and "exit codes" in out.stdout
