"""A fleet incident says which peer and which channel it is about, on the real local fleet:
n3's tunnel is killed, the heal loop repairs it, and the incident (``GET /api/v1/incidents``,
``/api/v1/incidents/{id}``, ``healer status <id> --json``) names the peer and the channel."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from healer.core.schemas import validator
from healer.core.store import FileStore
from healer.fleet.heal import HealLoop
from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env

pytestmark = pytest.mark.e2e


async def test_a_repaired_tunnel_names_its_peer_and_channel(fleet: Any, fleet_settings: Any,
                                                            fctx: Any) -> None:
    loop = HealLoop(fctx, FileStore(fleet_settings.state_path))
    try:
        fleet.kill_tunnel("n3")
        ep = await loop.heal("n3", "test")
        assert ep.state == "healed", ep.to_dict()
    finally:
        await loop.stop()
    env = healer_env(fleet_settings.state_path, fleet_settings.results_path,
                     fleet_settings.fleet_path, HEALER__CONTEXT__ENABLED="false")
    server = ServeProcess(env)
    try:
        listed = server.http.get("/api/v1/incidents", params={"kind": "fleet"}).json()
        [item] = listed["incidents"]
        detail = server.http.get(f"/api/v1/incidents/{item['id']}").json()["incident"]
    finally:
        server.close()
    assert item["about"] == {"peer": "n3", "channel": "tunnel"} == detail["about"]
    assert detail["status"] == "resolved"
    validator("incident").validate(detail)
    shown = subprocess.run([sys.executable, "-m", "healer", "status", item["id"], "--json"],
                           env=env, text=True, capture_output=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["incident"]["about"] == item["about"]
    text = subprocess.run([sys.executable, "-m", "healer", "status", item["id"]], env=env,
                          text=True, capture_output=True, timeout=60)
    assert "about: peer n3, channel tunnel" in text.stdout
