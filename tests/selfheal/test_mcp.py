"""The MCP surface: a real MCP client session over stdio against ``healer mcp``.

The server is started exactly as Claude Code would start it from the repository's shipped
``.mcp.json``; accepted reports run in detached workers with a scripted healing agent.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from selfheal_helpers import FIXABLE_REPORT, child_env

from healer.resources import bundle_root

pytestmark = pytest.mark.e2e

MCP_JSON = bundle_root() / ".mcp.json"


def report(n: int) -> dict[str, str]:
    return {"error_type": "KeyError", "error_message": "'user_id'",
            "call_site": f"src/app/mod{n}.py:handler"}


@pytest.fixture
def workdir(tmp_path: Path, repo: Path, agent_script: Callable[[str], list[str]]
            ) -> Callable[..., Path]:
    """A project dir with a healer.yaml healing ``repo`` with the given scripted agent."""

    def make(agent: str, **selfheal: Any) -> Path:
        d = tmp_path / f"work-{agent}"
        d.mkdir()
        (d / "healer.yaml").write_text(yaml.safe_dump({
            "state_dir": str(d / "state"), "results_dir": str(d / "results"),
            "cto_config": str(d / "none.json"),
            "selfheal": {"repo": str(repo), **selfheal},
            "executor": {"default": "command",
                         "commands": {"healing-agent": agent_script(agent)}},
        }))
        return d

    return make


class Session:
    """A connected MCP client: ``call`` returns the tool's structured result."""

    def __init__(self, session: Any):
        self.session = session

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        res = await self.session.call_tool(tool, args)
        assert not res.is_error, res.content
        return dict(res.structured_content)

    async def wait(self, fp: str, statuses: set[str], timeout: float = 40) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = await self.call("get_healing_status", {"fingerprint": fp})
            if found["attempts"] and found["attempts"][0]["status"] in statuses:
                return dict(found["attempts"][0])
            await anyio.sleep(0.2)
        raise AssertionError(f"{fp[:12]} never reached {statuses}")


