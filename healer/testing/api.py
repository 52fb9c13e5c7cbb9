"""Start a real `healer serve` process on a free loopback port, for tests."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import httpx

from healer.testing.wait import wait_for


class ServeProcess:
    """A `healer serve --port 0` child process and an HTTP client bound to it."""

    def __init__(self, env: dict[str, str], *extra: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "healer", "serve", "--port", "0", *extra],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("healer API on "):
            self.proc.kill()
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"healer serve did not start: {line!r}\n{err}")
        self.url = line.split(" on ", 1)[1].strip()
        self.http = httpx.Client(base_url=self.url, timeout=10)

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
