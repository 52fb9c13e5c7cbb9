"""Small helpers the fleet tests share."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def result_files(settings: Any, kind: str, peer: str) -> list[Path]:
    """Result files of ``kind`` for ``peer``, oldest first (published or already applied)."""
    root = Path(settings.results_dir)
    found = list(root.glob(f"heal-{kind}-{peer}-*.json"))
    found += list((root / "applied").glob(f"heal-{kind}-{peer}-*.json"))
    return sorted(found, key=lambda p: p.name)


def results(settings: Any, kind: str, peer: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in result_files(settings, kind, peer)]


def human_seeds(settings: Any) -> list[Path]:
    folder = Path(settings.fleet_dir) / "human"
    return sorted(folder.glob("*.md")) if folder.is_dir() else []


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout} s")


async def until(cond: Callable[[], Any], timeout: float = 30.0, every: float = 0.1) -> Any:
    """``wait_for`` for async tests: the event loop keeps running while it waits."""
    import asyncio

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        await asyncio.sleep(every)
    raise AssertionError(f"condition not met within {timeout} s")
