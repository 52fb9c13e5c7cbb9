"""The Sentry ingest's reading of envelopes, and what it does with hostile ones over HTTP."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.context import envelope as env
from healer.context.sentry_intake import EventQueue, KeyRing, RateLimiter, ensure_key, fold
from healer.core.store import FileStore
from healer.errors import StoreError
from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env

KEY = "f" * 32
EVENT = {"event_id": "9ec79c33ec9942ab8353589fcb2e04dc", "platform": "python", "level": "error",
         "exception": {"values": [{"type": "KeyError", "value": "'sku'", "stacktrace": {
             "frames": [{"filename": "app/cart.py", "function": "add", "lineno": 7,
                         "in_app": True}]}}]},
         "user": {"id": "42"}, "tags": {"flow": "cart"}}


def envelope(*items: tuple[dict[str, Any], bytes], header: dict[str, Any] | None = None
             ) -> bytes:
    out = [json.dumps(header or {"event_id": EVENT["event_id"]}).encode()]
    for h, payload in items:
        out += [json.dumps(h).encode(), payload]
    return b"\n".join(out) + b"\n"


def event_item(event: dict[str, Any] = EVENT, *, length: bool = True) -> tuple[dict[str, Any],
                                                                              bytes]:
    payload = json.dumps(event).encode()
    return ({"type": "event", "length": len(payload)} if length else {"type": "event"}), payload


class TestParsing:
    def test_events_are_read_and_other_items_skipped(self) -> None:
        """Event items are parsed, with or without a length; sessions, transactions and
        attachments are counted as skipped, not refused."""
        body = envelope(event_item(), ({"type": "session"}, b'{"sid":"x"}'),
                        ({"type": "attachment", "length": 3}, b"a\nb"),
                        event_item(length=False), ({"type": "transaction"}, b"{}"))
        parsed = env.parse_envelope(body, env.Limits())
        assert len(parsed.events) == 2
        assert parsed.skipped == {"session": 1, "attachment": 1, "transaction": 1}

    @pytest.mark.parametrize(("body", "status"), [
        (b"", 400),
        (b"not json\n", 400),
        (b'{"event_id":"x"}\n{"type":"event","length":500}\n{"a":1}\n', 400),  # truncated
        (b'{}\n{"type":"event","length":2}\n{"a":1}\n', 400),  # payload longer than length
        (b'{}\n{"type":"event","length":-1}\n{}\n', 400),
        (b'{}\n{"type":"event","length":"7"}\n{}\n', 400),
        (b'{}\n{"length":2}\n{}\n', 400),  # no type
        (b'{}\n{"type":"event"}\n' + b"[" * 5000 + b"]" * 5000 + b"\n", 400),  # JSON bomb
        (b'{}\n{"type":"event"}\n\xff\xfe\x00binary\n', 400),
        (b'{}\n{"type":"event"}\n[1,2]\n', 400),  # not an object
        (b'{"a":"' + b"x" * 20000 + b'"}\n', 413),  # huge header line
        (b"{}\n" + b'{"type":"session"}\n{}\n' * 101, 413),  # too many items
    ])
    def test_malformed_envelopes_are_refused(self, body: bytes, status: int) -> None:
        """Each malformed envelope is an EnvelopeError with a 4xx status and a reason."""
        with pytest.raises(env.EnvelopeError) as got:
            env.parse_envelope(body, env.Limits())
        assert got.value.status == status and got.value.reason

    def test_an_oversized_event_is_413(self) -> None:
        big = {**EVENT, "extra": {"blob": "x" * 5000}}
        with pytest.raises(env.EnvelopeError) as got:
            env.parse_envelope(envelope(event_item(big)), env.Limits(max_event=2048))
        assert got.value.status == 413

    def test_encodings_and_a_compression_bomb(self) -> None:
        """gzip and deflate (zlib or raw) are decoded; a bomb stops at the limit (413);
        garbage is 400; an unknown encoding 415; br is decoded with the same bounds."""
        body = envelope(event_item())
        assert env.decode_body(gzip.compress(body), "gzip", 1 << 20) == body
        assert env.decode_body(zlib.compress(body), "deflate", 1 << 20) == body
        raw = zlib.compressobj(wbits=-15)
        assert env.decode_body(raw.compress(body) + raw.flush(), "deflate", 1 << 20) == body
        bomb = gzip.compress(b"\0" * (50 << 20))
        with pytest.raises(env.EnvelopeError) as got:
            env.decode_body(bomb, "gzip", 1 << 20)
        assert got.value.status == 413
        with pytest.raises(env.EnvelopeError) as got:
            env.decode_body(b"not gzip at all", "gzip", 1 << 20)
        assert got.value.status == 400
        with pytest.raises(env.EnvelopeError) as got:
            env.decode_body(gzip.compress(body)[:-10], "gzip", 1 << 20)
        assert got.value.status == 400
        with pytest.raises(env.EnvelopeError) as got:
            env.decode_body(body, "compress", 1 << 20)
        assert got.value.status == 415
        import brotli

        assert env.decode_body(brotli.compress(body), "br", 1 << 20) == body
        br_bomb = brotli.compress(b"\0" * (50 << 20), quality=5)  # 50 MB in under 1 KB
        assert len(br_bomb) < 1000
        with pytest.raises(env.EnvelopeError) as got:
            env.decode_body(br_bomb, "br", 1 << 20)
        assert got.value.status == 413
        with pytest.raises(env.EnvelopeError) as got:
            env.decode_body(brotli.compress(body)[:-4], "br", 1 << 20)
        assert got.value.status == 400

    def test_legacy_store_bodies(self) -> None:
        """A store body is the event as JSON, or base64 of zlib'd JSON (old SDKs)."""
        import base64

        raw = json.dumps(EVENT).encode()
        assert env.parse_store(raw, env.Limits())["event_id"] == EVENT["event_id"]
        packed = base64.b64encode(zlib.compress(raw))
        assert env.parse_store(packed, env.Limits())["event_id"] == EVENT["event_id"]