@asynccontextmanager
async def connect(cwd: Path) -> AsyncIterator[Session]:
    """Start the server from .mcp.json (``healer`` on PATH, as in an activated venv)."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    spec = json.loads(MCP_JSON.read_text())["mcpServers"]["healer"]
    env = child_env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    params = StdioServerParameters(command=spec["command"], args=spec["args"], env=env,
                                   cwd=str(cwd))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield Session(session)


class TestTools:
    async def test_tools_have_typed_schemas(self, workdir: Any) -> None:
        """Both tools are listed with typed input schemas and structured output schemas."""
        async with connect(workdir("fix")) as s:
            tools = {t.name: t for t in (await s.session.list_tools()).tools}
        assert set(tools) == {"report_error", "get_healing_status"}
        report_schema = tools["report_error"].input_schema
        assert set(report_schema["required"]) == {"error_type", "error_message"}
        assert set(report_schema["properties"]) == {
            "error_type", "error_message", "traceback", "call_site", "context", "tool_name",
            "severity_hint"}
        hint = json.dumps(report_schema["properties"]["severity_hint"])
        assert all(level in hint for level in ("critical", "high", "medium", "low"))
        out = tools["report_error"].output_schema
        assert set(out["required"]) == {"accepted", "fingerprint", "message"}
        assert "attempts" in tools["get_healing_status"].output_schema["properties"]

    async def test_bad_arguments_are_tool_errors(self, workdir: Any) -> None:
        """Invalid input is a tool error with a clear message, and the server lives on."""
        async with connect(workdir("fix")) as s:
            bad = await s.session.call_tool("report_error", {"error_type": "KeyError"})
            assert bad.is_error
            bad = await s.session.call_tool("get_healing_status", {"fingerprint": "../x"})
            assert bad.is_error and "hex" in bad.content[0].text
            assert (await s.call("get_healing_status", {}))["count"] == 0


class TestProtocol:
    async def test_seed_report_to_pr_and_duplicate_joins(self, workdir: Any) -> None:
        """The seed's example is accepted, a duplicate joins it, and it ends with a PR."""
        async with connect(workdir("fix")) as s:
            first = await s.call("report_error", FIXABLE_REPORT)
            assert first["accepted"] is True and first["message"] == "Healing agent dispatched"
            dup = await s.call("report_error", FIXABLE_REPORT)
            assert dup["reason"] == "already_investigating"
            assert dup["attempt_id"] == first["attempt_id"]
            final = await s.wait(first["fingerprint"], {"pr_open", "failed", "timeout"})
            assert final["status"] == "pr_open", final
            assert final["pr_url"].startswith("file://") and final["pr_number"] == 1
            listed = await s.call("get_healing_status", {})
            assert [a["attempt_id"] for a in listed["attempts"]] == [first["attempt_id"]]
            short = await s.call("get_healing_status", {"fingerprint": first["fingerprint"][:12]})
            assert short["count"] == 1

    async def test_a_report_over_stdio_is_trusted_even_where_approval_is_asked(
            self, workdir: Any) -> None:
        """The stdio pipe is the local session that started the server: its reports are
        trusted — accepted at once under the default code.approval — while `always` makes
        even those wait for a person."""
        from healer.core.incidents import Ledger
        from healer.core.store import FileStore

        d = workdir("nothing")
        async with connect(d) as s:
            out = await s.call("report_error", report(7))
            assert out["accepted"] is True, out
        inc = Ledger(FileStore(d / "state")).require(f"code-{out['fingerprint']}")
        assert inc["trust"] == "trusted"
        config = yaml.safe_load((d / "healer.yaml").read_text())
        (d / "healer.yaml").write_text(yaml.safe_dump({**config,
                                                       "code": {"approval": "always"}}))
        async with connect(d) as s:
            held = await s.call("report_error", report(8))
        assert (held["accepted"], held["reason"]) == (False, "awaiting_approval")

    async def test_cooldown_after_a_terminal_attempt(self, workdir: Any) -> None:
        """When the attempt has ended (failed), the same error gets cooldown."""
        async with connect(workdir("nothing")) as s:
            first = await s.call("report_error", report(1))
            await s.wait(first["fingerprint"], {"failed"})
            again = await s.call("report_error", report(1))
            assert again["accepted"] is False and again["reason"] == "cooldown"
            assert again["message"].startswith("Cooldown period active")

    async def test_breaker_after_five_failures(self, workdir: Any) -> None:
        """Five failed attempts in a row: the next new error hits the circuit breaker."""
        async with connect(workdir("nothing")) as s:
            for batch in ((0, 1), (2, 3), (4,)):
                fps = []
                for n in batch:
                    out = await s.call("report_error", report(n))
                    assert out["accepted"], out
                    fps.append(out["fingerprint"])
                for fp in fps:
                    await s.wait(fp, {"failed"})
            tripped = await s.call("report_error", report(99))
            assert tripped["reason"] == "circuit_breaker"

    async def test_cap_at_two(self, workdir: Any) -> None:
        """Two attempts investigating: a third error is refused with concurrency_cap."""
        async with connect(workdir("hang", timeout_s=3)) as s:
            a = await s.call("report_error", report(1))
            b = await s.call("report_error", report(2))
            c = await s.call("report_error", report(3))
            assert a["accepted"] and b["accepted"]
            assert c == {"accepted": False, "fingerprint": c["fingerprint"],
                         "reason": "concurrency_cap", "message": c["message"]}
            for fp in (a["fingerprint"], b["fingerprint"]):
                assert (await s.wait(fp, {"timeout"}))["status"] == "timeout"

    async def test_recovery_at_start_up(self, workdir: Any) -> None:
        """A worker that died leaves investigating; the next server start settles it."""
        from healer.core.store import FileStore
        from healer.selfheal.attempts import Attempts

        cwd = workdir("fix")
        store = FileStore(cwd / "state")
        async with connect(cwd) as s:
            out = await s.call("report_error", report(1))
            await s.wait(out["fingerprint"], {"pr_open"})
        atts = Attempts(store)
        # Pretend a second attempt's worker died mid-run on this host.
        atts.create("20200101T000000-deadbeef", {"fingerprint": "e" * 64, "error_type": "E",
                                                 "call_site": "x:y"})
        atts.transition("20200101T000000-deadbeef", "investigating",
                        worker={"host": os.uname().nodename, "pid": 2 ** 22 + 7, "start": 1},
                        deadline=time.time() + 600)
        async with connect(cwd) as s:
            settled = await s.call("get_healing_status", {"fingerprint": "e" * 64})
        assert settled["attempts"][0]["status"] == "failed"
        assert "stopped before finishing" in settled["attempts"][0]["reason"]
