"""The event loop of healer's long-running processes (``healer serve``, ``loop``, ``node``).

uvloop when it is installed (it comes with ``uvicorn[standard]``, a dependency), else
asyncio's own loop — the choice uvicorn makes for a server it starts itself. healer starts
uvicorn inside its own loop (``asyncio.run``), so uvicorn's choice never applied: every API
request paid the pure-Python selector loop and transports (recv, send and epoll_wait per
request through Python; uvloop does them in C). Nothing in healer depends on which loop
runs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's ``new_event_loop`` when uvloop is importable, else None (asyncio's loop)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop  # type: ignore[no-any-return]


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on ``loop_factory()``'s loop."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
