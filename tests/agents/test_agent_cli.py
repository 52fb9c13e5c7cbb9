"""`healer agents list|run|prompt` from the command line, as an operator runs them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.core.schemas import errors as schema_errors

CLAUDE_ENV = {"CLAUDE_CODE_MAX_RETRIES": "0", "HTTPS_PROXY": "http://127.0.0.1:9",
              "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost"}

DIAGNOSER_SCRIPT = """\
- text: Probing the peer.
  tool: Bash
  input: {command: "curl -sS -m 3 http://127.0.0.1:9/health"}
- tool: Write
  input:
    file_path: "${result_path}"
    content:
      schema_version: 1
      kind: "${kind}"
      target: "${target}"
      run_id: "${run_id}"
      status: diagnosed
      executor: claude
      summary: HTTP to the peer is refused.
      channels: {http: {ok: false, detail: connection refused}}
- text: Done.
"""


@pytest.fixture
def model_url(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """`python -m healer.testing.scripted_model --script FILE` running; yields its URL."""
    script = tmp_path / "script.yaml"
    script.write_text(getattr(request, "param", DIAGNOSER_SCRIPT))
    proc = subprocess.Popen([sys.executable, "-m", "healer.testing.scripted_model",
                             "--script", str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip().split("=", 1)[1]
    finally:
        proc.terminate()
        proc.wait(10)


def valid(path: str) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    assert schema_errors("agent-result", data) == []
    return data


class TestList:
    def test_json_lists_every_definition(self, cli: Any) -> None:
        """`agents list --json` gives name, description, tools and whether a playbook exists."""
        r = cli("agents", "list", "--json")
        assert r.code == 0, r.err
        rows = {row["name"]: row for row in json.loads(r.out)}
        assert len(rows) >= 10
        assert rows["channel-diagnoser"]["has_playbook"] is True
        tools = rows["healing-agent"]["tools"]
        assert tools[:5] == ["Read", "Write", "Edit", "Glob", "Grep"]
        assert "Bash(git commit:*)" in tools and "Bash" not in tools

    def test_table(self, cli: Any) -> None:
        """The plain listing is a table with a header."""
        r = cli("agents", "list")
        assert r.code == 0 and r.out.startswith("NAME") and "channel-diagnoser" in r.out


class TestRun:
    @pytest.mark.e2e
    def test_playbook_run(self, cli: Any, dirs: Any, health_server: int) -> None:
        """A playbook run prints its outcome and lands a valid result in the results dir."""
        r = cli("agents", "run", "channel-diagnoser", "--executor", "playbook", "--target",
                "peer1", "--var", "host=127.0.0.1", "--var", f"port={health_server}", "--json")
        assert r.code == 0, r.err
        out = json.loads(r.out)
        assert Path(out["result_path"]).parent == dirs.results
        data = valid(out["result_path"])
        assert data["executor"] == "playbook" and data["channels"]["http"]["ok"]

    @pytest.mark.e2e
    def test_claude_run_against_the_scripted_model(self, cli: Any, dirs: Any,
                                                   model_url: str) -> None:
        """The same agent with --executor claude, against a scripted model server, works."""
        env = {**dirs.env, **CLAUDE_ENV, "ANTHROPIC_BASE_URL": model_url,
               "ANTHROPIC_API_KEY": "dummy"}
        r = cli("agents", "run", "channel-diagnoser", "--executor", "claude", "--target",
                "peer1", "--var", "host=127.0.0.1", "--timeout", "120", env=env)
        assert r.code == 0, r.err
        assert "(claude): diagnosed" in r.out and "http     FAIL  connection refused" in r.out
        results = list(dirs.results.glob("heal-diagnose-peer1-*.json"))
        assert len(results) == 1 and valid(str(results[0]))["executor"] == "claude"
        assert "tool Bash" in r.err  # the agent's messages stream to the log

    @pytest.mark.e2e
    @pytest.mark.parametrize("model_url", ["- fault: http_error\n  status: 400\n"
                                           "  error_type: invalid_request_error\n"
                                           "  message: bad request\n"], indirect=True)
    def test_failed_claude_run_exits_1(self, cli: Any, dirs: Any, model_url: str) -> None:
        """A run whose model rejects the request (X4: not transient) exits 1 with a failed
        result on the bus."""
        env = {**dirs.env, **CLAUDE_ENV, "ANTHROPIC_BASE_URL": model_url,
               "ANTHROPIC_API_KEY": "dummy"}
        r = cli("agents", "run", "channel-diagnoser", "--executor", "claude", "--target",
                "peer1", "--json", env=env)
        assert r.code == 1
        out = json.loads(r.out)
        assert out["status"] == "failed" and out["error_type"] == "AgentResultError"
        assert valid(out["result_path"])["status"] == "failed"

    def test_no_playbook_exits_3(self, cli: Any) -> None:
        """An agent with no playbook cannot run as one here: exit 3, failed result written."""
        r = cli("agents", "run", "healing-agent", "--executor", "playbook", "--target", "fp1")
        assert r.code == 3 and "no playbook registered" in r.out

    @pytest.mark.parametrize("args,message", [
        (["no-such-agent", "--target", "x"], "unknown agent"),
        (["channel-diagnoser", "--target", "../etc"], "target"),
        (["channel-diagnoser", "--target", "x", "--var", "host=-oProxyCommand=sh"], "host"),
        (["channel-diagnoser", "--target", "x", "--var", "novalue"], "KEY=VALUE"),
        (["channel-diagnoser", "--target", "x", "--var", "logs=@/nonexistent"], "cannot read"),
        (["channel-diagnoser"], "--target"),
    ])
    def test_usage_errors_exit_2(self, cli: Any, args: list[str], message: str) -> None:
        """Bad names, vars and missing flags are one clear line and exit 2, nothing run."""
        r = cli("agents", "run", *args, "--executor", "playbook")
        assert r.code == 2, r.out + r.err
        assert message in r.err and "Traceback" not in r.err


class TestPrompt:
    def test_prints_the_task_prompt_with_fleet_config(self, cli: Any, dirs: Any) -> None:
        """A target that is a node in the fleet config takes its address from there;
        `--var k=@file` reads a file."""
        config = dirs.root / "fleet.json"
        config.write_text(json.dumps({"chief": {"nodeId": "chief", "host": "127.0.0.1"},
                                      "nodes": {"peer9": {"host": "127.0.0.9", "port": 9955,
                                                          "user": "fleet"}}}))
        problem = dirs.root / "problem.txt"
        problem.write_text("messages fell back to ``` the seed channel")
        env = {**dirs.env, "HEALER_FLEET_CONFIG": str(config)}
        r = cli("agents", "prompt", "channel-diagnoser", "--target", "peer9", "--var",
                f"problem=@{problem}", env=env)
        assert r.code == 0, r.err
        assert "`http://127.0.0.9:9955/health`" in r.out and "ssh user `fleet`" in r.out
        assert re.search(r"<<<BEGIN UNTRUSTED DATA ([0-9a-f]{16})>>>\nmessages fell back to "
                         r"``` the seed channel\n<<<END UNTRUSTED DATA \1>>>", r.out)
