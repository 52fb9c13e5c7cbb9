"""``Alert``: one pattern that matched one line, and its JSON and text forms."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from healer.detect import _native
from healer.detect._timestamps import iso
from healer.detect.catalog import Pattern

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NamedTuple
else:
    from healer._runtime_typing import NamedTuple

NO_LABELS: Mapping[str, str] = MappingProxyType({})

_q = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
_FRAGMENTS: dict[tuple[int, str], tuple[Pattern, str, str]] = {}


class Alert(NamedTuple):
    """One pattern that matched one line.

    ``line_no`` counts from 1 in its stream (a rotated or truncated file starts again at 1);
    ``ts`` is the line's own timestamp (Unix seconds) or None; ``line`` is cut to
    detect.max_line_chars; ``labels`` are the stream's (e.g. Loki's); ``pattern`` is the
    catalog entry (``meaning``, ``action``, ``window_s`` …).
    """

    code: str
    id: str
    priority: int
    severity: str
    source: str
    line_no: int
    line: str
    ts: float | None = None
    labels: Mapping[str, str] = NO_LABELS
    pattern: Pattern | None = None
    level: str = ""  # the level the line states ("" for none; healer.detect.lines)
    origin: str = ""  # the source its prefix names (a pod, a compose service), or ""

    @property
    def meaning(self) -> str:
        return self.pattern.meaning if self.pattern else ""

    @property
    def action(self) -> str:
        return self.pattern.action if self.pattern else ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code, "id": self.id, "priority": self.priority,
            "severity": self.severity, "source": self.source, "line_no": self.line_no,
            "ts": iso(self.ts) if self.ts is not None else None, "line": self.line,
            "meaning": self.meaning, "action": self.action,
        }
        if self.labels:
            out["labels"] = dict(self.labels)
        return out

    def to_json(self) -> str:
        """``to_dict()`` as one line of JSON (same keys and order), built from cached parts:
        per pattern and source, everything before the line number and after the line."""
        if self.pattern is None:
            return json.dumps(self.to_dict(), ensure_ascii=True, separators=(",", ":"))
        prefix, suffix = _fragments(self)
        stamp = "null" if self.ts is None else '"' + iso(self.ts) + '"'
        if self.labels:
            labels = json.dumps(dict(self.labels), ensure_ascii=True, separators=(",", ":"))
            return (f'{prefix}{self.line_no},"ts":{stamp},"line":{_q(self.line)}{suffix}'
                    f',"labels":{labels}}}')
        return f'{prefix}{self.line_no},"ts":{stamp},"line":{_q(self.line)}{suffix}}}'

    def to_text(self) -> str:
        """``source:line: CODE severity [id] line`` for people."""
        return f"{self.source}:{self.line_no}: {self.code} {self.severity} [{self.id}] {self.line}"


def _fragments(a: Alert) -> tuple[str, str]:
    """The JSON of an alert before its line number and after its line (cached per pattern
    and source)."""
    p = a.pattern
    key = (id(p), a.source)
    parts = _FRAGMENTS.get(key)
    if parts is None or parts[0] is not p:
        if len(_FRAGMENTS) > 10_000:
            _FRAGMENTS.clear()
        parts = _FRAGMENTS[key] = (
            p,  # type: ignore[assignment]
            f'{{"code":{_q(a.code)},"id":{_q(a.id)},"priority":{a.priority},'
            f'"severity":{_q(a.severity)},"source":{_q(a.source)},"line_no":',
            f',"meaning":{_q(a.meaning)},"action":{_q(a.action)}',
        )
    return parts[1], parts[2]


def json_lines(alerts: Sequence[Alert]) -> str:
    """``"".join(a.to_json() + "\n" for a in alerts)``, natively when it is built."""
    if _native.speedups is not None:
        return _native.speedups.json_lines(alerts, _fragments, Alert.to_json)
    return "".join([a.to_json() + "\n" for a in alerts])


def json_bytes(alerts: Sequence[Alert]) -> bytes:
    """``json_lines(alerts)`` as the ASCII bytes it is, to be written: natively, made as bytes
    (a scan's megabytes of JSON are not copied into a str and then encoded)."""
    if _native.speedups is not None:
        return _native.speedups.json_lines(alerts, _fragments, Alert.to_json, True)
    return json_lines(alerts).encode("ascii")
