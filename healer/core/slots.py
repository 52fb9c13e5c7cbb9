"""One limit on agent runs for the whole machine: ``executor.max_concurrent`` slots.

Every agent run — a play remediation, a code heal in its own worker process, a fleet repair, a
run started by hand — takes one slot before it executes and gives it back after. A slot is an
exclusive lock on one of ``size`` files under ``<state dir>/slots/<pool>/``, so the limit holds
across every process that shares the state dir, and a process that dies (``kill -9``, OOM)
gives its slots back at once: the kernel drops its locks. Nothing to reclaim, no stale lease.

Waiting is a poll with back-off (a few per second at most), bounded by the caller's deadline.
Each held slot names its holder in ``<n>.json`` beside its lock, for ``healer status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from healer.core.files import atomic_write_json

POLL_S = 0.02
MAX_POLL_S = 0.5


@dataclass
class Slot:
    """A held slot; ``release()`` (or leaving the ``with`` block) gives it back."""

    number: int
    _lock: FileLock = field(repr=False)
    _info: Path = field(repr=False)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self._info.unlink()
        self._lock.release(force=True)

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class SlotPool:
    """``size`` slots shared by every process using ``root`` (see the module doc)."""

    def __init__(self, root: Path | str, size: int):
        if size < 1:
            raise ValueError("a slot pool needs at least one slot")
        self.root = Path(root)
        self.size = size

    @classmethod
    def agents(cls, settings: Any) -> SlotPool:
        """The pool every agent run shares: ``executor.max_concurrent`` slots."""
        return cls(settings.state_path / "slots" / "agents", settings.executor.max_concurrent)

    def try_acquire(self, holder: Mapping[str, Any] | None = None) -> Slot | None:
        """A free slot now, or None."""
        self.root.mkdir(parents=True, exist_ok=True)
        for n in range(self.size):
            # thread_local=False: the lock belongs to the slot, whichever thread releases it.
            lock = FileLock(self.root / f"{n}.lock", timeout=0, thread_local=False)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            info = self.root / f"{n}.json"
            with contextlib.suppress(OSError):
                atomic_write_json(info, {"pid": os.getpid(), "since": time.time(),
                                         **(holder or {})})
            return Slot(n, lock, info)
        return None

    async def acquire(self, holder: Mapping[str, Any] | None = None, *,
                      timeout: float | None = None) -> Slot:
        """Wait for a free slot; ``TimeoutError`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = POLL_S
        while True:
            slot = self.try_acquire(holder)
            if slot is not None:
                return slot
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"no free agent slot within {timeout:g} s "
                                   f"({self.size} in use)")
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, MAX_POLL_S)

    def holders(self) -> list[dict[str, Any]]:
        """Who holds a slot now (a slot whose lock is free is not listed)."""
        out = []
        for n in range(self.size):
            lock = FileLock(self.root / f"{n}.lock", timeout=0, thread_local=False)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                try:
                    info = json.loads((self.root / f"{n}.json").read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    info = {}
                out.append({"slot": n, **info})
            else:
                lock.release(force=True)
        return out
