"""What a Sentry SDK sends, read defensively: envelopes, store bodies, encodings, auth.

An **envelope** (``POST /api/<project>/envelope/``) is newline-separated::

    {"event_id": "…", "dsn": "https://KEY@host/7", "sent_at": "…", "sdk": {…}}   header
    {"type": "event", "length": 1234, "content_type": "application/json"}        item header
    <1234 bytes of payload>                                                       payload
    {"type": "session"}                                                           next item …
    {…payload up to the next newline…}

An item header with ``length`` is followed by exactly that many bytes (then an optional
newline); without it the payload runs to the next newline. Only ``event`` items (and the
legacy ``store`` body, one event as JSON) become signals; every other item type (sessions,
transactions, attachments, client reports, check-ins, profiles, replays, logs …) is skipped,
not refused, as ingest servers do.

Every bound is checked before work is spent: the decoded body (``max_decompressed_bytes``,
decoded in bounded steps so a compression bomb stops at the limit), the item count, each event's
size (``max_event_bytes``), header line lengths and JSON nesting. A malformed envelope is an
``EnvelopeError`` carrying the HTTP status to answer (400, 413 or 415) and nothing of it is
kept.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from healer.context.ingest import Signal, digest_key
from healer.context.sentry import event_signal
from healer.core.identity import identify
from healer.core.strict_json import loads_strict
from healer.core.trust import ANONYMOUS

EVENT_TYPES = frozenset({"event"})
MAX_HEADER_LINE = 16 * 1024  # an envelope or item header line
MAX_EVENT_DEPTH = 64
MAX_FINGERPRINT_PARTS = 20
DEFAULT_FINGERPRINT = frozenset({"{{ default }}", "{{default}}"})
_CHUNK = 64 * 1024


class EnvelopeError(ValueError):
    """A request healer refuses, with the status to answer (400, 413, 415) and the reason."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Limits:
    """The ``ingest`` bounds that apply while reading one request."""

    max_decompressed: int = 4 << 20
    max_event: int = 1 << 20
    max_items: int = 100

    @classmethod
    def from_settings(cls, ingest: Any) -> Limits:
        return cls(ingest.max_decompressed_bytes, ingest.max_event_bytes, ingest.max_items)


@dataclass(frozen=True)
class Envelope:
    """A parsed envelope: its header, its events (parsed), and what it skipped, by type."""

    header: Mapping[str, Any]
    events: list[Mapping[str, Any]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)


# --- encodings --------------------------------------------------------------------------------


def brotli_available() -> bool:
    try:
        import brotli  # noqa: F401
    except ImportError:
        return False
    return True


def decode_body(raw: bytes, encoding: str | None, limit: int) -> bytes:
    """``raw`` with its ``Content-Encoding`` undone, at most ``limit`` bytes of output."""
    enc = (encoding or "").strip().lower()
    if enc in ("", "identity"):
        if len(raw) > limit:
            raise EnvelopeError(413, f"body larger than {limit} bytes")
        return raw
    if enc in ("gzip", "x-gzip"):
        return _inflate(raw, zlib.MAX_WBITS | 16, limit, "gzip")
    if enc == "deflate":
        try:  # RFC 9110 says zlib-wrapped; some clients send raw deflate
            return _inflate(raw, zlib.MAX_WBITS, limit, "deflate")
        except EnvelopeError as exc:
            if exc.status == 413:
                raise
            return _inflate(raw, -zlib.MAX_WBITS, limit, "deflate")
    if enc == "br":
        return _unbrotli(raw, limit)
    raise EnvelopeError(415, f"unsupported Content-Encoding {enc[:40]!r} (gzip, deflate"
                             f"{', br' if brotli_available() else ''} or none)")


