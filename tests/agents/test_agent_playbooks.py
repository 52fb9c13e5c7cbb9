"""The playbook executor: real probes against real local services, results on the bus."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from healer.agents import AgentTask, PlaybookExecutor, playbook, registered
from healer.core.bus import ResultsBus
from healer.core.schemas import errors as schema_errors
from healer.core.store import FileStore
from healer.errors import AgentResultError, AgentTimeoutError, AgentUnavailableError


def _valid(path: str) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    assert schema_errors("agent-result", data) == []
    return data


@pytest.mark.e2e
class TestChannelDiagnoser:
    async def test_all_channels_up(self, settings: Any, health_server: int, nats_port: int,
                                   sshd_port: int) -> None:
        """With a live daemon, sshd and nats-server, every channel is ok and the result says so."""
        task = AgentTask("channel-diagnoser", "peer1", incident="inc-7", vars={
            "host": "127.0.0.1", "port": str(health_server), "ssh_port": str(sshd_port),
            "nats_url": f"nats://127.0.0.1:{nats_port}", "tunnel_port": str(health_server)})
        outcome = await PlaybookExecutor(settings).run(task)
        assert outcome.ok and outcome.status == "ok"
        data = _valid(outcome.result_path)
        assert data["channels"]["http"]["ok"] and data["channels"]["http"]["detail"] == "HTTP 200"
        assert data["channels"]["ssh"]["detail"].startswith("SSH-2.0-OpenSSH")
        assert data["channels"]["nats"]["ok"] and data["channels"]["tunnel"]["ok"]
        assert data["channels"]["seed"]["ok"] and (settings.fleet_path / "peer1").is_dir()
        assert (data["kind"], data["target"], data["incident"], data["executor"]) == (
            "diagnose", "peer1", "inc-7", "playbook")
        assert Path(outcome.result_path).name.startswith("heal-diagnose-peer1-")

    async def test_dead_channels_are_diagnosed_with_reasons(self, settings: Any,
                                                         free_port: Any) -> None:
        """Closed ports are reported per channel with the reason; the diagnosis still succeeds."""
        dead = str(free_port())
        task = AgentTask("channel-diagnoser", "peer2", vars={
            "host": "127.0.0.1", "port": dead, "ssh_port": dead,
            "nats_url": f"nats://127.0.0.1:{dead}"})
        outcome = await PlaybookExecutor(settings).run(task)
        data = _valid(outcome.result_path)
        assert outcome.status == "diagnosed" and outcome.ok
        for name in ("http", "ssh", "nats"):
            assert data["channels"][name] == {"ok": False, "detail": "connection refused",
                                              "latency_ms": None}
        assert "broken: http, nats, ssh" in data["summary"]

    async def test_unwritable_inbox_is_a_broken_seed_channel(self, settings: Any) -> None:
        """A seed inbox that cannot be written is reported, not crashed on."""
        if os.geteuid() == 0:
            blocker = settings.fleet_path / "peer3"
            blocker.parent.mkdir(parents=True, exist_ok=True)
            blocker.write_text("a file where the inbox folder should be")
        else:
            settings.fleet_path.mkdir(parents=True, exist_ok=True)
            settings.fleet_path.chmod(0o500)
        outcome = await PlaybookExecutor(settings).run(
            AgentTask("channel-diagnoser", "peer3", vars={"host": "127.0.0.1"}))
        data = _valid(outcome.result_path)
        assert data["channels"]["seed"]["ok"] is False

    async def test_result_is_applied_by_the_bus(self, settings: Any, health_server: int) -> None:
        """The results bus applies the playbook's result exactly once."""
        store = FileStore(settings.state_path)
        bus = ResultsBus(settings.results_path, store, settle_s=0.2, rescan_s=0.2)
        seen: list[Any] = []
        bus.subscribe(seen.append, kind="diagnose")
        bus.start()
        try:
            outcome = await PlaybookExecutor(settings).run(AgentTask(
                "channel-diagnoser", "peer4", vars={"host": "127.0.0.1",
                                                    "port": str(health_server)}))
            assert await asyncio.to_thread(bus.drain, 10)
            for _ in range(100):
                if seen:
                    break
                await asyncio.sleep(0.05)
        finally:
            bus.stop()
        assert [r.data["run_id"] for r in seen] == [outcome.run_id]
        assert bus.stats.rejected == 0


class TestPlaybookExecutor:
    async def test_agent_without_playbook_leaves_a_failed_result(self, settings: Any) -> None:
        """Running an agent that has no playbook writes a clear failed result."""
        outcome = await PlaybookExecutor(settings).run(AgentTask("healing-agent", "abc123"))
        data = _valid(outcome.result_path)
        assert data["status"] == "failed" and "no playbook registered" in data["error"]
        assert isinstance(outcome.exception, AgentUnavailableError) and not outcome.ok

    async def test_crashing_playbook_leaves_a_failed_result(self, settings: Any,
                                                            scratch_playbooks: None) -> None:
        """A playbook that raises still ends in a valid failed result naming the error."""
        @playbook("config-updater")
        async def boom(ctx: Any) -> dict[str, Any]:
            raise RuntimeError("disk on fire")

        outcome = await PlaybookExecutor(settings).run(
            AgentTask("config-updater", "mac1", vars={"host": "127.0.0.1"}))
        assert _valid(outcome.result_path)["error"] == "RuntimeError: disk on fire"

    async def test_slow_playbook_times_out(self, settings: Any, scratch_playbooks: None) -> None:
        """A playbook past its timeout is cancelled and the result says timeout."""
        @playbook("nats-reconnector")
        async def slow(ctx: Any) -> dict[str, Any]:
            await asyncio.sleep(30)
            return {"status": "ok"}

        outcome = await PlaybookExecutor(settings).run(
            AgentTask("nats-reconnector", "mac1", vars={"host": "127.0.0.1"}, timeout_s=0.3))
        assert outcome.status == "timeout" and outcome.duration_s < 5
        assert isinstance(outcome.exception, AgentTimeoutError)
        assert _valid(outcome.result_path)["status"] == "timeout"

    async def test_invalid_playbook_result_is_replaced(self, settings: Any,
                                                       scratch_playbooks: None) -> None:
        """A playbook returning a document the schema refuses gets a failed result instead."""
        @playbook("tunnel-establisher")
        async def sloppy(ctx: Any) -> dict[str, Any]:
            return {"status": "great", "channels": "all fine"}

        outcome = await PlaybookExecutor(settings).run(
            AgentTask("tunnel-establisher", "mac1", vars={"host": "127.0.0.1"}))
        assert isinstance(outcome.exception, AgentResultError)
        assert _valid(outcome.result_path)["status"] == "failed"

    def test_registry_lists_the_channel_diagnoser(self) -> None:
        """The built-in channel-diagnoser playbook is registered."""
        assert "channel-diagnoser" in registered()

    async def test_same_second_runs_get_distinct_files(self, settings: Any,
                                                        free_port: Any) -> None:
        """Two runs for one target in the same second never overwrite each other's result."""
        ex = PlaybookExecutor(settings)
        task = AgentTask("channel-diagnoser", "peer5", vars={"host": "127.0.0.1",
                                                            "port": str(free_port())})
        a, b = await asyncio.gather(ex.run(task), ex.run(task))
        assert a.result_path != b.result_path
        assert len(list(settings.results_path.glob("heal-diagnose-peer5-*.json"))) == 2
