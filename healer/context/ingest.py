"""Intake: every error source becomes a ``Signal`` carrying a ``NormalizedError``.

::

    Sentry webhook ──────┐  (sentry.py)
    Alertmanager v4 ─────┤
    Loki (via AM / rule) ┼─► Signal(key, firing|resolved, NormalizedError) ─► IncidentBook
    Slack /heal ─────────┘

The normalised error is the seed's ``{message, file, line, stackTrace, severity, source,
environment}`` (``schemas/normalized-error.schema.json``); ``key`` is the dedup key: the
Sentry issue, the Alertmanager alert fingerprint, the LogQL rule, the text of a Slack report.

Authentication lives here too, each check constant-time over the raw bytes: Sentry's
``Sentry-Hook-Signature`` (hex HMAC-SHA256 of the body with the client secret), Slack's
``X-Slack-Signature`` (``v0=`` HMAC-SHA256 of ``v0:<timestamp>:<body>``, 5-minute window) and
Alertmanager's bearer token. With no secret configured every request is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer.context import paths
from healer.core.names import is_safe_name
from healer.core.trust import ANONYMOUS, TRUSTED
from healer.errors import UsageError

SOURCES = ("sentry", "alertmanager", "loki", "slack", "manual")
SEVERITIES = ("critical", "high", "medium", "low", "info")
FIRING, RESOLVED = "firing", "resolved"
MAX_MESSAGE = 10_000
MAX_STACK = 100_000
MAX_FIELD = 300

_SEVERITY_WORDS = {
    "fatal": "critical", "critical": "critical", "page": "critical", "p0": "critical",
    "p1": "high", "error": "high", "high": "high", "major": "high",
    "warning": "medium", "warn": "medium", "medium": "medium", "minor": "medium", "p2": "medium",
    "low": "low", "p3": "low", "info": "info", "debug": "info", "none": "info", "p4": "info",
}
_PY_FRAME = re.compile(r'File "(?P<file>[^"\n]+)", line (?P<line>\d+)(?:, in (?P<func>[^\s]+))?')
_JS_FRAME = re.compile(r"at (?:(?P<func>[^\s(]+) \()?(?P<file>[^\s()]+?):(?P<line>\d+):\d+\)?")
_FILE_LINE = re.compile(r"(?<![\w/.-])(?P<file>[\w./-]+\.(?:py|pyi|js|mjs|cjs|ts|tsx|jsx|go|rb|"
                        r"java|kt|rs|php|cs|swift|c|cc|cpp|h|hpp|scala|ex|exs)):(?P<line>\d+)")
_ERROR_TYPE = re.compile(r"^\s*(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|"
                         r"Fault|Failure))\b\s*:?")
_FOREIGN = ("site-packages/", "dist-packages/", "node_modules/", "/lib/python", "<frozen")


def severity_of(word: object, default: str = "high") -> str:
    """A source's severity word (Sentry level, alert label) as one of ``SEVERITIES``."""
    if not isinstance(word, str):
        return default
    return _SEVERITY_WORDS.get(word.strip().lower(), default)


def _cut(text: object, limit: int) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= limit else s[:limit] + " […]"


def _tail(text: object, limit: int) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= limit else "[…]\n" + s[-limit:]


