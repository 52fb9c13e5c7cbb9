"""What an incident is about: a small block of short fields its capability sets at intake.

An operator reading one incident should see what it concerns without opening the record of
its kind. Each capability fills ``Signal.about`` when it files a signal; the ledger keeps it
as the incident's ``about`` and ``public_view`` shows it (list, detail, ``healer status``,
the dashboard). Core does not know the fields, only their shape and limits:

================  ==========================================================================
field name        lowercase ``[a-z][a-z0-9_]{0,31}``; at most ``MAX_FIELDS`` fields
scalar value      text (control characters removed, cut to ``MAX_TEXT``), integer, finite
                  number, true/false; empty text and null are left out
map value         at most ``MAX_ENTRIES`` labels (text, cut to ``MAX_LABEL``; the most
                  recently seen kept, by a record's ``last``: stores sort keys), each a
                  scalar or a record of at most ``MAX_INNER`` named scalars
whole block       at most ``MAX_BYTES`` of JSON: the largest map loses its oldest labels
================  ==========================================================================

A wrong name or type is the capability's bug (``UsageError``); text is never refused, only
cut. Text that came from outside (a Sentry event, a cluster object) is scrubbed by the
capability's sanitizer before it is put here.

What the kinds put here (``docs/self-healing.md``, "What an incident is about"):

- ``code``: ``culprit`` (``file:function``), ``line``, ``error_type``, ``release``,
  ``environment``, and ``releases``: release → ``{first, last, count}`` (``tally``);
- ``play``: ``code`` (A1–A12, T/X/C/S/K), ``play_id``, ``agent``, and the object
  (``object_kind``: pod, coderun, workflow, pr, agent, account; ``object``; ``namespace``);
- ``fleet``: ``peer`` and ``channel``.

A repeat of the signal updates the scalar fields (the latest release, environment) and
leaves the maps to the capability's ``merge`` (``tally`` folds one more occurrence in).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from healer.errors import UsageError

MAX_FIELDS = 16
MAX_TEXT = 200
MAX_LABEL = 100
MAX_ENTRIES = 10
MAX_INNER = 6
MAX_BYTES = 4096

# Read first in text views (whatever the kind): what and where, then the rest by name.
SHOWN_FIRST = ("code", "culprit", "line", "error_type", "release", "environment", "peer",
               "channel", "object_kind", "object", "namespace", "play_id", "agent")

_TALLY = ("first", "last", "count")
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

Scalar = str | int | float | bool


def _scalar(value: Any, where: str, *, limit: int = MAX_TEXT) -> Scalar | None:
    if value is None:
        return None
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UsageError(f"about.{where}: not a finite number")
        return value
    if isinstance(value, str):
        text = " ".join(_CONTROL.sub(" ", value).split())[:limit]
        return text or None
    raise UsageError(f"about.{where}: expected text, a number or true/false, got "
                     f"{type(value).__name__}")


def _name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UsageError(f"about{where}: field names are lowercase words "
                         f"([a-z][a-z0-9_]{{0,31}}), got {name!r}")
    return name


def _record(value: Mapping[str, Any], where: str) -> dict[str, Scalar]:
    if len(value) > MAX_INNER:
        raise UsageError(f"about.{where}: at most {MAX_INNER} fields")
    out = {}
    for k, v in value.items():
        got = _scalar(v, f"{where}.{k}")
        if got is not None:
            out[_name(k, f".{where}")] = got
    return out


def _age(entry: tuple[str, Any]) -> float:
    """How recent a map entry is: its record's ``last`` (stores keep keys sorted, so the
    order of a map says nothing); an entry without one counts as oldest."""
    last = entry[1].get("last") if isinstance(entry[1], Mapping) else None
    return float(last) if isinstance(last, int | float) and not isinstance(last, bool) else 0.0


def _recent(value: Mapping[Any, Any], keep: int) -> list[tuple[Any, Any]]:
    """The ``keep`` most recently seen entries of a map, oldest first."""
    return sorted(value.items(), key=_age)[-keep:] if keep > 0 else []


def _map(value: Mapping[Any, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, v in _recent(value, MAX_ENTRIES):
        text = _scalar(str(label), where, limit=MAX_LABEL)
        if text is None:
            continue
        got = _record(v, f"{where}[{text}]") if isinstance(v, Mapping) else \
            _scalar(v, f"{where}[{text}]")
        if got not in (None, {}):
            out[str(text)] = got
    return out


def clean(about: Mapping[str, Any] | None) -> dict[str, Any]:
    """``about`` within the limits above (a new dict); ``UsageError`` for a bad name or type."""
    if not about:
        return {}
    if not isinstance(about, Mapping):
        raise UsageError("about: expected an object")
    if len(about) > MAX_FIELDS:
        raise UsageError(f"about: at most {MAX_FIELDS} fields")
    # Every report of a bug brings the same few strings: clean them once (a new dict each
    # time, as callers change what they get).
    key = tuple(about.items()) if all(type(v) is str for v in about.values()) else None
    if key is not None:
        hit = _CLEANED.get(key)
        if hit is not None:
            return dict(hit)
    out: dict[str, Any] = {}
    for name, value in about.items():
        _name(name, "")
        got = _map(value, name) if isinstance(value, Mapping) else _scalar(value, name)
        if got not in (None, {}):
            out[name] = got
    while len(json.dumps(out)) > MAX_BYTES:
        maps = [k for k, v in out.items() if isinstance(v, dict)]
        if not maps:
            break  # MAX_FIELDS short scalars cannot get here
        biggest = max(maps, key=lambda k: len(json.dumps(out[k])))
        out[biggest] = dict(_recent(out[biggest], len(out[biggest]) - 1))
        if not out[biggest]:
            del out[biggest]
    if key is not None:
        if len(_CLEANED) >= _CLEANED_MAX:
            _CLEANED.clear()
        _CLEANED[key] = dict(out)
    return out


_CLEANED: dict[tuple[tuple[Any, str], ...], dict[str, Any]] = {}
_CLEANED_MAX = 1024


def update(current: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, Any]:
    """A repeat's ``about`` over the incident's: its scalar fields win; the maps stay (they
    are the capability's to fold, ``tally``)."""
    base = dict(current or {})
    for name, value in (new or {}).items():
        if not isinstance(value, Mapping):
            base[name] = value
    return clean(base)


def tally(about: dict[str, Any], field: str, label: str, at: float, count: int = 1) -> None:
    """Count ``count`` occurrences under ``label`` in the map ``about[field]``:
    ``{label: {first, last, count}}``. The most recently seen ``MAX_ENTRIES`` labels are
    kept."""
    label = " ".join(_CONTROL.sub(" ", label).split())[:MAX_LABEL]
    if not label:
        return
    seen = dict(about.get(field) or {})
    entry = dict(seen.pop(label, None) or {})
    seen[label] = {"first": round(float(entry.get("first", at)), 3), "last": round(at, 3),
                   "count": int(entry.get("count", 0)) + max(1, int(count))}
    about[field] = dict(_recent(seen, MAX_ENTRIES))


def describe(about: Mapping[str, Any] | None) -> list[str]:
    """``about`` as short lines for a terminal: the scalars on one line (in the order of
    ``SHOWN_FIRST``, then by name), then a line per map (its most recent entries last)."""
    if not about:
        return []
    names = sorted(about, key=lambda k: (SHOWN_FIRST.index(k) if k in SHOWN_FIRST
                                         else len(SHOWN_FIRST), k))
    scalars = [f"{k.replace('_', ' ')} {about[k]}" for k in names
               if not isinstance(about[k], Mapping)]
    lines = [", ".join(scalars)] if scalars else []
    for name in names:
        value = about[name]
        if isinstance(value, Mapping):
            parts = []
            for label, v in _recent(value, len(value)):
                if isinstance(v, Mapping):
                    order = sorted(v, key=lambda k: (_TALLY.index(k) if k in _TALLY
                                                     else len(_TALLY), k))
                    inner = ", ".join(f"{k} {_when(k, v[k])}" for k in order)
                    parts.append(f"{label} ({inner})")
                else:
                    parts.append(f"{label} {v}")
            lines.append(f"{name.replace('_', ' ')}: " + "; ".join(parts))
    return lines


def _when(key: str, value: Any) -> str:
    """Times (``first``, ``last``) as UTC ISO 8601; everything else as it is."""
    if key in ("first", "last") and isinstance(value, int | float) and not isinstance(
            value, bool):
        import datetime as dt

        return dt.datetime.fromtimestamp(float(value), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value)
