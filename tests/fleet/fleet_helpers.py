"""Small helpers the fleet tests share."""

from __future__ import annotations

import asyncio
import contextlib
import json
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


class SlowStart:
    """A loopback TCP relay that holds every new connection ``delay`` seconds before it lets
    a byte through: a NATS server that is slow to greet (a busy machine)."""

    def __init__(self, target: tuple[str, int], delay: float):
        self.target, self.delay = target, delay
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"nats://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        await asyncio.sleep(self.delay)
        ur, uw = await asyncio.open_connection(*self.target)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(pipe(r, uw), pipe(ur, w))
