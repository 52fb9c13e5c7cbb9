"""Polling for a condition in tests (the one helper every test area uses)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, every: float = 0.05) -> Any:
    """Call ``cond`` until it returns something truthy; return that, or fail after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout} s")


async def until(cond: Callable[[], Any], timeout: float = 30.0, every: float = 0.05) -> Any:
    """``wait_for`` for async code: the event loop keeps running while it waits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        await asyncio.sleep(every)
    raise AssertionError(f"condition not met within {timeout} s")
