"""The node daemon (`healer node`) as real processes: /health, /message, relay, NATS, inbox."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import httpx
import pytest

from healer.core import seeds
from healer.fleet import messages
from healer.fleet.natslink import subject
from healer.fleet.signing import sign
from healer.testing.wait import wait_for

pytestmark = pytest.mark.e2e


def url(fleet: Any, node: str, path: str) -> str:
    n = fleet.node(node)
    return f"http://{n.host}:{n.port}{path}"


def post(fleet: Any, node: str, body: Any) -> httpx.Response:
    """POST ``body`` (a dict: signed with the fleet secret, as healer sends it; bytes: as is)."""
    raw = body if isinstance(body, bytes) else json.dumps(
        sign(body, fleet.secret, "message")).encode()
    return httpx.post(url(fleet, node, "/message"), content=raw, timeout=5, trust_env=False,
                      headers={"content-type": "application/json"})


class TestHealth:
    def test_health_reports_the_reference_fields(self, fleet: Any) -> None:
        """/health has nodeId, status, uptime_s, natsUrl, peers with heartbeat ages,
        channel_health and recent_errors."""
        h = httpx.get(url(fleet, "n2", "/health"), timeout=5, trust_env=False).json()
        assert h["nodeId"] == "n2" and h["status"] == "ok" and h["uptime_s"] >= 0
        assert h["natsUrl"] == fleet.node("n2").nats_url and h["nats_connected"] is True
        assert set(h["peers"]) == {"n1", "n3"}
        assert all(0 <= p["heartbeat_age_s"] < 5 for p in h["peers"].values())
        assert {c for c, v in h["channel_health"].items() if v["ok"]} == {"http", "nats",
                                                                           "seed"}
        assert h["recent_errors"] == [] and h["interactive_session"] is False

    def test_interactive_marker_is_reported(self, fleet: Any) -> None:
        """While the node's interactive marker exists, /health says so."""
        fleet.set_interactive("n3")
        h = httpx.get(url(fleet, "n3", "/health"), timeout=5, trust_env=False).json()
        assert h["interactive_session"] is True

    def test_blocked_inbox_degrades_health(self, fleet: Any) -> None:
        """A seed inbox that is not a folder shows as a broken seed channel."""
        fleet.block_inbox("n3")
        h = httpx.get(url(fleet, "n3", "/health"), timeout=5, trust_env=False).json()
        assert h["status"] == "degraded" and h["channel_health"]["seed"]["ok"] is False


