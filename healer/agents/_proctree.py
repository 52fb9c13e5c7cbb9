"""Stop an agent process and everything it started, without blocking the event loop.

Agents run in their own session (process group), and their environment carries
``HEALER_RUN_ID``. A stop signals the group, every descendant (found through ``/proc`` where
there is one) and every process still carrying the run's marker — a tool that detached into a
session of its own is found by the marker — then escalates from SIGTERM to SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

MARKER = "HEALER_RUN_ID"
_PROC = Path("/proc")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None when it is gone."""
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces; fields follow the last ')'.
    fields = raw[raw.rfind(")") + 2:].split()
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    if _PROC.is_dir():
        st = _stat(pid)
        return st is not None and st[0] not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _all_pids() -> list[int]:
    try:
        return [int(p.name) for p in _PROC.iterdir() if p.name.isdigit()]
    except OSError:
        return []


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (Linux; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for p in _all_pids():
        st = _stat(p)
        if st is not None:
            children.setdefault(st[1], []).append(p)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def marked(run_id: str) -> set[int]:
    """Processes whose environment carries ``HEALER_RUN_ID=<run_id>`` (Linux, same user)."""
    needle = f"{MARKER}={run_id}".encode()
    found = set()
    me = os.getpid()
    for p in _all_pids():
        if p == me:
            continue
        try:
            env = (_PROC / str(p) / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.add(p)
    return found


def tree(pid: int | None, run_id: str = "") -> set[int]:
    """The processes of one run: the leader, its descendants, and marked strays."""
    pids: set[int] = set()
    if pid:
        pids |= {pid} | descendants(pid)
    if run_id:
        pids |= marked(run_id)
    return {p for p in pids if p != os.getpid() and alive(p)}


def _signal(pid: int | None, pids: set[int], sig: int) -> None:
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)


async def kill_tree(pid: int | None, run_id: str = "", *, grace_s: float = 2.0) -> set[int]:
    """SIGTERM the run's processes, SIGKILL what is left after ``grace_s``; returns survivors."""
    pids = tree(pid, run_id)
    if not pids and not pid:
        return set()
    _signal(pid, pids, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    while loop.time() < deadline:
        pids = {p for p in pids | tree(pid, run_id) if alive(p)}
        if not pids:
            return set()
        await asyncio.sleep(0.05)
    _signal(pid, pids | tree(pid, run_id), signal.SIGKILL)
    await asyncio.sleep(0.05)
    return {p for p in pids | tree(None, run_id) if alive(p)}
