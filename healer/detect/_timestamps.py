"""Finding a log line's own timestamp, cheaply (only matched lines are ever parsed).

Understood: ISO 8601 / RFC 3339 anywhere in the line's head (``2024-05-01T10:00:00.123Z``,
``2024-05-01 10:00:00,123+02:00``), klog (``E0501 10:00:00.123456``, year taken from the
reference time) and JSON epoch fields (``"ts": 1714557600.5``). A time without a zone is UTC.
"""

from __future__ import annotations

import re
import time

HEAD_BYTES = 160  # a timestamp further into the line than this is not the line's own

_ISO = re.compile(
    rb"(\d{4}-\d{2}-\d{2})[T ](\d{2}):(\d{2}):(\d{2}(?:[.,]\d{1,9})?)"
    rb"\s?(Z|z|UTC|[+-]\d{2}:?\d{2})?"
)
_KLOG = re.compile(rb"^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")
_EPOCH = re.compile(rb'"(?:ts|time|timestamp|@timestamp)"\s*:\s*(\d{10}(?:\.\d+)?)(?![\d.])')

_DAYS: dict[bytes, float | None] = {}  # "2024-05-01" → its midnight; logs repeat few dates


_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def epoch_day(y: int, mo: int, d: int) -> int | None:
    """Days since 1970-01-01 of a proleptic Gregorian date, or None if there is no such day.

    (H. Hinnant's days_from_civil; the calendar module would cost its import on every scan.)
    """
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    if not (1 <= mo <= 12 and 1 <= d <= _MONTH_DAYS[mo - 1] + (mo == 2 and leap)):
        return None
    y -= mo <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (mo + (-3 if mo > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _day(date: bytes) -> float | None:
    day = _DAYS.get(date)
    if day is None and date not in _DAYS:
        n = epoch_day(int(date[:4]), int(date[5:7]), int(date[8:10]))
        day = None if n is None else n * 86400.0
        if len(_DAYS) > 4096:
            _DAYS.clear()
        _DAYS[date] = day
    return day


def _frac(digits: bytes | None) -> float:
    return int(digits) / 10 ** len(digits) if digits else 0.0


def parse_ts(line: bytes | bytearray, reference: float | None = None) -> float | None:
    """The line's own timestamp as Unix seconds (UTC), or None."""
    m = _ISO.search(line, 0, HEAD_BYTES)
    if m:
        date, h, mi, sec, zone = m.groups()
        day = _day(date)
        hh, mm = int(h), int(mi)
        ss = float(sec if b"," not in sec else sec.replace(b",", b"."))
        if day is None or hh > 23 or mm > 59 or ss >= 61:
            return None
        ts = day + hh * 3600 + mm * 60 + ss
        if zone and zone[:1] in b"+-":
            digits = zone[1:].replace(b":", b"")
            offset = int(digits[:2]) * 3600 + int(digits[2:4]) * 60
            ts -= offset if zone[:1] == b"+" else -offset
        return ts
    m = _KLOG.match(line, 0, HEAD_BYTES)
    if m:
        year = time.gmtime(reference if reference is not None else time.time()).tm_year
        mo, d, h, mi, s, frac = m.groups()
        day = _day(b"%04d-%s-%s" % (year, mo, d))
        hh, mm, ss = int(h), int(mi), int(s)
        if day is None or hh > 23 or mm > 59 or ss > 60:
            return None
        return day + hh * 3600 + mm * 60 + ss + _frac(frac)
    m = _EPOCH.search(line, 0, HEAD_BYTES)
    if m:
        return float(m.group(1))
    return None


_MINUTES: dict[int, str] = {}  # minute number → "2024-05-01T10:00:"


def iso(ts: float) -> str:
    """Unix seconds → ``2024-05-01T10:00:00.123Z`` (milliseconds, UTC)."""
    ms_total = round(ts * 1000)
    minute, ms_of_minute = divmod(ms_total, 60_000)
    prefix = _MINUTES.get(minute)
    if prefix is None:
        if len(_MINUTES) > 65536:
            _MINUTES.clear()
        prefix = _MINUTES[minute] = time.strftime("%Y-%m-%dT%H:%M:", time.gmtime(minute * 60))
    s, ms = divmod(ms_of_minute, 1000)
    return f"{prefix}{s:02d}.{ms:03d}Z"