class TestMessages:
    def test_message_for_the_node_is_delivered(self, fleet: Any) -> None:
        """POST /message with a valid message for this node is delivered."""
        msg = messages.make("message", "n2", "ops", subject="hello", body="hi")
        r = post(fleet, "n2", msg)
        assert r.status_code == 200 and r.json() == {"status": "delivered", "node": "n2",
                                                     "id": msg["id"]}

    @pytest.mark.parametrize("body,why", [
        (b"{not json", "not JSON"),
        ({"type": "message", "to": "n2"}, "'from' is a required property"),
        ({"type": "message", "to": "../etc", "from": "ops"}, "does not match"),
        ({"type": "message", "to": "n2", "from": "ops; rm -rf /"}, "does not match"),
        ({"type": "message", "to": "n2", "from": "ops",
          "payload": {"subject": "x" * 201}}, "too long"),
        ({"type": "repair", "to": "n2", "from": "ops",
          "payload": {"action": "rm -rf /"}}, "expected one of"),
    ])
    def test_bad_messages_are_refused(self, fleet: Any, body: Any, why: str) -> None:
        """Invalid, hostile or unknown-action messages get 400 with the reason."""
        r = post(fleet, "n2", body)
        assert r.status_code == 400 and why in r.json()["error"]

    def test_chief_relays_and_workers_do_not(self, fleet: Any) -> None:
        """The chief forwards a message for another node (P3); a worker refuses with 421."""
        msg = messages.make("message", "n3", "ops", subject="via the chief")
        relayed = post(fleet, "n1", msg)
        assert relayed.status_code == 200 and relayed.json()["status"] == "relayed"
        refused = post(fleet, "n2", msg)
        assert refused.status_code == 421 and "does not relay" in refused.json()["error"]

    async def test_nats_ping_and_message(self, fleet: Any, fctx: Any) -> None:
        """The daemon answers fleet.<node>.ping and takes fleet.<node>.message."""
        link = fctx.nats()
        assert await link.wait_connected(5)
        pong = await link.request(subject("n3", "ping"), {"from": "ops"}, 2)
        assert pong["nodeId"] == "n3"
        msg = messages.make("message", "n3", "ops", subject="over nats")
        reply = await link.request(subject("n3", "message"), fctx.signed(msg), 2)
        assert reply["status"] == "delivered"

    def test_seed_inbox_is_read_and_archived(self, fleet: Any) -> None:
        """A seed file in the node's inbox is taken as a message and moved to archive/."""
        before = httpx.get(url(fleet, "n2", "/health"), timeout=5,
                           trust_env=False).json()["messages_received"]
        path = seeds.write(fleet.fleet_dir, messages.to_seed(
            messages.make("message", "n2", "ops", subject="by seed file")))
        wait_for(lambda: (path.parent / "archive" / path.name).exists(), 10)
        after = httpx.get(url(fleet, "n2", "/health"), timeout=5,
                          trust_env=False).json()["messages_received"]
        assert after == before + 1

    async def test_reconnect_action_keeps_the_node_on_nats(self, fleet: Any, fctx: Any) -> None:
        """A repair message with action reconnect_nats redoes the link; pings work after."""
        health = url(fleet, "n2", "/health")
        before = httpx.get(health, timeout=5, trust_env=False).json()["nats_connects"]
        msg = messages.make(messages.REPAIR, "n2", "ops", action="reconnect_nats")
        assert post(fleet, "n2", msg).json()["status"] == "delivered"
        wait_for(lambda: httpx.get(health, timeout=5, trust_env=False).json()["nats_connects"]
                 == before + 1, 10)
        link = fctx.nats()
        assert await link.wait_connected(5)

        async def pong() -> bool:
            try:
                return (await link.request(subject("n2", "ping"), {}, 1))["nodeId"] == "n2"
            except Exception:
                return False

        for _ in range(100):
            if await pong():
                break
            await asyncio.sleep(0.1)
        assert await pong()


class TestCommand:
    def test_help(self) -> None:
        """`healer node --help` documents the daemon and its exit codes."""
        r = subprocess.run([sys.executable, "-m", "healer", "node", "--help"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "exit codes" in r.stdout and "--pid-file" in r.stdout

    def test_taken_port_exits_3(self, fleet: Any, tmp_path: Any) -> None:
        """A daemon that cannot listen says so in one line and exits 3."""
        n = fleet.node("n2")
        r = subprocess.run([sys.executable, "-m", "healer", "node", "--node-id", "n2",
                            "--host", n.host, "--port", str(n.port), "--nats-url", n.nats_url,
                            "--state-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=30,
                           env={**os.environ, "HEALER_FLEET_SECRET": fleet.secret})
        assert r.returncode == 3 and "cannot listen" in r.stderr and "Traceback" not in r.stderr

    def test_no_fleet_secret_exits_2(self, tmp_path: Any) -> None:
        """Without a fleet secret the daemon does not start: it could neither sign its
        heartbeats nor check anyone else's. One clear line, exit 2."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEALER")}
        r = subprocess.run([sys.executable, "-m", "healer", "node", "--node-id", "n9",
                            "--host", "127.0.0.1", "--port", "0", "--state-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=30, env=env, cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        assert "fleet.secret" in r.stderr and "Traceback" not in r.stderr

    def test_hostile_node_id_exits_2(self, tmp_path: Any) -> None:
        """A node id with a path separator is refused before anything starts."""
        r = subprocess.run([sys.executable, "-m", "healer", "node", "--node-id", "../x",
                            "--state-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "path separator" in r.stderr