def _inflate(raw: bytes, wbits: int, limit: int, name: str) -> bytes:
    d = zlib.decompressobj(wbits)
    out = bytearray()
    data = raw
    try:
        while data:
            out += d.decompress(data, limit + 1 - len(out))
            if len(out) > limit:
                raise EnvelopeError(413, f"body larger than {limit} bytes once decoded")
            data = d.unconsumed_tail
        out += d.flush(limit + 1 - len(out)) if not d.eof else b""
    except zlib.error as exc:
        raise EnvelopeError(400, f"body is not valid {name} data") from exc
    if len(out) > limit:
        raise EnvelopeError(413, f"body larger than {limit} bytes once decoded")
    if not d.eof:
        raise EnvelopeError(400, f"{name} data is truncated")
    return bytes(out)


def _unbrotli(raw: bytes, limit: int) -> bytes:
    try:
        import brotli
    except ImportError:
        raise EnvelopeError(415, "Content-Encoding br needs the brotli module, which is not "
                                 "installed here (pip install brotli); send gzip instead") from None
    d = brotli.Decompressor()
    out = bytearray()
    step = 1 << 16
    try:
        # Bounded output per call (brotli ≥ 1.2): a bomb stops one step past the limit.
        for i in range(0, len(raw), 1024):
            out += d.process(raw[i:i + 1024], output_buffer_limit=step)
            while not d.can_accept_more_data():
                if len(out) > limit:
                    break
                out += d.process(b"", output_buffer_limit=step)
            if len(out) > limit:
                raise EnvelopeError(413, f"body larger than {limit} bytes once decoded")
        if not d.is_finished():
            raise EnvelopeError(400, "br data is truncated")
    except brotli.error as exc:
        raise EnvelopeError(400, "body is not valid br data") from exc
    return bytes(out)


# --- parsing ----------------------------------------------------------------------------------


