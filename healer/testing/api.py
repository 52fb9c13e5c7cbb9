"""Start a real `healer serve` process on a free loopback port, for tests."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from healer.testing.wait import wait_for


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


def stored_records(state: Path) -> dict[str, int]:
    """Every record under ``<state>/records`` and its modification time (ns), to tell whether
    a request wrote anything — but the duties' leases, which a running server renews every
    few seconds whatever the requests do."""
    root = Path(state) / "records"
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*.json")
            if p.parent.name != "leases"}
