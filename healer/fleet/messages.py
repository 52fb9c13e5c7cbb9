"""Fleet messages: the one document every channel carries (``schemas/fleet-message.schema.json``).

Required ``type``, ``to``, ``from``; optional ``id`` (uuid4), ``timestamp`` (ISO 8601),
``payload{subject ≤200 chars, body ≤50,000, action, target}``, ``priority``. A message is
validated when it is made and again when a daemon receives it: nothing from the network is
trusted. On NATS and HTTP a message also carries ``sig`` (``healer.fleet.signing``), checked
by ``parse_signed`` before anything else looks at it.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from healer.core.schemas import errors as schema_errors
from healer.core.seeds import Seed, now_iso
from healer.errors import UsageError
from healer.fleet.signing import Verifier

REPAIR = "repair"
MAX_MESSAGE_BYTES = 64 * 1024


class BadMessage(UsageError):
    """A message that is not valid against the schema (reason in the text)."""


def make(type: str, to: str, sender: str, *, subject: str = "", body: str = "",
         priority: str = "normal", **payload: str) -> dict[str, Any]:
    """A new, valid message with a fresh id and timestamp."""
    msg: dict[str, Any] = {
        "type": type, "to": to, "from": sender, "id": str(uuid.uuid4()),
        "timestamp": now_iso(), "priority": priority,
        "payload": {"subject": subject[:200], "body": body[:50_000], **payload},
    }
    return validate(msg)


def validate(data: Any) -> dict[str, Any]:
    """``data`` if it is a valid message, else ``BadMessage`` naming the first problem."""
    problems = schema_errors("fleet-message", data)
    if problems:
        key, message = problems[0]
        raise BadMessage(f"invalid fleet message: {key + ': ' if key else ''}{message}")
    return dict(data)


def parse(raw: bytes) -> dict[str, Any]:
    """Bytes off the wire → a validated message."""
    return validate(_load(raw))


def parse_signed(raw: bytes, verifier: Verifier) -> dict[str, Any]:
    """Bytes off the network → a validated message whose signature holds (``SignatureError``
    otherwise: unsigned, forged, stale or replayed)."""
    return validate(verifier.check(_load(raw), "message"))


def _load(raw: bytes) -> Any:
    if len(raw) > MAX_MESSAGE_BYTES:
        raise BadMessage(f"message larger than {MAX_MESSAGE_BYTES} bytes")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadMessage(f"message is not JSON: {exc}") from exc


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode()


def subject_of(msg: dict[str, Any]) -> str:
    payload = msg.get("payload") or {}
    return str(payload.get("subject") or f"{msg['type']} from {msg['from']}")[:200]


def to_seed(msg: dict[str, Any]) -> Seed:
    """The message as a seed file (P4, P5 and P7 carry seed files)."""
    payload = msg.get("payload") or {}
    body = str(payload.get("body") or "")
    extra = {k: v for k, v in payload.items() if k not in ("subject", "body")}
    if extra:
        body += "\n\n```json\n" + json.dumps(extra, indent=2) + "\n```\n"
    severity = {"emergency": "critical", "high": "high"}.get(msg.get("priority", ""), "info")
    return Seed(sender=msg["from"], to=msg["to"], subject=subject_of(msg), body=body or "-",
                timestamp=msg.get("timestamp", ""), type=msg["type"], severity=severity,
                id=msg.get("id", ""))


def from_seed(seed: Seed) -> dict[str, Any]:
    """A seed file read from an inbox, as a message (its JSON block restores the payload)."""
    payload: dict[str, Any] = {"subject": seed.subject, "body": seed.body[:50_000]}
    msg: dict[str, Any] = {"type": seed.type, "to": seed.to, "from": seed.sender,
                           "timestamp": seed.timestamp, "payload": payload}
    if seed.id:
        msg["id"] = seed.id
    head, sep, tail = seed.body.rpartition("```json\n")
    if sep:
        try:
            extra = json.loads(tail.rsplit("```", 1)[0])
            if isinstance(extra, dict):
                payload.update({k: v for k, v in extra.items() if k in ("action", "target")})
                payload["body"] = head.rstrip()
        except json.JSONDecodeError:
            pass
    return validate(msg)