def _json_object(raw: bytes, what: str, depth: int) -> Mapping[str, Any]:
    try:
        doc = loads_strict(raw, max_depth=depth)
    except ValueError as exc:
        raise EnvelopeError(400, f"{what} is not acceptable JSON: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise EnvelopeError(400, f"{what} is not a JSON object")
    return doc


def _line(body: bytes, start: int, what: str) -> tuple[bytes, int]:
    end = body.find(b"\n", start, start + MAX_HEADER_LINE + 1)
    if end < 0:
        end = len(body)
        if end - start > MAX_HEADER_LINE:
            raise EnvelopeError(413, f"{what} longer than {MAX_HEADER_LINE} bytes")
    line = body[start:end]
    return (line[:-1] if line.endswith(b"\r") else line), end + 1


def parse_envelope(body: bytes, limits: Limits) -> Envelope:
    """The header, events and skipped items of one (decoded) envelope body."""
    if not body.strip():
        raise EnvelopeError(400, "empty envelope")
    line, pos = _line(body, 0, "the envelope header")
    header = _json_object(line, "the envelope header", 8)
    events: list[Mapping[str, Any]] = []
    skipped: dict[str, int] = {}
    n = 0
    while pos < len(body):
        if body[pos:pos + 1] == b"\n":  # blank lines between items are tolerated
            pos += 1
            continue
        line, pos = _line(body, pos, f"item {n} header")
        if not line.strip():
            continue
        item = _json_object(line, f"item {n} header", 4)
        n += 1
        if n > limits.max_items:
            raise EnvelopeError(413, f"more than {limits.max_items} items in one envelope")
        kind = item.get("type")
        if not isinstance(kind, str) or not kind or len(kind) > 64:
            raise EnvelopeError(400, f"item {n - 1} has no type")
        length = item.get("length")
        if length is not None:
            if isinstance(length, bool) or not isinstance(length, int) or length < 0:
                raise EnvelopeError(400, f"item {n - 1}: length must be a non-negative integer")
            if pos + length > len(body):
                raise EnvelopeError(400, f"item {n - 1} is truncated: length {length}, "
                                         f"{max(len(body) - pos, 0)} bytes left")
            payload = body[pos:pos + length]
            pos += length
            if pos < len(body):
                if body[pos:pos + 1] != b"\n":
                    raise EnvelopeError(400, f"item {n - 1}: payload longer than its length")
                pos += 1
        else:
            end = body.find(b"\n", pos)
            end = len(body) if end < 0 else end
            payload, pos = body[pos:end], end + 1
        if kind not in EVENT_TYPES:
            skipped[kind] = skipped.get(kind, 0) + 1
            continue
        if len(payload) > limits.max_event:
            raise EnvelopeError(413, f"event item larger than {limits.max_event} bytes")
        events.append(_json_object(payload, f"item {n - 1} (event)", MAX_EVENT_DEPTH))
    return Envelope(header, events, skipped)


def parse_store(body: bytes, limits: Limits) -> Mapping[str, Any]:
    """The one event of a legacy store body: JSON, or (old SDKs) base64 of zlib'd JSON."""
    text = body.strip()
    if not text:
        raise EnvelopeError(400, "empty body")
    if not text.startswith(b"{"):
        try:
            packed = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise EnvelopeError(400, "body is neither JSON nor base64") from exc
        text = _inflate(packed, zlib.MAX_WBITS, limits.max_decompressed, "zlib")
    if len(text) > limits.max_event:
        raise EnvelopeError(413, f"event larger than {limits.max_event} bytes")
    return _json_object(text, "the event", MAX_EVENT_DEPTH)


# --- authentication ---------------------------------------------------------------------------


def auth_pairs(header: str | None) -> dict[str, str]:
    """``Sentry sentry_key=…, sentry_version=7, …`` as a dict (empty when absent)."""
    if not header:
        return {}
    text = header.strip()
    if text[:7].lower() == "sentry ":
        text = text[7:]
    out = {}
    for part in text[:4096].split(","):
        name, sep, value = part.strip().partition("=")
        if sep and name.strip():
            out[name.strip().lower()] = value.strip()
    return out


def dsn_key(dsn: object) -> tuple[str, str]:
    """(public key, project id) of a DSN string; ("", "") when it is not one."""
    if not isinstance(dsn, str) or len(dsn) > 2000:
        return "", ""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "", ""
    return parts.username or "", parts.path.rstrip("/").rsplit("/", 1)[-1]


# --- events as signals ------------------------------------------------------------------------


def _user_id(event: Mapping[str, Any]) -> str:
    user = event.get("user")
    if not isinstance(user, Mapping):
        return ""
    for k in ("id", "username", "email", "ip_address"):
        v = user.get(k)
        if isinstance(v, str | int) and not isinstance(v, bool) and str(v).strip():
            return f"{k}:{str(v)[:200]}"
    return ""


def user_hash(project: str, user: str) -> str:
    """What healer keeps of a user: a hash that counts them, never the id."""
    return hashlib.sha256(f"healer-user\x1f{project}\x1f{user}".encode()).hexdigest()[:20]


def signal_of(event: Mapping[str, Any], project: str, root: Path | str | None) -> Signal:
    """One SDK event as a living-context signal, grouped by the SDK's ``fingerprint`` when it
    sends one (``{{ default }}`` standing for healer's), else by healer's fingerprint."""
    sig = event_signal(event, root)
    err = sig.error
    assert err is not None
    ident = identify(err.error_type or "Error", err.message, traceback=err.stack_trace,
                     call_site=err.call_site, root=str(root or ""))
    fp = event.get("fingerprint")
    if (isinstance(fp, list) and fp and len(fp) <= MAX_FINGERPRINT_PARTS
            and all(isinstance(p, str) for p in fp)):
        parts = [ident.fingerprint if p.strip() in DEFAULT_FINGERPRINT else p[:200] for p in fp]
    else:
        parts = [ident.fingerprint]
    user = _user_id(event)
    sdk = event.get("sdk") if isinstance(event.get("sdk"), Mapping) else {}
    detail = {**sig.detail, "project_id": project, "platform": str(event.get("platform") or "")
              [:40], "sdk": str(sdk.get("name") or "")[:100]}
    # Whoever holds the DSN key (public: it ships in browser bundles) sent this: anonymous.
    return replace(sig, key=digest_key("sentry", project, *parts), detail=detail,
                   users=(user_hash(project, user),) if user else (), trust=ANONYMOUS)