class TestGrouping:
    def test_the_sdk_fingerprint_groups_else_healers(self) -> None:
        """Two events differing only in the line number are one incident; an SDK
        fingerprint overrides healer's; a user is kept only as a hash."""
        a = env.signal_of(EVENT, "1", None)
        moved = json.loads(json.dumps(EVENT))
        moved["exception"]["values"][0]["stacktrace"]["frames"][0]["lineno"] = 99
        assert env.signal_of(moved, "1", None).key == a.key
        assert env.signal_of(EVENT, "2", None).key != a.key  # another project
        custom = {**EVENT, "fingerprint": ["cart-broken"]}
        other = {**moved, "fingerprint": ["cart-broken"],
                 "exception": {"values": [{"type": "ValueError", "value": "x"}]}}
        assert env.signal_of(custom, "1", None).key == env.signal_of(other, "1", None).key
        assert env.signal_of(custom, "1", None).key != a.key
        assert a.users and "42" not in a.users[0]
        assert a.error is not None and a.error.function == "add"

    def test_fold_sums_counts_and_users(self) -> None:
        a = env.signal_of(EVENT, "1", None)
        b = env.signal_of({**EVENT, "user": {"id": "43"}}, "1", None)
        (one,) = fold([a, b, a])
        assert one.count == 3 and len(one.users) == 2


