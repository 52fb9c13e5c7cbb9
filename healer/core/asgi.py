"""The uvicorn server healer runs its ASGI apps in (the HTTP API, the node daemon)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import uvicorn


class Server(uvicorn.Server):
    """uvicorn without its own signal handling: the loop owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def install_signal_handlers(self) -> None:  # older uvicorn
        return None
