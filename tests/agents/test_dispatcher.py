"""The dispatcher: a run's outcome is what lands on the results bus, whoever wrote it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.agents import AgentTask, dispatcher
from healer.core.bus import LEDGER, ResultsBus
from healer.core.store import open_store


async def until(check: Any, timeout: float = 20.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


@pytest.fixture
def bus(settings: Any) -> Iterator[ResultsBus]:
    b = ResultsBus(settings.results_path, open_store(settings), settle_s=0.2, rescan_s=0.5,
                   max_wait_s=5.0, max_file_bytes=64 * 1024, fleet_dir=settings.fleet_path,
                   node="me")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def task(target: str = "mac1", **kw: Any) -> AgentTask:
    return AgentTask("config-updater", target, vars={"host": "127.0.0.1"}, timeout_s=120, **kw)


def outside_writer(results: Path, name: str, body: bytes) -> None:
    """Another process writes a file into the results dir (temp file + rename)."""
    code = ("import os, sys; tmp = os.path.join(sys.argv[1], '.' + sys.argv[2] + '.tmp'); "
            "open(tmp, 'wb').write(sys.stdin.buffer.read()); "
            "os.rename(tmp, os.path.join(sys.argv[1], sys.argv[2]))")
    subprocess.run([sys.executable, "-c", code, str(results), name], input=body, check=True,
                   timeout=30)


class TestDispatcher:
    async def test_the_outcome_is_the_applied_result(self, settings: Any, bus: ResultsBus,
                                                     scratch_playbooks: None) -> None:
        """With a bus attached, the outcome's result is the document the bus applied."""
        from healer.agents import playbooks

        async def configured(ctx: Any) -> dict[str, Any]:
            return {"status": "ok", "summary": "configured", "data": {"n": 1}}

        playbooks.playbook("config-updater")(configured)
        d = dispatcher(settings, bus=bus, executor="playbook")
        outcome = await d.run(task())
        applied = [r.data["data"] for r in bus.store.list(LEDGER)]
        assert outcome.status == "ok" and outcome.result["summary"] == "configured"
        assert applied == [outcome.result]
        assert d.in_flight == 0

    async def test_a_result_written_by_another_process_reaches_the_caller(
            self, settings: Any, bus: ResultsBus, gated: dict[str, Any]) -> None:
        """The run is still working when someone else's result for its run id lands: that
        result is the outcome, and the run is stopped (its slot given back)."""
        d = dispatcher(settings, bus=bus, executor="playbook", grace_s=0.5)
        running = asyncio.ensure_future(d.run(task(run_id="run-outside01")))
        await until(lambda: gated["now"] == 1)
        handle = next(iter(d.runner.handles()))
        kind = Path(handle.result_path).name.split("-")[1]
        body = json.dumps({"kind": kind, "target": "mac1", "status": "ok",
                           "run_id": "run-outside01", "summary": "finished by hand"}).encode()
        outside_writer(settings.results_path, f"heal-{kind}-mac1-1999999999.json", body)
        outcome = await asyncio.wait_for(running, 60)
        assert outcome.status == "ok" and outcome.result["summary"] == "finished by hand"
        await until(lambda: gated["now"] == 0)  # the playbook run was cancelled
        assert handle.state == "cancelled"

    async def test_a_result_the_bus_rejects_is_a_failed_run(
            self, settings: Any, bus: ResultsBus, gated: dict[str, Any]) -> None:
        """A broken file under the run's result name is set aside by the bus; the run fails
        with the bus's reason instead of waiting for its timeout."""
        d = dispatcher(settings, bus=bus, executor="playbook", grace_s=0.5)
        running = asyncio.ensure_future(d.run(task()))
        await until(lambda: gated["now"] == 1)
        handle = next(iter(d.runner.handles()))
        await until(lambda: bool(handle.result_path))
        outside_writer(settings.results_path, Path(handle.result_path).name, b'{"kind": 1}')
        outcome = await asyncio.wait_for(running, 60)
        assert outcome.status == "failed" and outcome.result is None
        assert "the bus rejected its result" in outcome.error

    async def test_without_a_bus_the_file_is_read(self, settings: Any,
                                                  scratch_playbooks: None) -> None:
        """A worker process has no bus: the outcome is the published result file."""
        from healer.agents import playbooks

        async def done(ctx: Any) -> dict[str, Any]:
            return {"status": "ok", "summary": "done"}

        playbooks.playbook("config-updater")(done)
        outcome = await dispatcher(settings, executor="playbook").run(task())
        on_disk = json.loads(Path(outcome.result_path).read_text())
        assert outcome.result == on_disk and on_disk["summary"] == "done"

    async def test_a_task_that_cannot_start_raises(self, settings: Any) -> None:
        from healer.errors import UsageError

        with pytest.raises(UsageError, match="unknown agent"):
            await dispatcher(settings, executor="playbook").run(AgentTask("no-such-agent", "x"))