class TestKeysAndRate:
    def test_keys(self, tmp_path: Any) -> None:
        from healer.config import load_settings

        s = load_settings(env={}, overrides=[f"state_dir={tmp_path}",
                                             'ingest.sentry_keys=["open","bound:7"]'])
        ring = KeyRing(s)
        assert ring.check("open", "3") == 200
        assert ring.check("bound", "7") == 200
        assert ring.check("bound", "8") == 403
        assert ring.check("nope", "7") == 403
        assert ring.check("", "7") == 401

    def test_stored_keys_are_looked_at_once_a_second_and_on_a_refusal(self, tmp_path: Any
                                                                         ) -> None:
        from healer.config import load_settings
        from healer.context.sentry_intake import keys_path

        s = load_settings(env={}, overrides=[f"state_dir={tmp_path}"])
        ring = KeyRing(s)
        now = [100.0]
        ring.clock = lambda: now[0]
        assert ring.check("x" * 32, "1") == 401  # none set up yet
        key, project = ensure_key(s)
        assert ring.check(key, project) == 200  # made a moment ago: found on first use
        keys_path(s).write_text('{"projects": {}}')  # taken out of the file
        now[0] += 0.5
        assert ring.check(key, project) == 200  # within the second: the known keys
        now[0] += 0.6
        assert ring.check(key, project) == 401  # looked again: gone

    @pytest.mark.asyncio
    async def test_a_burst_is_filed_as_one_batch(self) -> None:
        batches: list[list[Any]] = []

        async def ingest(signals: list[Any]) -> None:
            batches.append(signals)

        queue = EventQueue(ingest, 1000)
        signals = [env.signal_of(EVENT, "1", None) for _ in range(50)]
        for sig in signals:  # one request at a time, the worker awake between them
            assert queue.offer([sig])
            for _ in range(3):
                await asyncio.sleep(0)
        deadline = asyncio.get_running_loop().time() + 10
        while queue.filed < 50 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        await queue.close()
        assert queue.filed == 50
        assert len(batches) == 1 and batches[0][0].count == 50  # folded: one incident, 50

    async def test_a_batch_the_store_failed_is_filed_again_and_counted_once(
            self, make_settings: Any) -> None:
        """The store failed after the incident's write had landed (a NATS server gone, an
        index write timed out): the batch is filed again, and its events count once."""
        from healer.context.service import ContextService

        settings = make_settings()
        store = FlakyStore(settings.state_path)
        svc = ContextService(settings, store)
        queue = EventQueue(svc.ingest, 100)
        signals = [env.signal_of(EVENT, "1", None) for _ in range(5)]
        assert queue.offer(signals)
        deadline = asyncio.get_running_loop().time() + 30
        while queue.filed < 5 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        await queue.close()
        await svc.stop()
        assert store.failed == 1 and queue.filed == 5
        assert svc.book.get(signals[0].key)["count"] == 5

    def test_rate_limiter(self) -> None:
        now = [0.0]
        rl = RateLimiter(2.0, 3, clock=lambda: now[0])
        assert [rl.take("k") for _ in range(4)] == [0, 0, 0, 1]
        now[0] = 0.5
        assert rl.take("k") == 0
        assert RateLimiter(0, 1).take("k") == 0


class FlakyStore(FileStore):
    """Fails the first incident index write, after the incident record itself was written
    (what a timeout of the store looks like to the writer: did it land?)."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.failed = 0

    def add_member(self, set_name: str, key: str) -> None:
        if not self.failed and set_name.startswith("incidents-"):
            self.failed += 1
            raise StoreError("JetStream did not answer within 10s")
        super().add_member(set_name, key)


# --- over HTTP ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("sentry-hostile")
    s = ServeProcess(healer_env(root / "state", root / "results", root / "fleet",
                                HEALER_EXECUTOR="playbook", HEALER__CONTEXT__ENABLED="false",
                                HEALER_SENTRY_KEY=f"{KEY}:5",
                                HEALER__INGEST__CORS_ORIGINS="https://app.example.com",
                                HEALER__INGEST__MAX_BODY_BYTES="65536"))
    yield s
    s.close()


def post(server: ServeProcess, body: bytes, *, path: str = "/api/5/envelope/",
         auth: bool = True, **headers: str) -> Any:
    h = {"content-type": "application/x-sentry-envelope", **headers}
    if auth:
        h["x-sentry-auth"] = f"Sentry sentry_version=7, sentry_key={KEY}, sentry_client=t/1"
    return server.http.post(path, content=body, headers=h)


def only_probes(server: ServeProcess) -> bool:
    """Nothing but the auth test's one good event was ever filed."""
    found = server.http.get("/api/v1/context/incidents").json()["incidents"]
    return all("AuthProbe" in i["summary"] for i in found)


