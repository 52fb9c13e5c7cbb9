"""Run a real ``python -m healer.loop`` in tests, and drop agent results the way agents do."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from healer.core.files import atomic_write_bytes


def result_name(kind: str, target: str, epoch: int | None = None) -> str:
    return f"heal-{kind}-{target}-{epoch if epoch is not None else int(time.time())}.json"


def drop_result(
    results_dir: Path | str,
    kind: str,
    target: str,
    *,
    status: str = "ok",
    epoch: int | None = None,
    **fields: Any,
) -> Path:
    """Write a valid agent result atomically (temp file + rename), as an agent should."""
    data = {"kind": kind, "target": target, "status": status, **fields}
    path = Path(results_dir) / result_name(kind, target, epoch)
    atomic_write_bytes(path, json.dumps(data).encode())
    return path


class LoopProcess:
    """A healer loop in a child process, with its own state/results/fleet dirs."""

    def __init__(self, env: Mapping[str, str], *args: str, cwd: Path | str | None = None):
        self.env = dict(env)
        self.args = list(args)
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = Path(self.env["HEALER_STATE_DIR"]) / "loop-test.log"

    @property
    def status_file(self) -> Path:
        return Path(self.env["HEALER_STATE_DIR"]) / "loop.json"

    def start(self, wait: float = 30.0) -> LoopProcess:
        Path(self.env["HEALER_STATE_DIR"]).mkdir(parents=True, exist_ok=True)
        self.status_file.unlink(missing_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "healer.loop", *self.args],
            env=self.env, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"loop exited early ({self.proc.returncode}):\n{self.log()}")
            try:
                if json.loads(self.status_file.read_text()).get("state") == "running":
                    return self
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"loop did not report running within {wait}s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise

    def __enter__(self) -> LoopProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()


def healer_env(state: Path, results: Path, fleet: Path, **extra: str) -> dict[str, str]:
    """An environment for a child healer process confined to the given dirs."""
    # GITHUB_TOKEN would point a child's GitHub watcher at the real api.github.com.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HEALER") and k != "GITHUB_TOKEN"}
    env.update({
        "HEALER_STATE_DIR": str(state),
        "HEALER_RESULTS_DIR": str(results),
        "HEALER_FLEET_DIR": str(fleet),
        "HEALER_NODE_ID": "testnode",
        "HEALER_CTO_CONFIG": str(state / "no-cto-config.json"),
        "HEALER_FLEET_CONFIG": str(state / "no-multifleet.json"),
        "HEALER__API__ENABLED": "false",
        "HEALER__BUS__SETTLE_S": "0.5",
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra)
    return env
