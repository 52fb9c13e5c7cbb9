"""healer's real HTTP API on a free loopback port, for tests.

* ``ServeProcess``: a `healer serve` child process and a client for it.
* ``served(ctx)``: the app of an ``ApiContext`` on a real uvicorn in the test's own event
  loop, for a test that hands the routes a store or a service it controls.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from healer.testing.wait import until, wait_for


class ServeProcess:
    """A `healer serve --port 0` child process and an HTTP client bound to it.

    ``token``: sent as ``Authorization: Bearer`` by the client (the server gets it from
    ``HEALER_TOKEN`` in ``env``): a token-authenticated caller is trusted."""

    def __init__(self, env: dict[str, str], *extra: str, token: str = "",
                 cwd: str | os.PathLike[str] | None = None):
        # The server's log goes to a file: a pipe nobody reads fills up after 64 KiB of log
        # lines and then blocks the server mid-request.
        self.log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in close()
            prefix="healer-serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "healer", "serve", "--port", "0", *extra],
            env=env, stdout=subprocess.PIPE, stderr=self.log_file, text=True, cwd=cwd)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("healer API on "):
            self.proc.kill()
            self.proc.wait(5)
            raise RuntimeError(f"healer serve did not start: {line!r}\n{self.log()}")
        self.url = line.split(" on ", 1)[1].strip()
        self.http = httpx.Client(base_url=self.url, timeout=10, headers={
            "Authorization": f"Bearer {token}"} if token else {})

    def log(self) -> str:
        """What the server logged so far."""
        with open(self.log_file.name, errors="replace") as fh:
            return fh.read()

    def wait_for(self, fn: Any, timeout: float = 30.0) -> Any:
        """Poll ``fn`` until it returns something truthy; return that."""
        return wait_for(fn, timeout)

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log_file.close()
        os.unlink(self.log_file.name)


@asynccontextmanager
async def served(ctx: Any, *, timeout: float = 30.0) -> AsyncIterator[httpx.AsyncClient]:
    """``create_app(ctx)`` served by uvicorn on 127.0.0.1 (a free port) in this event loop,
    and an async client bound to it (it sends ``ctx.settings.api.token`` when one is set)."""
    import uvicorn

    from healer.api.app import create_app

    server = uvicorn.Server(uvicorn.Config(create_app(ctx), host="127.0.0.1", port=0,
                                           log_level="warning", lifespan="off",
                                           timeout_graceful_shutdown=5))
    task = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.started or task.done(), 10)
        if task.done():
            task.result()  # raises why it did not start
        port = server.servers[0].sockets[0].getsockname()[1]
        token = ctx.settings.api.token
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=timeout,
                                     headers={"Authorization": f"Bearer {token}"} if token
                                     else {}) as client:
            yield client
    finally:
        server.should_exit = True
        await task


def stored_records(state: Path) -> dict[str, int]:
    """Every record under ``<state>/records`` and its modification time (ns), to tell whether
    a request wrote anything — but the duties' leases, which a running server renews every
    few seconds whatever the requests do."""
    root = Path(state) / "records"
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*.json")
            if p.parent.name != "leases"}