HOSTILE: list[tuple[str, bytes, dict[str, str]]] = [
    ("truncated", b'{}\n{"type":"event","length":900}\n{"a":', {}),
    ("wrong length", b'{}\n{"type":"event","length":3}\n{"a":1}\n', {}),
    ("huge header", b'{"h":"' + b"x" * 30000 + b'"}\n', {}),
    ("JSON bomb", b'{}\n{"type":"event"}\n' + b'{"a":' * 3000 + b"1" + b"}" * 3000, {}),
    ("binary item", b'{}\n{"type":"event"}\n\x00\x01\x02\xff\xfe\n', {}),
    ("bad UTF-8 header", b'{"x":"\xc3\x28"}\n', {}),
    ("NaN", b'{}\n{"type":"event"}\n{"a":NaN}\n', {}),
    ("gzip lie", b"plain text, not gzip", {"content-encoding": "gzip"}),
    ("bomb", gzip.compress(b"\0" * (20 << 20)), {"content-encoding": "gzip"}),
    ("unknown encoding", b"{}", {"content-encoding": "zstd"}),
    ("too large", b"x" * 70000, {}),
    ("form type", b"{}", {"content-type": "application/x-www-form-urlencoded"}),
]


class TestOverHttp:
    @pytest.mark.parametrize(("name", "body", "headers"), HOSTILE, ids=[h[0] for h in HOSTILE])
    def test_hostile_envelopes_are_4xx_and_store_nothing(self, server: ServeProcess, name: str,
                                                         body: bytes,
                                                         headers: dict[str, str]) -> None:
        r = post(server, body, **headers)
        assert 400 <= r.status_code < 500, (name, r.status_code, r.text)
        assert only_probes(server)

    def test_auth_is_checked(self, server: ServeProcess) -> None:
        """No key is 401, a wrong key or another project 403; the key may come from the
        query or the envelope's dsn, as browser and other SDKs send it."""
        body = envelope(event_item({**EVENT, "exception": {"values": [
            {"type": "AuthProbe", "value": "x"}]}}))
        assert post(server, body, auth=False).status_code == 401
        assert server.http.post("/api/5/envelope/?sentry_key=" + "0" * 32, content=body,
                                headers={"content-type": "text/plain"}).status_code == 403
        assert post(server, body, path="/api/6/envelope/").status_code == 403
        dsn_body = envelope(event_item(), header={"dsn": f"http://{KEY}@h/6"})
        assert post(server, dsn_body, auth=False).status_code == 403
        assert only_probes(server)
        ok = server.http.post(f"/api/5/envelope/?sentry_key={KEY}&sentry_version=7",
                              content=gzip.compress(body),
                              headers={"content-type": "text/plain",
                                       "content-encoding": "gzip"})
        assert ok.status_code == 200 and ok.json() == {"id": EVENT["event_id"]}
        found = server.wait_for(lambda: [i for i in server.http.get(
            "/api/v1/context/incidents").json()["incidents"] if "AuthProbe" in i["summary"]])
        assert found[0]["count"] == 1

    def test_cors_for_configured_origins_only(self, server: ServeProcess) -> None:
        pre = server.http.options("/api/5/envelope/", headers={
            "origin": "https://app.example.com", "access-control-request-method": "POST"})
        assert pre.status_code == 204
        assert pre.headers["access-control-allow-origin"] == "https://app.example.com"
        bad = server.http.options("/api/5/envelope/", headers={
            "origin": "https://evil.example", "access-control-request-method": "POST"})
        assert bad.status_code == 403
        plain = server.http.options("/api/5/envelope/")  # no Origin: not a CORS preflight
        assert plain.status_code == 204 and plain.headers["allow"] == "POST, OPTIONS"
        assert "access-control-allow-origin" not in plain.headers
        refused = server.http.post(f"/api/5/store/?sentry_key={KEY}", content=b"{}",
                                   headers={"origin": "https://evil.example",
                                            "content-type": "text/plain"})
        assert refused.status_code == 403
        # The ingest's origins open only the ingest: other routes still refuse them.
        other = server.http.post("/api/v1/errors", json={}, headers={
            "origin": "https://app.example.com"})
        assert other.status_code == 403

    def test_other_routes_keep_their_content_types(self, server: ServeProcess) -> None:
        r = server.http.post("/api/v1/errors", content=b"{}",
                             headers={"content-type": "application/x-sentry-envelope"})
        assert r.status_code == 415

    def test_the_server_is_healthy_after(self, server: ServeProcess) -> None:
        assert server.http.get("/health").status_code == 200
        assert not re.search(r"Traceback", server.log())
