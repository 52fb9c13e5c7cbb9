"""Receivers that speak the notify targets' real wire formats, on loopback, for tests.

- ``SlackApi``: Slack's Web API ``chat.postMessage`` / ``chat.update`` (bearer token checked,
  ``{"ok": true, "channel", "ts"}`` answers, ``messages`` by ``ts`` as they stand now);
- ``PagerDutyEvents``: the Events API v2 endpoint (``202 {"status": "success",
  "message": "Event processed", "dedup_key"}``, 400 for a malformed event);
- ``SignedWebhook``: a JSON receiver that verifies the Standard Webhooks signature;
- ``SmtpInbox``: a real SMTP server (aiosmtpd) that requires STARTTLS with a self-signed
  certificate made on the spot, and AUTH with one user.

Each can be made to fail (``down = True``: 503, or a closed port for SMTP) to test retries.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from healer.demo.ports import free_port

Handler = Callable[[str, dict[str, str], bytes], tuple[int, Any]]


class JsonReceiver:
    """A threaded HTTP server on 127.0.0.1 whose POSTs ``handle(path, headers, body)``
    answers; ``down`` makes it answer 503 (as a receiver in an outage does)."""

    def __init__(self, handle: Handler):
        self.down = False
        self.hits = 0
        receiver = self

        class _H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                receiver.hits += 1
                if receiver.down:
                    code, answer = 503, {"error": "down"}
                else:
                    code, answer = handle(self.path, dict(self.headers), raw)
                data = json.dumps(answer).encode() if not isinstance(answer, bytes) else answer
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._lock = threading.Lock()

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class SlackApi(JsonReceiver):
    def __init__(self, token: str):
        self.token = token
        self.messages: dict[str, dict[str, Any]] = {}
        self.calls: list[dict[str, Any]] = []
        self._n = 0
        super().__init__(self._handle)

    def _handle(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if headers.get("Authorization") != f"Bearer {self.token}":
            return 200, {"ok": False, "error": "invalid_auth"}
        body = json.loads(raw)
        method = path.rsplit("/", 1)[-1]
        self.calls.append({"method": method, "body": body})
        with self._lock:
            if method == "chat.postMessage":
                if not body.get("channel"):
                    return 200, {"ok": False, "error": "channel_not_found"}
                self._n += 1
                ts = f"1700000000.{self._n:06d}"
            elif method == "chat.update":
                ts = body.get("ts", "")
                if ts not in self.messages:
                    return 200, {"ok": False, "error": "message_not_found"}
            else:
                return 200, {"ok": False, "error": "unknown_method"}
            self.messages[ts] = body
        return 200, {"ok": True, "channel": body["channel"], "ts": ts,
                     "message": {"text": body.get("text", "")}}


class PagerDutyEvents(JsonReceiver):
    def __init__(self, routing_key: str = "R0123456789abcdef0123456789abcde"):
        self.routing_key = routing_key
        self.events: list[dict[str, Any]] = []
        super().__init__(self._handle)

    def _handle(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        try:
            ev = json.loads(raw)
        except ValueError:
            return 400, {"status": "invalid event", "message": "Event object is invalid"}
        if ev.get("routing_key") != self.routing_key or ev.get("event_action") not in (
                "trigger", "acknowledge", "resolve") or (
                ev["event_action"] == "trigger" and not {"summary", "source", "severity"}
                <= set(ev.get("payload") or {})):
            return 400, {"status": "invalid event", "message": "Event object is invalid",
                         "errors": ["bad routing_key, event_action or payload"]}
        self.events.append(ev)
        return 202, {"status": "success", "message": "Event processed",
                     "dedup_key": ev.get("dedup_key", "")}


class SignedWebhook(JsonReceiver):
    """Accepts only what carries a valid Standard Webhooks signature (else 401)."""

    def __init__(self, secret: str):
        from healer.core.notify.webhook import verify

        self.secret = secret
        self.verified: list[dict[str, Any]] = []
        self.refused = 0

        def handle(path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
            if not verify(self.secret, headers, raw):
                self.refused += 1
                return 401, {"error": "bad signature"}
            self.verified.append({"headers": headers, "body": json.loads(raw)})
            return 204, b""

        super().__init__(handle)


def self_signed(folder: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A certificate for ``host`` and its key, made now (``cryptography``)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "smtp-cert.pem", folder / "smtp-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class HeldAnswer:
    """A notify target whose answer is held back (until ``release``) after the receiver got
    the message: its sender paused, or dying, mid-send."""

    name = "webhook"

    def __init__(self, inner: Any):
        self.inner, self.release = inner, asyncio.Event()

    def wants(self, state: str) -> bool:
        return bool(self.inner.wants(state))

    async def send(self, notice: Any, memo: dict[str, Any]) -> Any:
        sent = await self.inner.send(notice, memo)
        await self.release.wait()
        return sent


class SmtpInbox:
    """A real SMTP server on 127.0.0.1 requiring STARTTLS and AUTH (``user``/``password``);
    ``messages`` are the ``email.message.EmailMessage`` objects it accepted. ``cert`` is the
    CA file a client must trust."""

    def __init__(self, folder: Path, *, user: str, password: str):
        import ssl

        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult

        self.user, self.password = user, password
        self.messages: list[Any] = []
        self.cert, key = self_signed(folder)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert, key)
        inbox = self

        class _Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                from email import message_from_bytes, policy

                inbox.messages.append(message_from_bytes(envelope.content,
                                                         policy=policy.default))
                return "250 Message accepted for delivery"

        def auth(server: Any, session: Any, envelope: Any, mechanism: str,
                 data: Any) -> Any:
            ok = (getattr(data, "login", b"") == user.encode()
                  and getattr(data, "password", b"") == password.encode())
            return AuthResult(success=ok)

        self.port = free_port()  # aiosmtpd needs the port before it listens
        self._controller = Controller(_Handler(), hostname="127.0.0.1", port=self.port,
                                      tls_context=ctx, require_starttls=True,
                                      authenticator=auth, auth_required=True,
                                      auth_require_tls=True, server_hostname="127.0.0.1")

    def __enter__(self) -> SmtpInbox:
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()