def _line(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


@dataclass(frozen=True)
class NormalizedError:
    """One error in the seed's shape, with the file already repo-relative."""

    message: str
    file: str = ""
    line: int | None = None
    stack_trace: str = ""
    severity: str = "high"
    source: str = "manual"
    environment: str = ""
    error_type: str = ""
    function: str = ""
    sentry: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The wire form (``stackTrace``); empty extras left out."""
        out: dict[str, Any] = {"message": self.message, "file": self.file, "line": self.line,
                               "stackTrace": self.stack_trace, "severity": self.severity,
                               "source": self.source, "environment": self.environment}
        for key in ("error_type", "function"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.sentry:
            out["sentry"] = dict(self.sentry)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], root: Path | str | None = None
                  ) -> NormalizedError:
        """From the wire form (validated against the schema; ``UsageError`` naming the key)."""
        from healer.core.schemas import errors as schema_errors

        problems = schema_errors("normalized-error", data)
        if problems:
            key, message = problems[0]
            raise UsageError(f"normalised error: {key + ': ' if key else ''}{message}")
        message = data["message"]
        return cls(
            message=message, file=paths.normalise(data.get("file", ""), root),
            line=data.get("line"), stack_trace=data.get("stackTrace", ""),
            severity=data.get("severity", "high"), source=data.get("source", "manual"),
            environment=data.get("environment", ""),
            error_type=data.get("error_type") or error_type_of(message),
            function=data.get("function", ""), sentry=dict(data.get("sentry") or {}))

    @property
    def call_site(self) -> str:
        """``file:function`` (or just the file) — what the fingerprint is made of."""
        if not self.file:
            return ""
        return f"{self.file}:{self.function}" if self.function else self.file


@dataclass(frozen=True)
class Signal:
    """One thing a source said: an error ``firing`` (or ``resolved``) under a dedup key.

    ``trust`` (``healer.core.trust``): anonymous unless the sender was authenticated — the
    parsers of the signed webhooks (``from_alertmanager``, ``from_slack``,
    ``healer.context.sentry.from_sentry``) and healer's own Loki rules make trusted signals,
    because only their authenticated routes call them; the DSN ingest's are anonymous, with
    ``origin`` naming the key they came with (its flood-limit bucket). ``delivery``: see
    ``healer.core.incidents.Signal`` (the Sentry ingest's retries of one batch)."""

    key: str
    status: str
    source: str
    error: NormalizedError | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    count: int = 1  # occurrences this signal stands for (an ingest batch folds repeats)
    users: tuple[str, ...] = ()  # hashes of the users it hit (never the ids)
    trust: str = ANONYMOUS
    origin: str = ""
    delivery: str = ""

    def __post_init__(self) -> None:
        if not is_safe_name(self.key):
            raise UsageError(f"unusable dedup key {self.key!r}")
        if self.status not in (FIRING, RESOLVED):
            raise UsageError(f"status must be firing or resolved, got {self.status!r}")
        if self.trust not in (TRUSTED, ANONYMOUS):
            raise UsageError(f"trust must be trusted or anonymous, got {self.trust!r}")

    def reporters(self) -> tuple[str, ...]:
        """Who reported it, for approval eligibility: its users and its release."""
        release = str(((self.error.sentry if self.error else None) or {}).get("release") or "")
        return (*(f"u:{u}" for u in self.users), *((f"r:{release}",) if release else ()))


def digest_key(prefix: str, *parts: object) -> str:
    raw = "\x1f".join(str(p) for p in parts)
    return f"{prefix}-{hashlib.sha256(raw.encode('utf-8', 'replace')).hexdigest()[:20]}"


def error_type_of(message: str) -> str:
    m = _ERROR_TYPE.match(message or "")
    return m.group("type") if m else ""


def locate(text: str, root: Path | str | None = None) -> tuple[str, int | None, str]:
    """The innermost project frame named in ``text``: (file, line, function), or ("", None, "").

    Python tracebacks list the innermost frame last, JavaScript stacks first; library frames
    (site-packages, node_modules) are passed over while a project frame exists.
    """
    if not text:
        return "", None, ""
    found = [(m.group("file"), m.group("line"), m.group("func") or "")
             for m in _PY_FRAME.finditer(text)]
    if not found:
        found = [(m.group("file"), m.group("line"), m.group("func") or "")
                 for m in _JS_FRAME.finditer(text)][::-1]
    if not found:
        found = [(m.group("file"), m.group("line"), "") for m in _FILE_LINE.finditer(text)][::-1]
    ours = [f for f in found if not any(mark in f[0] for mark in _FOREIGN)]
    for file, line, func in reversed(ours or found):
        rel = paths.normalise(file, root)
        if rel:
            return rel, int(line), func
    return "", None, ""


# --- authentication ---------------------------------------------------------------------------


def verify_sentry(secret: str, raw: bytes, signature: str | None) -> bool:
    """Whether ``signature`` is the hex HMAC-SHA256 of the raw body with the client secret."""
    if not secret or not signature:
        return False
    expected = hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest().encode()
    return hmac.compare_digest(expected, signature.strip().lower().encode("utf-8", "replace"))


def verify_slack(secret: str, timestamp: str | None, raw: bytes, signature: str | None, *,
                 now: float, max_age_s: float) -> str:
    """``""`` if the Slack request is authentic and fresh, else why not."""
    if not secret:
        return "no Slack signing secret is configured"
    if not timestamp or not signature:
        return "missing X-Slack-Request-Timestamp or X-Slack-Signature"
    try:
        ts = int(timestamp.strip())
    except ValueError:
        return "X-Slack-Request-Timestamp is not a number"
    if abs(now - ts) > max_age_s:
        return "request timestamp outside the replay window"
    base = b"v0:" + str(ts).encode() + b":" + raw
    expected = ("v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()).encode()
    if not hmac.compare_digest(expected, signature.strip().encode("utf-8", "replace")):
        return "signature mismatch"
    return ""


def verify_bearer(token: str, header: str | None) -> bool:
    """Whether ``Authorization`` carries ``Bearer <token>`` (never true without a token)."""
    if not token or not header:
        return False
    scheme, _, value = header.strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        value.strip().encode("utf-8", "replace"), token.encode())


# --- Alertmanager webhook v4 ------------------------------------------------------------------


def _text_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k)[:MAX_FIELD]: _cut(v, 4000) for k, v in value.items()}


def from_alertmanager(body: object, root: Path | str | None = None) -> list[Signal]:
    """The alerts of one Alertmanager notification (firing and resolved ones)."""
    if not isinstance(body, Mapping):
        raise UsageError("expected the Alertmanager webhook JSON object")
    version = body.get("version")
    if version is not None and str(version) != "4":
        raise UsageError(f"unsupported Alertmanager webhook version {version!r} (expected 4)")
    alerts = body.get("alerts")
    if not isinstance(alerts, list):
        raise UsageError("alerts: expected a list")
    group_status = body.get("status", FIRING)
    out = []
    for i, alert in enumerate(alerts[:1000]):
        if not isinstance(alert, Mapping):
            raise UsageError(f"alerts[{i}]: expected an object")
        out.append(_am_signal(alert, body, group_status, root))
    return out


