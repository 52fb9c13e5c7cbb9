"""The engine's optional native fast paths (``_speedups.c``), or None for each.

Built by the package's build hook (``hatch_build.py``) when a C compiler and Python's headers
are there; without them, or with ``HEALER_DETECT_NATIVE=0``, or when the built module is older
than its source says (``VERSION``), every caller uses the pure-Python original it is tested
against (tests/detect/test_detect_native.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

VERSION = 1  # _speedups.c's NATIVE_VERSION this code expects
ENV = "HEALER_DETECT_NATIVE"


def _load() -> Any:
    if os.environ.get(ENV, "").strip().lower() in ("0", "no", "off", "false"):
        return None
    try:
        from healer.detect import _speedups  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _speedups if getattr(_speedups, "VERSION", None) == VERSION else None


speedups = _load()

# line → its ISO time, None (a stamp naming no real time) or False (no stamp in its head)
parse_iso: Callable[[Any], float | bool | None] | None = getattr(speedups, "parse_iso", None)
# (alerts, fragments(alert) → (prefix, suffix), fallback(alert) → JSON) → JSON Lines
json_lines: Callable[[Sequence[Any], Callable[[Any], tuple[str, str]],
                      Callable[[Any], str]], str] | None = getattr(speedups, "json_lines", None)
# Engine.scan_block's pass 1: (buf, lo, hi, candidates, first line, cleaned ANSI lines,
# confirm callables, trusted flags) → (newlines, confirmed lines) or NotImplemented
confirm_lines: Callable[..., Any] | None = getattr(speedups, "confirm_lines", None)
# Engine._hits's two loops: (found, view_fields, SPEECH, RANK, min_rank) → (judged, bodies),
# then (judged, suppression candidates, generic, single, window, windowed, keep, resolve,
# parse_ts, lookback) → hits
judge_lines: Callable[..., Any] | None = getattr(speedups, "judge_lines", None)
build_hits: Callable[..., Any] | None = getattr(speedups, "build_hits", None)
# Engine._alerts's two loops: (hits, window, ts_override, not_before, seen_at, lo_t, skew,
# start_of, SKEW_S) → (rows, raws), then (rows, texts, Alert, fields per pattern, source,
# first line number, labels) → alerts
filter_hits: Callable[..., Any] | None = getattr(speedups, "filter_hits", None)
make_alerts: Callable[..., Any] | None = getattr(speedups, "make_alerts", None)
