"""Peers prove who they are: NATS refuses anonymous clients; heartbeats and fleet messages
count only when signed with the fleet secret, fresh and not replayed; the config updater moves
a node only inside the fleet's networks and only after it answers the identity challenge —
anything else goes to a person with the config unchanged; the config's temp file never
follows a planted symlink."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from healer.agents import AgentTask, PlaybookExecutor
from healer.config import load_settings
from healer.errors import SignatureError
from healer.fleet import messages
from healer.fleet.natslink import subject
from healer.fleet.peers import Heartbeats, update_address
from healer.fleet.signing import Refusals, Verifier, prove, sign
from healer.testing.fleet import free_port
from healer.testing.receivers import WebhookReceiver
from healer.testing.wait import until

SECRET = "s3cret-for-tests-only-0123456789"


def health(fleet: Any, node: str) -> dict[str, Any]:
    n = fleet.node(node)
    return httpx.get(f"http://{n.host}:{n.port}/health", timeout=5, trust_env=False).json()


def beat(node: str = "n3", host: str = "127.0.0.3", **extra: Any) -> dict[str, Any]:
    return {"nodeId": node, "host": host, "port": 8855, "natsUrl": "", "uptime_s": 1.0,
            "interactive_session": False, **extra}


class TestSignatures:
    def test_a_signed_heartbeat_is_taken_and_its_replay_refused(self) -> None:
        """The same signed heartbeat twice: the second is refused as a replay."""
        refusals = Refusals()
        beats = Heartbeats(Verifier(SECRET, refusals=refusals))
        doc = sign(beat(), SECRET, "heartbeat")
        assert beats.record(doc) is not None
        assert beats.record(doc) is None
        assert refusals.snapshot() == {"heartbeat:replayed": 1}

    @pytest.mark.parametrize("make,why", [
        (lambda: beat(host="127.0.0.99"), "unsigned"),
        (lambda: sign(beat(), "another-fleets-secret-000000", "heartbeat"), "bad_signature"),
        (lambda: {**sign(beat(), SECRET, "heartbeat"), "host": "127.0.0.99"}, "bad_signature"),
        (lambda: {**sign(beat(), SECRET, "heartbeat"), "interactive_session": True},
         "bad_signature"),
        (lambda: sign(beat(), SECRET, "message"), "bad_signature"),
        (lambda: sign(beat(), SECRET, "heartbeat", now=1000.0), "stale"),
        (lambda: {**beat(), "sig": {"v": 1, "ts": "soon", "nonce": "x", "mac": "y"}},
         "malformed"),
    ])
    def test_forged_heartbeats_are_refused_and_counted(self, make: Any, why: str) -> None:
        """Unsigned, wrongly keyed, altered after signing, signed for another purpose, stale
        or malformed: refused, remembered nowhere, counted by reason."""
        refusals = Refusals()
        beats = Heartbeats(Verifier(SECRET, refusals=refusals))
        assert beats.record(make()) is None and beats.get("n3") is None
        assert refusals.snapshot() == {f"heartbeat:{why}": 1}

    def test_an_older_heartbeat_cannot_move_a_node_back(self) -> None:
        """A beat signed before the last one taken (with its own nonce) is refused."""
        now = [5000.0]
        beats = Heartbeats(Verifier(SECRET, clock=lambda: now[0]), clock=lambda: now[0])
        old = sign(beat(host="127.0.0.3"), SECRET, "heartbeat", now=4990.0)
        new = sign(beat(host="127.0.0.103"), SECRET, "heartbeat", now=4995.0)
        assert beats.record(new) is not None
        assert beats.record(old) is None
        assert beats.get("n3") is not None and beats.get("n3").host == "127.0.0.103"

    def test_without_a_secret_nothing_verifies(self) -> None:
        """A side with no secret refuses everything instead of trusting everything."""
        with pytest.raises(SignatureError) as info:
            Verifier("").check(sign(beat(), SECRET, "heartbeat"), "heartbeat")
        assert info.value.reason == "no_secret"

    def test_the_loop_refuses_to_start_its_fleet_without_a_secret(self, tmp_path: Path) -> None:
        """The fleet service names the missing setting instead of running unsigned."""
        from healer.config import ConfigError
        from healer.core.store import FileStore
        from healer.fleet.service import FleetService

        settings = load_settings(env={}, overrides=[f"state_dir={tmp_path}"])
        with pytest.raises(ConfigError, match=r"fleet\.secret"):
            FleetService(settings, FileStore(settings.state_path))


@pytest.mark.e2e
class TestNats:
    async def test_an_anonymous_client_is_refused_by_the_server(self, fleet: Any) -> None:
        """Authorization is on: without the fleet's credentials NATS refuses the connection,
        so nobody anonymous can publish a heartbeat at all."""
        import nats
        import nats.errors

        url = fleet.node("n1").nats_url
        with pytest.raises((nats.errors.Error, OSError)) as info:
            await nats.connect(servers=[url], connect_timeout=2, allow_reconnect=False,
                               max_reconnect_attempts=0)
        assert "authorization" in str(info.value).lower()
        nc = await nats.connect(servers=[url], connect_timeout=2, user=fleet.nats_user,
                                password=fleet.nats_password)
        await nc.close()

    async def test_unsigned_and_forged_heartbeats_are_ignored_and_counted(
            self, fleet: Any, fctx: Any) -> None:
        """An authenticated client announcing n3 at a new address with an interactive session:
        every node refuses it (counted in /health) and nobody remembers it."""
        link = fctx.nats()
        assert await link.wait_connected(5)
        taken: list[Any] = []

        async def on_beat(m: Any) -> None:
            taken.append(fctx.heartbeats.record(json.loads(m.data)))

        await link.subscribe(subject("n3", "heartbeat"), on_beat)
        before = health(fleet, "n2")["refused"]
        lie = beat(host="127.0.0.99", interactive_session=True)
        await link.publish(subject("n3", "heartbeat"), lie)
        await link.publish(subject("n3", "heartbeat"),
                           sign(lie, "another-fleets-secret-000000", "heartbeat"))
        await link.nc.flush()

        def counted() -> bool:
            now = health(fleet, "n2")["refused"]
            return (now.get("heartbeat:unsigned", 0) > before.get("heartbeat:unsigned", 0)
                    and now.get("heartbeat:bad_signature", 0)
                    > before.get("heartbeat:bad_signature", 0))

        await until(counted, 10)
        await until(lambda: any(t is not None for t in taken), 10)  # real ones still count
        assert all(t is None or (t.host == fleet.node("n3").host and not t.interactive_session)
                   for t in taken)
        assert fctx.heartbeats.refused.get("heartbeat:unsigned", 0) >= 1
        assert health(fleet, "n2")["peers"]["n3"]["interactive_session"] is False

    async def test_a_replayed_heartbeat_is_ignored(self, fleet: Any, fctx: Any) -> None:
        """A genuine heartbeat of n3, published again byte for byte, is refused as a replay."""
        link = fctx.nats()
        assert await link.wait_connected(5)
        raw: list[bytes] = []

        async def grab(m: Any) -> None:
            raw.append(m.data)

        await link.subscribe(subject("n3", "heartbeat"), grab)
        await until(lambda: raw, 10)
        before = health(fleet, "n2")["refused"].get("heartbeat:replayed", 0)
        await link.nc.publish(subject("n3", "heartbeat"), raw[0])
        await link.nc.flush()
        await until(lambda: health(fleet, "n2")["refused"].get("heartbeat:replayed", 0)
                    > before, 10)

    async def test_unsigned_and_replayed_messages_are_refused(self, fleet: Any,
                                                              fctx: Any) -> None:
        """A fleet message without a signature is refused on NATS and HTTP; a signed one is
        delivered once, and the same bytes again are refused as a replay."""
        link = fctx.nats()
        assert await link.wait_connected(5)
        msg = messages.make(messages.REPAIR, "n3", "ops", action="reconnect_nats")
        reply = await link.request(subject("n3", "message"), msg, 2)
        assert reply == {"status": "error", "error": "message refused: unsigned"}
        n = fleet.node("n3")
        url = f"http://{n.host}:{n.port}/message"
        signed = json.dumps(sign(msg, fleet.secret, "message")).encode()
        headers = {"content-type": "application/json"}
        first = httpx.post(url, content=signed, headers=headers, timeout=5, trust_env=False)
        again = httpx.post(url, content=signed, headers=headers, timeout=5, trust_env=False)
        unsigned = httpx.post(url, json=msg, timeout=5, trust_env=False)
        assert first.status_code == 200 and first.json()["status"] == "delivered"
        assert again.status_code == 401 and again.json()["error"] == "message refused: replayed"
        assert unsigned.status_code == 401 and "unsigned" in unsigned.json()["error"]

    def test_identity_answers_prove_the_secret_for_this_address(self, fleet: Any) -> None:
        """GET /identity?nonce=… returns a proof bound to the node, the nonce and its address;
        a bad nonce is a 400 with the reason."""
        n = fleet.node("n2")
        base = f"http://{n.host}:{n.port}/identity"
        nonce = "abcdefghijklmnop0123"
        body = httpx.get(base, params={"nonce": nonce}, timeout=5, trust_env=False).json()
        assert body["proof"] == prove(fleet.secret, "n2", nonce, n.host, n.port)
        bad = httpx.get(base, params={"nonce": "short"}, timeout=5, trust_env=False)
        assert bad.status_code == 400 and "nonce" in bad.json()["error"]


# ---------------------------------------------------------------------------------------------
# The config updater


def _updater_settings(tmp_path: Path, cfg: Path, found: dict[str, Any]) -> Any:
    """Settings whose discovery command says n1 is at ``found`` (no NATS: no heartbeat)."""
    return load_settings(env={}, overrides=[
        f"fleet.config={cfg}", f"state_dir={tmp_path / 's'}", f"results_dir={tmp_path / 'r'}",
        f"fleet_dir={tmp_path / 'f'}", "node_id=ops", f"fleet.secret={SECRET}",
        f"fleet.nats_url=nats://127.0.0.1:{free_port()}",
        "fleet.timeouts=" + json.dumps({"http": 1.0}),
        "fleet.discovery_command=" + json.dumps([sys.executable, "-c",
                                                 f"print({json.dumps(found)!r})"])])


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "fleet.json"
    cfg.write_text(json.dumps({"nodes": {"n1": {"host": "127.0.0.1", "port": free_port(),
                                                "user": "fleet"}}}))
    return cfg


class TestConfigUpdater:
    @pytest.mark.parametrize("host,why", [
        ("203.0.113.5", "outside the fleet's networks"),
        ("169.254.169.254", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("::ffff:169.254.169.254", "link-local"),
        ("fleet-node.example.com", "host name the fleet config does not know"),
    ])
    async def test_moves_outside_the_fleet_go_to_a_person(self, tmp_path: Path, host: str,
                                                          why: str) -> None:
        """A new address outside the fleet's networks is refused before any connection
        (healer never even challenges it); the run hands it to a person, config unchanged."""
        cfg = _config(tmp_path)
        before = cfg.read_bytes()
        settings = _updater_settings(tmp_path, cfg, {"host": host, "port": 8855})
        outcome = await PlaybookExecutor(settings).run(AgentTask("config-updater", "n1"))
        assert outcome.status == "escalated", outcome.result
        assert why in outcome.result["error"]
        assert any("before any connection" in a for a in outcome.result["actions_taken"])
        assert not any("identity challenge" in a for a in outcome.result["actions_taken"])
        assert cfg.read_bytes() == before

    @pytest.mark.parametrize("impostor,why", [
        (lambda q: {}, "answered as 'None'"),
        (lambda q: {"nodeId": "n1", "proof": "0" * 64}, "no valid proof"),
        (lambda q: {"nodeId": "n1", "proof": prove("another-fleets-secret-000000", "n1",
                                                    q["nonce"][0], "127.0.0.7", q["port"])},
         "no valid proof"),
        # a relay: the real node's proof, made for the address it really listens on
        (lambda q: {"nodeId": "n1", "proof": prove(SECRET, "n1", q["nonce"][0],
                                                    "127.0.0.8", 8855)}, "no valid proof"),
    ])
    async def test_a_server_that_cannot_prove_it_is_the_node_is_refused(
            self, tmp_path: Path, impostor: Any, why: str) -> None:
        """A loopback server answering `{}`, a wrong proof, another fleet's proof or a relayed
        proof for another address: refused, handed to a person, config unchanged."""
        cfg = _config(tmp_path)
        before = cfg.read_bytes()
        port: list[int] = []

        def answer(path: str) -> Any:
            q: dict[str, Any] = parse_qs(urlsplit(path).query)
            q["port"] = port[0]
            return impostor(q)

        with WebhookReceiver(host="127.0.0.7", answer=answer) as server:
            port.append(server.port)
            settings = _updater_settings(tmp_path, cfg, {"host": "127.0.0.7",
                                                         "port": server.port})
            outcome = await PlaybookExecutor(settings).run(AgentTask("config-updater", "n1"))
        assert outcome.status == "escalated", outcome.result
        assert why in outcome.result["error"]
        assert any(r["path"].startswith("/identity?nonce=") for r in server.requests)
        assert cfg.read_bytes() == before

    @pytest.mark.e2e
    async def test_the_real_node_at_a_new_address_passes(self, fleet: Any,
                                                         fleet_settings: Any) -> None:
        """n3 moves to a new loopback address: it proves itself there and the config
        follows."""
        host, port = fleet.move_node("n3")
        outcome = await PlaybookExecutor(fleet_settings).run(AgentTask("config-updater", "n3"))
        assert outcome.status == "healed", outcome.result
        assert any("proved its identity" in a for a in outcome.result["actions_taken"])
        node = json.loads(fleet.config_path.read_text())["nodes"]["n3"]
        assert (node["host"], node["port"]) == (host, port)


class TestStoreCredentials:
    def test_the_jetstream_store_uses_the_store_credentials(self, tmp_path: Path) -> None:
        """The store connects to a NATS server with authorization on using
        `store.nats_user`/`store.nats_password`; without them it is refused with a reason that
        does not carry the password."""
        from healer.core.store.jetstream import JetStreamStore
        from healer.errors import UnavailableError
        from healer.testing.nats import NatsServer

        with NatsServer(store_dir=tmp_path / "nats", user="healer",
                        password="store-pass-123") as ns:
            base = [f"state_dir={tmp_path}", f"store.nats_urls={json.dumps([ns.url])}",
                    "store.connect_timeout_s=2"]
            with pytest.raises(UnavailableError) as info:
                JetStreamStore.connect(load_settings(env={}, overrides=base))
            assert "authorization" in str(info.value).lower()
            store = JetStreamStore.connect(load_settings(env={}, overrides=[
                *base, "store.nats_user=healer", "store.nats_password=store-pass-123"]))
            try:
                store.put("peers", "n1", {"ok": True})
                record = store.get("peers", "n1")
                assert record is not None and record.data == {"ok": True}
            finally:
                store.close()


class TestTempFile:
    def test_a_planted_symlink_at_the_check_file_is_not_followed(self, tmp_path: Path) -> None:
        """A symlink planted where the config's check file used to be written: its target is
        untouched, the link stays a link, the config is updated."""
        cfg = tmp_path / "config.json"
        cfg.write_text(json.dumps({"nodes": {"n1": {"host": "127.0.0.2", "user": "fleet"}}}))
        target = tmp_path / "precious.txt"
        target.write_text("do not overwrite\n")
        planted = tmp_path / ".config.json.check"
        planted.symlink_to(target)
        update_address(cfg, "n1", "127.0.0.3", 9000)
        assert target.read_text() == "do not overwrite\n"
        assert planted.is_symlink() and planted.readlink() == target
        assert json.loads(cfg.read_text())["nodes"]["n1"]["host"] == "127.0.0.3"
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            ".config.json.check", "config.json", "config.json.lock", "precious.txt"]


def test_signing_is_one_module() -> None:
    """Both sides use healer.fleet.signing; no other fleet module computes an HMAC."""
    root = Path(__file__).resolve().parents[2] / "healer" / "fleet"
    users = sorted(p.name for p in root.rglob("*.py")
                   if "hmac.new(" in p.read_text() and p.name != "signing.py")
    assert users == []