def _am_signal(alert: Mapping[str, Any], body: Mapping[str, Any], group_status: object,
               root: Path | str | None) -> Signal:
    labels = _text_map(alert.get("labels"))
    notes = _text_map(alert.get("annotations"))
    status = alert.get("status") or group_status
    status = status if status in (FIRING, RESOLVED) else FIRING
    fp = str(alert.get("fingerprint") or "")
    key = f"am-{fp}" if fp and re.fullmatch(r"[0-9a-fA-F]{1,64}", fp) else \
        digest_key("am", json.dumps(labels, sort_keys=True))
    generator = str(alert.get("generatorURL") or "")
    loki = labels.get("source") == "loki" or "logql" in notes or "/loki" in generator
    message = (notes.get("summary") or notes.get("message") or notes.get("description")
               or labels.get("alertname") or "alert")
    stack = notes.get("stack_trace") or notes.get("stackTrace") or notes.get("stacktrace") or ""
    file = paths.normalise(notes.get("file") or labels.get("file") or "", root)
    line = _line(notes.get("line") or labels.get("line"))
    func = notes.get("function", "")
    if not file:
        file, line, func = locate("\n".join((stack, notes.get("description", ""), message)), root)
    error = NormalizedError(
        message=_cut(message, MAX_MESSAGE), file=file, line=line,
        stack_trace=_tail(stack or (notes.get("description", "")
                                    if notes.get("description") != message else ""), MAX_STACK),
        severity=severity_of(labels.get("severity"), "medium"),
        source="loki" if loki else "alertmanager",
        environment=labels.get("environment") or labels.get("env") or labels.get("namespace", ""),
        error_type=error_type_of(message) or labels.get("alertname", ""), function=func)
    detail = {"alertname": labels.get("alertname", ""), "labels": labels, "annotations": notes,
              "startsAt": str(alert.get("startsAt", "")), "endsAt": str(alert.get("endsAt", "")),
              "generatorURL": _cut(generator, 2000), "groupKey": _cut(body.get("groupKey"), 2000),
              "receiver": _cut(body.get("receiver"), MAX_FIELD)}
    for newer in ("notification_reason", "routeLabels"):  # only in newer Alertmanagers
        if newer in body:
            detail[newer] = body[newer] if isinstance(body[newer], Mapping) else _cut(
                body[newer], MAX_FIELD)
    return Signal(key=key, status=status, source=error.source, error=error, detail=detail,
                  trust=TRUSTED)


# --- Slack: a person reports an error by hand --------------------------------------------------

SLACK_USAGE = ("usage: /heal [FILE:LINE] what went wrong (paste a traceback to point at the "
               "file)")


def _slack_text(text: str) -> str:
    text = html.unescape(text or "")
    return re.sub(r"```(?:[A-Za-z0-9_+-]*\n)?", "", text).strip()


def from_slack(form: Mapping[str, str], root: Path | str | None = None) -> Signal:
    """A slash command (``text``) or message action (``payload`` JSON) as a manual report."""
    who = form.get("user_name") or form.get("user_id") or ""
    channel = form.get("channel_name") or form.get("channel_id") or ""
    if "payload" in form:
        try:
            payload = json.loads(form["payload"])
        except ValueError as exc:
            raise UsageError("payload is not JSON") from exc
        if not isinstance(payload, Mapping):
            raise UsageError("payload is not a JSON object")
        message = payload.get("message") or {}
        text = str(message.get("text", "")) if isinstance(message, Mapping) else ""
        user = payload.get("user") or {}
        who = str(user.get("name") or user.get("id") or "") if isinstance(user, Mapping) else ""
        chan = payload.get("channel") or {}
        channel = str(chan.get("name") or chan.get("id") or "") if isinstance(chan, Mapping) \
            else ""
    else:
        text = form.get("text", "")
    text = _slack_text(text)
    if not text:
        raise UsageError(SLACK_USAGE)
    file, line, func = "", None, ""
    head, _, rest = text.partition(" ")
    m = re.fullmatch(r"(?P<file>[^\s:]+\.\w{1,6}):(?P<line>\d+)", head)
    if m:
        file, line, text = paths.normalise(m.group("file"), root), int(m.group("line")), rest
    if not file:
        file, line, func = locate(text, root)
    lines = [x for x in text.splitlines() if x.strip()]
    message = lines[-1].strip() if len(lines) > 1 and "Traceback" in text else (
        lines[0].strip() if lines else "reported from Slack")
    error = NormalizedError(
        message=_cut(message, MAX_MESSAGE), file=file, line=line,
        stack_trace=_tail(text if len(lines) > 1 else "", MAX_STACK), severity="high",
        source="slack", error_type=error_type_of(message), function=func)
    return Signal(key=digest_key("slack", error.message, error.file), status=FIRING,
                  source="slack", error=error, trust=TRUSTED,
                  detail={"reported_by": _cut(who, 100), "channel": _cut(channel, 100)})
