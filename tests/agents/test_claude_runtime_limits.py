"""healer's own Claude runs obey the runtime-failure rules (``healer.agents.limits``).

The real bundled Claude Code CLI against the scripted model on 127.0.0.1: a rate limit makes
the run wait and launch again (or end ``deferred``, never ``failed``), and every other run on
the node waits for the same limit; a rejected key stops Claude runs (playbook fallback, one
escalation) until the credential changes. And the gate: a deferred outcome is no attempt.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from healer.agents import AgentTask, limits, playbooks
from healer.agents.executors import can_run, claude_cli
from healer.agents.executors.base import deferred_until
from healer.agents.failures import Failure
from healer.agents.results import DEFERRED, STATUSES
from healer.config import load_settings
from healer.core import gate, seeds
from healer.core.schemas import errors as schema_errors
from healer.core.schemas import schema
from healer.core.store import FileStore
from healer.testing import (
    DUMMY_API_KEY,
    Reply,
    ScriptedModel,
    hang,
    http_error,
    text,
    tool_use,
)
from healer.testing.wait import until

# As tests/agents/conftest.py: nothing but the scripted model, the CLI's retries off.
CLAUDE_TEST_ENV = {
    "CLAUDE_CODE_MAX_RETRIES": "0",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
}
# The real API's 429: the CLI honours retry-after (seconds) and x-should-retry.
RATE_LIMITED = {"retry-after": "1", "x-should-retry": "true"}
RATE_TEXT = "This request would exceed the rate limit for your organization."

AGENTS = {
    "with-playbook": "---\nname: with-playbook\ndescription: Has a playbook.\ntools: Write\n"
                     "model: haiku\n---\n\nWrite the result.\n",
    "no-playbook": "---\nname: no-playbook\ndescription: Has none.\ntools: Write\n"
                   "model: haiku\n---\n\nWrite the result.\n",
}


def write_result(status: str = "ok") -> Reply:
    doc = {"schema_version": 1, "kind": "${kind}", "target": "${target}", "status": status,
           "run_id": "${run_id}", "executor": "claude", "summary": "scripted"}
    return tool_use("Write", {"file_path": "${result_path}", "content": json.dumps(doc)})


def valid(path: str) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    assert schema_errors("agent-result", data) == []
    return data


def launches(settings: Any, run_id: str) -> int:
    """How many times the run started the CLI (one init message per launch)."""
    transcript = settings.state_path / "agents" / "runs" / run_id / "transcript.jsonl"
    if not transcript.exists():
        return 0
    return sum(1 for m in map(json.loads, transcript.read_text().splitlines())
               if m["type"] == "SystemMessage" and m.get("subtype") == "init")


def human_seeds(settings: Any) -> list[Path]:
    return sorted((settings.fleet_path / seeds.HUMAN).glob("*.md"))


@pytest.fixture
def agents_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "agents"
    folder.mkdir()
    for name, body in AGENTS.items():
        (folder / f"{name}.md").write_text(body)
    return folder


@pytest.fixture
def ran_playbook(scratch_playbooks: None) -> list[str]:
    """``with-playbook`` has a deterministic playbook; the list holds the runs it made."""
    runs: list[str] = []

    async def fallback(ctx: Any) -> dict[str, Any]:
        runs.append(ctx.run.run_id)
        return {"status": "ok", "summary": "the playbook ran"}

    playbooks.playbook("with-playbook")(fallback)
    return runs


def executor(model: ScriptedModel, settings: Any, agents_dir: Path, **env: str) -> Any:
    from healer.agents.claude import ClaudeExecutor

    return ClaudeExecutor(settings, env={**model.env(), **CLAUDE_TEST_ENV, **env},
                          agents_dir=agents_dir)


def task(agent: str = "no-playbook", target: str = "t1", **kw: Any) -> AgentTask:
    return AgentTask(agent, target, kind="probe", **kw)


# -- the real CLI ------------------------------------------------------------------------------


@pytest.mark.e2e
class TestTransient:
    @pytest.fixture(autouse=True)
    def _needs_cli(self, settings: Any) -> None:
        if claude_cli(settings) is None:
            pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")

    async def test_a_rate_limit_is_waited_out_and_the_cli_runs_again(
            self, settings: Any, agents_dir: Path) -> None:
        """429 with retry-after: 1 (twice: the CLI's one retry, then its error): the run
        records the limit, waits about the API's second, launches the CLI again and ends ok;
        the limit record was there while it waited and is gone after; no failure recorded."""
        path = limits.limit_path(settings)
        seen: list[dict[str, Any]] = []

        async def watch() -> None:
            while True:
                rec = limits.read_limit(settings)
                if rec is not None and not seen:
                    seen.append(rec)
                await asyncio.sleep(0.02)

        script = [http_error(429, "rate_limit_error", RATE_TEXT, times=2, headers=RATE_LIMITED),
                  write_result("ok"), text("done")]
        with ScriptedModel(script) as model:
            watcher = asyncio.create_task(watch())
            try:
                started = time.monotonic()
                outcome = await executor(model, settings, agents_dir,
                                         CLAUDE_CODE_MAX_RETRIES="1").run(task(timeout_s=60))
                took = time.monotonic() - started
            finally:
                watcher.cancel()
        assert outcome.ok and outcome.status == "ok", outcome.error
        assert launches(settings, outcome.run_id) == 2
        assert [r.response_status for r in model.turns[:2]] == [429, 429]
        assert model.turns[2].response_status is None  # the second launch got its answer
        assert seen and seen[0]["code"] == "T1" and seen[0]["waits"] == 1
        assert seen[0]["source"] == "api"  # the CLI's retry delay on the API's retry-after
        assert 1.0 <= seen[0]["retry_at"] - seen[0]["since"] < 5
        assert took < 30  # not the 30 s default back-off
        assert not path.exists()
        doc = valid(outcome.result_path)
        assert doc["status"] == "ok" and "failure" not in doc and "retry_at" not in doc
        assert not limits.disabled_path(settings).exists()

    async def test_a_rate_limit_past_the_time_limit_defers_and_others_wait(
            self, settings: Any, agents_dir: Path) -> None:
        """429 for good, and the back-off (30 s) is past the run's time limit: the run ends
        at once ``deferred`` with retry_at and the failure code — not failed. Another run on
        the node sees the limit and defers without launching the CLI."""
        script = [http_error(429, "rate_limit_error", RATE_TEXT, headers=RATE_LIMITED)]
        with ScriptedModel(script) as model:
            ex = executor(model, settings, agents_dir)
            outcome = await ex.run(task(timeout_s=15))
            assert outcome.status == DEFERRED and not outcome.ok, outcome.error
            assert deferred_until(outcome.exception) is not None
            assert outcome.duration_s < 12  # it did not sit out the time limit
            doc = valid(outcome.result_path)
            assert doc["status"] == DEFERRED
            assert doc["failure"]["code"] == "T1" and doc["failure"]["class"] == "transient"
            assert doc["failure"]["status"] == 429
            assert doc["retry_at"] > time.time() + 10  # now + the 30 s back-off
            assert "429" in doc["error"] and "not a failed attempt" in doc["error"]
            rec = limits.read_limit(settings)
            assert rec is not None and rec["code"] == "T1" and rec["source"] == "backoff"
            assert rec["retry_at"] == pytest.approx(doc["retry_at"], abs=0.01)
            asked = len(model.requests)

            other = await ex.run(task(target="t2", timeout_s=5))
            assert other.status == DEFERRED and other.duration_s < 3
            assert len(model.requests) == asked  # nobody hammered the API
            assert launches(settings, other.run_id) == 0
            assert valid(other.result_path)["failure"]["code"] == "T1"
        assert launches(settings, outcome.run_id) == 1
        assert not limits.disabled_path(settings).exists()

    async def test_it_resumes_once_then_defers(
            self, settings: Any, agents_dir: Path) -> None:
        """429 for good with the API's 1 s: one wait, one more launch (the rules resume
        once), then deferred with the next retry_at — long before the time limit."""
        script = [http_error(429, "rate_limit_error", RATE_TEXT, headers=RATE_LIMITED)]
        with ScriptedModel(script) as model:
            outcome = await executor(model, settings, agents_dir,
                                     CLAUDE_CODE_MAX_RETRIES="1").run(task(timeout_s=60))
        assert outcome.status == DEFERRED, outcome.error
        assert outcome.duration_s < 30
        assert launches(settings, outcome.run_id) == 2
        doc = valid(outcome.result_path)
        assert doc["failure"]["code"] == "T1" and "failed again after the wait" in doc["error"]
        rec = limits.read_limit(settings)
        assert rec is not None and rec["waits"] == 2
        assert doc["retry_at"] == pytest.approx(rec["retry_at"], abs=0.01)

    async def test_the_time_limit_passing_while_it_resumes_is_deferred_not_timeout(
            self, settings: Any, agents_dir: Path) -> None:
        """The second launch is still waiting for the model when the time limit comes: the
        run ends deferred (the model never answered), not timeout."""
        script = [http_error(429, "rate_limit_error", RATE_TEXT, times=2, headers=RATE_LIMITED),
                  hang()]
        with ScriptedModel(script) as model:
            # Room for two CLI starts and the 1 s reset on a loaded CI machine; the second
            # launch then hangs on the model until the limit.
            outcome = await executor(model, settings, agents_dir,
                                     CLAUDE_CODE_MAX_RETRIES="1").run(task(timeout_s=14))
            await until(lambda: len(model.turns) >= 3, timeout=1)
        assert outcome.status == DEFERRED, outcome.error
        assert launches(settings, outcome.run_id) == 2
        assert valid(outcome.result_path)["failure"]["code"] == "T1"


@pytest.mark.e2e
class TestRejectedKey:
    @pytest.fixture(autouse=True)
    def _needs_cli(self, settings: Any) -> None:
        if claude_cli(settings) is None:
            pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")

    async def test_a_rejected_key_stops_claude_runs_until_it_changes(
            self, settings: Any, agents_dir: Path, ran_playbook: list[str]) -> None:
        """401: the marker (no secret in it) and exactly one escalation; then the agent with a
        playbook runs it without a request to the model, the other fails at once with the
        reason; a new key runs Claude again and clears the marker."""
        from healer.doctor import claude_runs

        marker_path = limits.disabled_path(settings)
        script = [http_error(401, "authentication_error", "invalid x-api-key", times=1),
                  write_result("ok"), text("done")]
        with ScriptedModel(script) as model:
            ex = executor(model, settings, agents_dir)
            first = await ex.run(task("with-playbook"))
            assert first.status == "failed" and first.executor == "claude"
            doc = valid(first.result_path)
            assert doc["failure"]["code"] == "X1" and doc["failure"]["status"] == 401
            marker = json.loads(marker_path.read_text())
            assert marker["code"] == "X1" and marker["reason"] == ("Invalid API key · Fix "
                                                                   "external API key")
            assert marker["fingerprint"].startswith("sha256:")
            assert DUMMY_API_KEY not in marker_path.read_text()
            escalations = human_seeds(settings)
            assert len(escalations) == 1
            body = escalations[0].read_text()
            assert "API key or login rejected" in body and "Rotate the API key" in body
            assert DUMMY_API_KEY not in body
            env = ex.run_environment()
            assert not can_run(settings, "no-playbook", env, executor="claude")
            assert can_run(settings, "with-playbook", env, executor="claude")
            ok, detail = claude_runs(settings).ok, claude_runs(settings).detail
            assert not ok and detail.startswith("Claude runs are disabled since")
            asked = len(model.requests)

            # A second failure of the same credential escalates nothing more.
            assert limits.disable(settings, Failure("X1", "again"), env)[1] \
                is False

            fallback = await ex.run(task("with-playbook", target="t2"))
            assert fallback.ok and fallback.executor == "playbook", fallback.error
            assert ran_playbook == [fallback.run_id]
            assert valid(fallback.result_path)["executor"] == "playbook"

            refused = await ex.run(task("no-playbook", target="t3"))
            assert refused.status == "failed" and refused.duration_s < 3
            assert refused.error.startswith("Claude runs are disabled since ")
            assert "Invalid API key · Fix external API key" in refused.error
            assert "fix the key, then" in refused.error
            assert launches(settings, refused.run_id) == 0
            assert len(model.requests) == asked  # neither run called the model
            assert len(human_seeds(settings)) == 1

            rotated = executor(model, settings, agents_dir,
                               ANTHROPIC_API_KEY="sk-ant-scripted-rotated-key")
            again = await rotated.run(task("no-playbook", target="t4"))
            assert again.ok and again.executor == "claude", again.error
            assert launches(settings, again.run_id) == 1
        assert not marker_path.exists()
        assert claude_runs(settings).ok
        assert len(human_seeds(settings)) == 1


# -- the records, the schema, the gate ---------------------------------------------------------


def test_the_fingerprint_names_the_credential_without_holding_it(tmp_path: Path) -> None:
    home = tmp_path / "claude"
    home.mkdir()
    env = {"ANTHROPIC_API_KEY": "sk-ant-secret-one", "CLAUDE_CONFIG_DIR": str(home)}
    one = limits.fingerprint(env)
    assert "secret" not in one and one == limits.fingerprint(dict(env))
    assert limits.fingerprint({**env, "ANTHROPIC_API_KEY": "sk-ant-secret-two"}) != one
    creds = home / ".credentials.json"
    creds.write_text("{}")
    logged_in = limits.fingerprint(env)
    assert logged_in != one
    stat = creds.stat()
    os.utime(creds, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a new login
    assert limits.fingerprint(env) != logged_in


def test_the_back_off_doubles_to_the_cap_and_the_api_time_wins(dirs: Any) -> None:
    settings = load_settings(env={}, overrides=[
        f"state_dir={dirs.state}", "executor.claude.defer_base_s=10",
        "executor.claude.defer_cap_s=25"])
    fail = Failure("T2", "Overloaded", 529)
    waits = [limits.note_transient(settings, fail, now=1000.0) for _ in range(3)]
    assert [w["retry_at"] - 1000.0 for w in waits] == [10.0, 20.0, 25.0]
    assert [w["waits"] for w in waits] == [1, 2, 3] and waits[-1]["since"] == 1000.0
    limits.clear_limit(settings)
    told = limits.note_transient(settings, Failure("T1", retry_at=1300.0),
                                 now=1000.0)
    assert told["retry_at"] == 1300.0 and told["source"] == "api" and told["waits"] == 1


def test_deferred_is_a_result_status() -> None:
    assert schema("agent-result")["properties"]["status"]["enum"] == sorted(
        STATUSES, key=schema("agent-result")["properties"]["status"]["enum"].index)
    doc = {"kind": "probe", "target": "t1", "status": DEFERRED, "retry_at": 1.5e9,
           "failure": {"code": "T2", "class": "transient", "status": 529}}
    assert schema_errors("agent-result", doc) == []
    assert schema_errors("agent-result", {**doc, "failure": {"code": "nope"}}) != []


def test_a_deferred_outcome_feeds_no_breaker_and_no_cooldown(tmp_path: Path) -> None:
    """Deferred attempts only free their key: the breaker stays closed and no cooldown
    starts (even when the caller says ``breaker=True``); failed ones trip it."""
    store = FileStore(tmp_path)
    policy = gate.Policy(kind="code", cooldown_s=600, breaker_window=2, breaker_reset_s=3600)
    for i in range(4):
        d = gate.admit(store, f"k{i}", lambda i=i: f"att-{i}", 1000.0 + i, policy,
                       lambda: True, record=lambda _: None)
        assert d.accepted, d
        gate.settle(store, f"k{i}", f"att-{i}", now=1000.5 + i, kind="code", ended=True,
                    outcome=gate.DEFERRED, breaker=True)
    adm = gate.admission(store)
    assert adm["active"] == {} and adm["ended"] == {} and adm["outcomes"] == []
    assert gate.decide(adm, "k0", 1010.0, policy, lambda: True).accepted  # no cooldown
    # An old record that says deferred with a breaker flag is no failure either.
    adm["outcomes"] = [{"status": gate.DEFERRED, "at": 1005.0, "kind": "code",
                        "breaker": True}] * 2
    assert gate.decide(adm, "k9", 1010.0, policy, lambda: True).accepted
    for i in (7, 8):
        gate.admit(store, f"k{i}", lambda i=i: f"att-{i}", 1020.0, policy, lambda: True,
                   record=lambda _: None)
        gate.settle(store, f"k{i}", f"att-{i}", now=1021.0, kind="code", ended=True,
                    outcome="failed", breaker=True)
    d = gate.decide(gate.admission(store), "k9", 1022.0, policy, lambda: True)
    assert d.reason == gate.CIRCUIT_BREAKER
