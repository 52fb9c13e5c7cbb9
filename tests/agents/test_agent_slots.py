"""One machine-wide limit on agent runs: executor.max_concurrent slots, shared by every
executor and every healer process, given back by a process that dies."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from healer.agents import AgentTask, playbook, select_executor
from healer.core.slots import SlotPool
from healer.testing.wait import until

HOLD = """
import sys, time
from healer.core.slots import SlotPool
from healer.testing.wait import until
pool = SlotPool(sys.argv[1], int(sys.argv[2]))
held = [pool.try_acquire({"run_id": "child"}) for _ in range(int(sys.argv[3]))]
print("held", sum(s is not None for s in held), flush=True)
time.sleep(300)
"""


def hold(root: Path, size: int, n: int) -> subprocess.Popen[str]:
    """Another process holding ``n`` of the pool's slots (until killed)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root), str(size), str(n)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().split() == ["held", str(n)]
    return proc


class TestSlotPool:
    def test_size_bounds_holders_and_release_frees(self, tmp_path: Path) -> None:
        pool = SlotPool(tmp_path, 2)
        a, b = pool.try_acquire({"run_id": "a"}), pool.try_acquire({"run_id": "b"})
        assert a and b and pool.try_acquire() is None
        assert sorted(h["run_id"] for h in pool.holders()) == ["a", "b"]
        a.release()
        assert pool.try_acquire() is not None

    def test_other_processes_share_the_limit_and_a_killed_one_frees_its_slots(
            self, tmp_path: Path) -> None:
        pool = SlotPool(tmp_path, 3)
        child = hold(tmp_path, 3, 2)
        try:
            assert [h["run_id"] for h in pool.holders()] == ["child", "child"]
            mine = pool.try_acquire()
            assert mine is not None and pool.try_acquire() is None
            child.send_signal(signal.SIGKILL)  # no clean-up: the kernel drops its locks
            child.wait(10)
            assert pool.try_acquire() is not None and pool.try_acquire() is not None
        finally:
            child.kill()
            child.wait(10)

    async def test_acquire_waits_for_a_slot_or_times_out(self, tmp_path: Path) -> None:
        pool = SlotPool(tmp_path, 1)
        held = pool.try_acquire()
        assert held is not None
        with pytest.raises(TimeoutError, match="no free agent slot"):
            await pool.acquire(timeout=0.2)
        waiter = asyncio.create_task(pool.acquire(timeout=20))
        await asyncio.sleep(0)
        held.release()
        slot = await waiter
        assert slot.number == 0


class TestOneLimitForEveryRun:
    async def test_separate_executors_share_max_concurrent(self, settings: Any,
                                                           gated: dict[str, Any]) -> None:
        """Three executors (as play, fleet and code each build their own) running twelve
        tasks of three agents: never more than executor.max_concurrent at once."""
        settings.executor.max_concurrent = 2
        executors = [select_executor(settings, "playbook") for _ in range(3)]
        agents = ("config-updater", "daemon-restarter", "channel-diagnoser")
        runs = [asyncio.create_task(executors[i % 3].run(AgentTask(
            agents[i % 3], f"mac{i}", vars={"host": "127.0.0.1"}))) for i in range(12)]
        await until(lambda: gated["started"] == 2)
        await asyncio.sleep(0.3)  # room for a third to start, were the limit not shared
        assert gated["started"] == 2
        gated["gate"].set()
        outcomes = await asyncio.wait_for(asyncio.gather(*runs), 60)
        assert all(o.ok for o in outcomes) and gated["peak"] == 2

    async def test_slots_held_by_another_process_count(self, settings: Any,
                                                       gated: dict[str, Any]) -> None:
        """A healer worker process holding a slot leaves one for this one (limit 2)."""
        settings.executor.max_concurrent = 2
        pool = SlotPool.agents(settings)
        child = hold(pool.root, 2, 1)
        try:
            gated["gate"].set()
            ex = select_executor(settings, "playbook")
            first = asyncio.create_task(ex.run(AgentTask("config-updater", "mac1",
                                                         vars={"host": "127.0.0.1"})))
            assert (await asyncio.wait_for(first, 30)).ok
            gated["gate"].clear()
            a = asyncio.create_task(ex.run(AgentTask("config-updater", "mac2",
                                                     vars={"host": "127.0.0.1"})))
            b = asyncio.create_task(ex.run(AgentTask("config-updater", "mac3",
                                                     vars={"host": "127.0.0.1"})))
            await until(lambda: gated["now"] == 1)
            await asyncio.sleep(0.3)
            assert gated["now"] == 1  # the second waits for the child's slot
            child.kill()
            child.wait(10)
            await until(lambda: gated["now"] == 2)
            gated["gate"].set()
            assert all(o.ok for o in await asyncio.wait_for(asyncio.gather(a, b), 30))
        finally:
            child.kill()
            child.wait(10)

    async def test_no_slot_in_time_is_a_failed_run_with_the_reason(self, settings: Any,
                                                                   gated: dict[str, Any]
                                                                   ) -> None:
        settings.executor.max_concurrent = 1
        settings.executor.slot_wait_s = 0.3
        held = SlotPool.agents(settings).try_acquire()
        assert held is not None
        outcome = await select_executor(settings, "playbook").run(
            AgentTask("config-updater", "mac1", vars={"host": "127.0.0.1"}))
        held.release()
        assert not outcome.ok and "no free agent slot" in outcome.error
        assert gated["started"] == 0

    async def test_a_run_started_inside_a_run_uses_its_parents_slot(
            self, settings: Any, scratch_playbooks: None) -> None:
        """master-healer starts the fleet's repair agents from inside its own run: with one
        slot it must not wait for the slot it holds itself."""
        settings.executor.max_concurrent = 1
        settings.executor.slot_wait_s = 5

        @playbook("daemon-restarter")
        async def inner(ctx: Any) -> dict[str, Any]:
            return {"status": "ok", "summary": "inner"}

        @playbook("config-updater")
        async def outer(ctx: Any) -> dict[str, Any]:
            done = await select_executor(settings, "playbook").run(
                AgentTask("daemon-restarter", "mac2", vars={"host": "127.0.0.1"}))
            return {"status": "ok" if done.ok else "failed", "summary": done.error or "outer"}

        outcome = await asyncio.wait_for(select_executor(settings, "playbook").run(
            AgentTask("config-updater", "mac1", vars={"host": "127.0.0.1"})), 30)
        assert outcome.ok, outcome.error
