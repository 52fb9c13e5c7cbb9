"""The recorded Claude Code failure shapes still hold: re-record two quick cases and compare.

``tests/agents/cli_failures/claude/`` holds what the bundled CLI printed when the model API
failed (``scripts/record_cli_failures.py``). A classifier is tested against those files; this
test re-runs the recorder for a 401 and a missing ``--resume`` id (each about a second, on
127.0.0.1 only) and checks the live output has the recorded shape, so a CLI upgrade that
changes it is noticed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from healer.testing import cli_recorder

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "agents" / "cli_failures" / "claude"
RESULT_SHAPE = ("subtype", "is_error", "api_error_status", "api_error_type", "terminal_reason")


@pytest.fixture(scope="module")
def recorder() -> Any:
    module = cli_recorder.recorder()
    if module.bundled_cli() is None:
        pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")
    return module


def _result(path: Path) -> dict[str, Any]:
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return next(e for e in reversed(events) if e.get("type") == "result")


def _assistant_error(path: Path) -> dict[str, Any] | None:
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return next((e for e in events if e.get("type") == "assistant" and e.get("error")), None)


@pytest.mark.timeout(60)
def test_auth_401_and_resume_missing_keep_their_recorded_shape(
        recorder: Any, tmp_path: Path) -> None:
    cli = recorder.bundled_cli()
    version = recorder.cli_version(cli)
    for name in ("auth_401", "resume_missing"):
        # record_case bounds each CLI run by its timeout (process group killed when it is up).
        meta = recorder.record_case(cli, recorder.CASES[name], tmp_path, 25.0, version)
        recorded = json.loads((RECORDED / f"{name}.meta.json").read_text())
        for mode, run in meta["modes"].items():
            assert not run["timed_out"], (name, mode)
            assert run["exit_code"] == recorded["modes"][mode]["exit_code"], (name, mode)

        live, then = _result(tmp_path / f"{name}.stream.jsonl"), \
            _result(RECORDED / f"{name}.stream.jsonl")
        assert {k: live.get(k) for k in RESULT_SHAPE} == {k: then.get(k) for k in RESULT_SHAPE}
        assert meta["summary"]["event_types"] == recorded["summary"]["event_types"], name

        if name == "auth_401":
            # The CLI's own words for a rejected key, in both modes, from one request.
            assert live["result"] == then["result"] == "Invalid API key · Fix external API key"
            assert (tmp_path / "auth_401.text.txt").read_text().strip() == live["result"]
            error = _assistant_error(tmp_path / "auth_401.stream.jsonl")
            assert error is not None
            assert (error["error"], error["api_error_status"], error["request_id"]) == \
                ("authentication_failed", 401, "req_scripted_auth")
            assert meta["modes"]["stream"]["requests"]["messages"] == 1  # no retry
            assert meta["summary"]["api_retry"] == []
        else:
            session = meta["modes"]["stream"]["session_id_arg"]
            message = f"No conversation found with session ID: {session}"
            assert live["errors"] == [message]
            assert then["errors"][0].startswith("No conversation found with session ID: ")
            assert (tmp_path / "resume_missing.text.txt").read_text() == ""
            text_session = meta["modes"]["text"]["session_id_arg"]
            assert f"No conversation found with session ID: {text_session}" in \
                (tmp_path / "resume_missing.text.stderr.txt").read_text()
            assert meta["modes"]["stream"]["requests"]["total"] == 0  # fails before the API
