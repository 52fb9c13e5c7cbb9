"""Sentry integration webhooks as signals (``Sentry-Hook-Resource`` says which shape).

* ``event_alert`` (action ``triggered``): an alert rule fired; ``data.event`` is the event,
  with ``exception.values[]{type, value, stacktrace.frames[]{filename, abs_path, function,
  lineno, in_app}}`` (frames oldest first, so the innermost in-app frame is the last one),
  ``breadcrumbs``, ``release``, ``environment``, ``web_url``, ``issue_url``, ``issue_id``;
* ``error`` (action ``created``): ``data.error``, an event of the same shape;
* ``issue``: ``data.issue`` (``id``, ``title``, ``culprit``, ``level``, ``count``,
  ``userCount``, ``permalink``, ``metadata{type, value, filename, function}``); ``created`` and
  ``unresolved`` fire, ``resolved`` resolves, other actions are ignored;
* ``metric_alert``: ``critical``/``warning`` fire, ``resolved`` resolves (no file: recorded).

The dedup key is the Sentry issue (``sentry-<issue id>``), so an event alert and the issue's
later ``resolved`` meet on one incident. Other resources (installation, comment, …) are
ignored.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from healer.context import paths
from healer.context.ingest import (
    FIRING,
    MAX_MESSAGE,
    MAX_STACK,
    RESOLVED,
    NormalizedError,
    Signal,
    _cut,
    _line,
    _tail,
    digest_key,
    error_type_of,
    severity_of,
)
from healer.core.trust import TRUSTED
from healer.errors import UsageError

RESOURCES = ("event_alert", "error", "issue", "metric_alert")
MAX_BREADCRUMBS = 10
MAX_FRAMES_SHOWN = 50
MAX_TAGS = 50
MAX_TAG = 200


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> Sequence[Any]:
    return value if isinstance(value, list) else []


def from_sentry(resource: str, body: object, root: Path | str | None = None) -> list[Signal]:
    """The signals of one delivery; ``[]`` for resources and actions healer does not act on."""
    if not isinstance(body, Mapping):
        raise UsageError("expected the Sentry webhook JSON object")
    data = body.get("data")
    if not isinstance(data, Mapping):
        raise UsageError("data: expected an object")
    action = str(body.get("action", ""))
    if resource == "event_alert":
        event = data.get("event")
        if not isinstance(event, Mapping):
            raise UsageError("data.event: expected an object")
        return [event_signal(event, root, rule=str(_map(data).get("triggered_rule", "")))]
    if resource == "error":
        event = data.get("error")
        if not isinstance(event, Mapping):
            raise UsageError("data.error: expected an object")
        return [event_signal(event, root)] if action in ("created", "") else []
    if resource == "issue":
        issue = data.get("issue")
        if not isinstance(issue, Mapping):
            raise UsageError("data.issue: expected an object")
        return _issue_signals(issue, action, root)
    if resource == "metric_alert":
        return _metric_signals(data, action)
    return []


def _issue_key(issue_id: object, fallback: str) -> str:
    text = str(issue_id or "").strip()
    return f"sentry-{text}" if text.isdigit() and len(text) <= 30 else digest_key("sentry",
                                                                                fallback)


def _frames(event: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[Mapping[str, Any]]]:
    values = _list(_map(event.get("exception")).get("values"))
    if not values and isinstance(event.get("exception"), list):
        values = event["exception"]
    exc = _map(values[-1]) if values else {}  # the last value is the one that was raised
    frames = [_map(f) for f in _list(_map(exc.get("stacktrace")).get("frames"))]
    if not frames:
        frames = [_map(f) for f in _list(_map(event.get("stacktrace")).get("frames"))]
    return exc, frames


_EXISTS: dict[tuple[str, str], tuple[float, bool]] = {}
EXISTS_TTL_S = 30.0
EXISTS_MAX = 4096


def _in_repo(root: Path | str, rel: str) -> bool:
    """Whether ``root/rel`` is a file, remembered for a while: the same frames arrive with
    every event of an incident, and a stat per frame per event was a tenth of the ingest's
    time."""
    now = time.monotonic()
    key = (str(root), rel)
    hit = _EXISTS.get(key)
    if hit is not None and now - hit[0] < EXISTS_TTL_S:
        return hit[1]
    found = (Path(root) / rel).is_file()
    if len(_EXISTS) >= EXISTS_MAX:
        _EXISTS.clear()
    _EXISTS[key] = (now, found)
    return found


def _frame_file(frame: Mapping[str, Any], root: Path | str | None) -> str:
    for key in ("filename", "abs_path"):
        rel = paths.normalise(frame.get(key), root)
        if rel and (root is None or _in_repo(root, rel)):
            return rel
    return paths.normalise(frame.get("filename") or frame.get("abs_path"), root)


def render_frames(frames: Sequence[Mapping[str, Any]], platform: str, headline: str) -> str:
    """A Sentry stack as the platform would print it (Python: a traceback)."""
    shown = frames[-MAX_FRAMES_SHOWN:]
    if platform == "python":
        lines = ["Traceback (most recent call last):"]
        for f in shown:
            lines.append(f'  File "{f.get("filename") or f.get("abs_path") or "?"}", line '
                         f'{f.get("lineno") or 0}, in {f.get("function") or "<module>"}')
            if f.get("context_line"):
                lines.append(f"    {str(f['context_line']).strip()}")
        lines.append(headline)
        return "\n".join(lines)
    lines = [headline]
    for f in reversed(shown):
        where = f"{f.get('filename') or f.get('abs_path') or '?'}:{f.get('lineno') or 0}:" \
                f"{f.get('colno') or 0}"
        lines.append(f"    at {f.get('function') or '<anonymous>'} ({where})")
    return "\n".join(lines)


def _breadcrumbs(event: Mapping[str, Any]) -> list[str]:
    raw = event.get("breadcrumbs")
    items = _list(_map(raw).get("values")) if isinstance(raw, Mapping) else _list(raw)
    out = []
    for b in items[-MAX_BREADCRUMBS:]:
        b = _map(b)
        text = b.get("message") or (str(b.get("data")) if b.get("data") else "")
        cat = b.get("category") or b.get("type") or ""
        out.append(_cut(" ".join(str(x) for x in (b.get("timestamp", ""), f"[{cat}]" if cat
                                                   else "", text) if x), 200))
    return out


def tags_of(event: Mapping[str, Any]) -> dict[str, str]:
    """The event's tags as a flat map: SDKs send an object, Sentry's webhooks a list of
    ``[name, value]`` pairs. At most ``MAX_TAGS``, names and values cut."""
    raw = event.get("tags")
    pairs = raw.items() if isinstance(raw, Mapping) else (
        (p[0], p[1]) for p in _list(raw) if isinstance(p, list) and len(p) == 2)
    out: dict[str, str] = {}
    for name, value in pairs:
        if len(out) >= MAX_TAGS:
            break
        if isinstance(name, str) and name and isinstance(value, str | int | float | bool):
            out[name[:MAX_TAG]] = str(value)[:MAX_TAG]
    return out


def _tag(event: Mapping[str, Any], name: str) -> str:
    return tags_of(event).get(name, "")


def event_signal(event: Mapping[str, Any], root: Path | str | None, rule: str = "") -> Signal:
    """One Sentry event (a webhook's ``data.event``, an SDK's envelope item) as a signal:
    the raised exception, its innermost in-app frame as the culprit, breadcrumbs, release,
    environment and tags. The key is the Sentry issue when the event names one."""
    exc, frames = _frames(event)
    etype = str(exc.get("type") or "")
    value = str(exc.get("value") or "")
    headline = f"{etype}: {value}" if etype and value else (etype or value)
    message = headline or str(event.get("title") or _map(event.get("logentry")).get(
        "formatted") or event.get("message") or "Sentry event")
    in_app = [f for f in frames if f.get("in_app")]
    frame = (in_app or frames)[-1] if frames else {}
    platform = str(event.get("platform") or "")
    environment = str(event.get("environment") or _tag(event, "environment"))
    issue_id = event.get("issue_id") or event.get("groupID")
    sentry = {
        "issue_url": _cut(event.get("web_url") or event.get("issue_url") or event.get("url")
                          or "", 2000),
        "issue_id": str(issue_id or "")[:64],
        "breadcrumbs": _breadcrumbs(event),
        "release": _cut(event.get("release") or _tag(event, "release"), 200),
        "environment": _cut(environment, 200),
        "tags": tags_of(event),
    }
    error = NormalizedError(
        message=_cut(message, MAX_MESSAGE), file=_frame_file(frame, root) if frame else "",
        line=_line(frame.get("lineno")) if frame else None,
        stack_trace=_tail(render_frames(frames, platform, message) if frames else "", MAX_STACK),
        severity=severity_of(event.get("level"), "high"), source="sentry",
        environment=_cut(environment, 200), error_type=etype[:300] or error_type_of(message),
        function=str(frame.get("function") or "")[:300] if frame else "",
        sentry={k: v for k, v in sentry.items() if v not in ("", [], {}, None)})
    return Signal(key=_issue_key(issue_id, f"{etype}|{message}|{error.file}"), status=FIRING,
                  source="sentry", error=error, trust=TRUSTED,
                  detail={"event_id": str(event.get("event_id", ""))[:64],
                          "culprit": _cut(event.get("culprit"), 300), "rule": _cut(rule, 300)})


def _issue_signals(issue: Mapping[str, Any], action: str,
                   root: Path | str | None) -> list[Signal]:
    meta = _map(issue.get("metadata"))
    key = _issue_key(issue.get("id"), str(issue.get("title", "")))
    if action == "resolved":
        return [Signal(key=key, status=RESOLVED, source="sentry", trust=TRUSTED,
                       detail={"action": action})]
    if action not in ("created", "unresolved"):
        return []
    etype, value = str(meta.get("type") or ""), str(meta.get("value") or "")
    message = f"{etype}: {value}" if etype and value else str(issue.get("title") or "issue")
    users, count = issue.get("userCount"), issue.get("count")
    sentry = {
        "issue_url": _cut(issue.get("permalink") or issue.get("web_url") or "", 2000),
        "issue_id": str(issue.get("id") or "")[:64],
        "users": users if isinstance(users, int) and users >= 0 else None,
        "events": int(count) if str(count or "").isdigit() else None,
        "first_seen": _cut(issue.get("firstSeen"), 40),
        "last_seen": _cut(issue.get("lastSeen"), 40),
    }
    error = NormalizedError(
        message=_cut(message, MAX_MESSAGE),
        file=paths.normalise(meta.get("filename") or "", root), line=None,
        severity=severity_of(issue.get("level"), "high"), source="sentry",
        error_type=etype[:300] or error_type_of(message),
        function=str(meta.get("function") or "")[:300],
        sentry={k: v for k, v in sentry.items() if v not in ("", [], None)})
    return [Signal(key=key, status=FIRING, source="sentry", error=error, trust=TRUSTED,
                   detail={"action": action, "culprit": _cut(issue.get("culprit"), 300),
                           "short_id": _cut(issue.get("shortId"), 64)})]


def _metric_signals(data: Mapping[str, Any], action: str) -> list[Signal]:
    alert = _map(data.get("metric_alert"))
    key = _issue_key(None, f"metric|{alert.get('id') or data.get('description_title')}")
    if action == "resolved":
        return [Signal(key=key, status=RESOLVED, source="sentry", trust=TRUSTED,
                       detail={"action": action})]
    if action not in ("critical", "warning"):
        return []
    title = str(data.get("description_title") or _map(alert.get("alert_rule")).get("name")
                or "Sentry metric alert")
    error = NormalizedError(
        message=_cut(title, MAX_MESSAGE), stack_trace=_cut(data.get("description_text"), 4000),
        severity="critical" if action == "critical" else "medium", source="sentry",
        sentry={"issue_url": _cut(data.get("web_url") or "", 2000)} if data.get("web_url")
        else {})
    return [Signal(key=key, status=FIRING, source="sentry", error=error, trust=TRUSTED,
                   detail={"action": action})]
