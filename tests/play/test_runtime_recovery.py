"""A healer that stops while agents wait on a rate limit picks the wait up where it was."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from healer.config import load_settings
from healer.core import gate
from healer.core.store import FileStore
from healer.play import runtime
from healer.play.service import PlayService

LINE = "API Error: Repeated 529 Overloaded errors. The API is at capacity."  # CLI 2.1.332


def _service(tmp_path: Path, calls: Path) -> PlayService:
    script = tmp_path / "resume.py"
    script.write_text(f"import sys; open({str(calls)!r}, 'a').write(sys.argv[1] + '\\n')\n")
    settings = load_settings(env={"HEALER_EXECUTOR": "playbook"}, overrides={
        "state_dir": str(tmp_path / "state"), "results_dir": str(tmp_path / "results"),
        "fleet_dir": str(tmp_path / "fleet"),
        "agents": {"sandbox_write_paths": [str(tmp_path)]},  # where the action notes its calls
        "play": {"limit_first_wait_s": 1.0, "resume_stagger_s": 0,
                 "actions": {"resume": [sys.executable, str(script), "{agent}"]}}})
    return PlayService(settings, FileStore(tmp_path / "state"))


async def _until(cond: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_a_wait_survives_a_restart(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    first = _service(tmp_path, calls)
    first.start_session({"play_id": "p-1", "repository": "a/b", "cto_config": {"agents": {
        "rex": {"tools": {"remote": []}}}}})
    waiting = (await first.ingest_logs("p-1", "rex", [LINE]))["runtime"]
    assert waiting["action"] == "waiting"
    await first.stop()  # healer stops before the reset: the waiter is gone, its claim stays
    assert not calls.exists()

    second = _service(tmp_path, calls)
    assert second.runtime.recover() == 1
    await _until(lambda: calls.exists() and calls.read_text() == "rex\n")
    await _until(lambda: runtime.held(second.store) == [])  # resumed: no longer held
    # One claim for the limit, taken again by the new waiter (not two).
    adm = second.store.get(gate.ADMISSION, gate.GATE_KEY)
    assert adm is not None
    assert len([k for k in adm.data["active"] if k.startswith("play.limit.")]) <= 1
    await second.stop()


async def test_a_deferred_remediation_is_not_an_attempt(tmp_path: Path) -> None:
    """The remediation agent's model kept refusing (its run ended ``deferred``): the same
    attempt runs again after the reset; only the run that worked counts."""
    from healer.agents.task import AgentTask, RunOutcome

    runs: list[str] = []

    async def run_agent(task: AgentTask) -> RunOutcome:
        runs.append(task.agent)
        status = "diagnosed" if task.agent == "evaluation-agent" else (
            "deferred" if runs.count("remediation-agent") == 1 else "fixed")
        result = {"status": status, "retry_at": time.time() + 0.2} if status == "deferred" \
            else {"status": status, "notes": "ok"}
        return RunOutcome(run_id=f"r{len(runs)}", agent=task.agent, executor="fake",
                          status=status, result_path="", result=result, error="",
                          duration_s=0.0)

    settings = load_settings(env={}, overrides={
        "state_dir": str(tmp_path / "state"), "results_dir": str(tmp_path / "results"),
        "fleet_dir": str(tmp_path / "fleet"), "play": {"reevaluate_after_s": 0}})
    svc = PlayService(settings, FileStore(tmp_path / "state"), run_agent=run_agent)
    svc.start_session({"play_id": "p-2", "repository": "a/b", "cto_config": {"agents": {
        "rex": {"tools": {"remote": []}}}}})
    await svc.ingest_logs("p-2", "rex", ["2026-12-02T10:00:00Z ERROR thread 'main' panicked at "
                                         "src/main.rs:1:1"])
    await svc.wait_idle(30)
    assert runs == ["evaluation-agent", "remediation-agent", "remediation-agent"]
    rec = next(svc.store.list("remediations"))
    assert rec.data["status"] == "resolved" and len(rec.data["attempts"]) == 1
