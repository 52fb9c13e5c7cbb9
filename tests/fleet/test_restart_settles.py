"""A restarted daemon's NATS link comes back a moment after its /health: the daemon-restarter
waits for it (within ``fleet.restart_verify_s``), and the heal sends no other agent for the
channels a run in flight is repairing — one fault, one agent, even when the heal looks again
while the restart is still settling (a busy machine: a restart that outlasts
``fleet.heal_wait_s``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from fleet_helpers import SlowStart

pytestmark = pytest.mark.e2e

DELAY_S = 1.5  # the daemon's connect to NATS is let through this long after it starts (nats-py
# gives up a connect after 2 s)


@pytest.fixture
def late_link(fleet: Any) -> Iterator[None]:
    """n2's restart command starts its daemon on a NATS relay that greets ``DELAY_S`` late;
    afterwards its daemon is stopped (the next test's reset starts it the usual way)."""
    n2 = fleet.node("n2")
    real = urlsplit(n2.nats_url)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    relay = SlowStart((str(real.hostname), int(real.port or 4222)), delay=DELAY_S)
    url = asyncio.run_coroutine_threadsafe(relay.__aenter__(), loop).result(10)
    script: Path = n2.dir / "restart.sh"
    original = script.read_text()
    assert n2.nats_url in original
    script.write_text(original.replace(n2.nats_url, url))
    try:
        yield
    finally:
        script.write_text(original)
        fleet.kill_daemon("n2")  # on the relay: the next test's reset starts it as before
        asyncio.run_coroutine_threadsafe(relay.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_a_restarted_daemon_s_late_nats_link_is_not_a_second_fault(
        fleet: Any, late_link: None, tmp_path: Path) -> None:
    env = fleet.loop_env(state_dir=str(tmp_path / "state"),
                         results_dir=str(tmp_path / "results"),
                         **{"fleet.restart_verify_s": 15, "fleet.heal_wait_s": 0.5})
    fleet.kill_daemon("n2")
    r = subprocess.run([sys.executable, "-m", "healer", "fleet", "heal", "n2", "--json"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    (ep,) = [e for e in json.loads(r.stdout) if e["peer"] == "n2"]
    assert (ep["state"], ep["agents"]) == ("healed", ["daemon-restarter"]), ep
    [attempt] = ep["attempts"]
    assert attempt["summary"].endswith("/health and its NATS link answer again."), attempt
