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
