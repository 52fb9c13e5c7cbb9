"""The engine's optional native fast paths (``_speedups.c``), or None for each.

Built by the package's build hook (``hatch_build.py``) when a C compiler and Python's headers
are there; without them, or with ``HEALER_DETECT_NATIVE=0``, or when the built module is older
than its source says (``VERSION``), every caller uses the pure-Python original it is tested
against (tests/detect/test_detect_native.py).
"""

from __future__ import annotations

import os
from typing import Any

VERSION = 5  # _speedups.c's NATIVE_VERSION this code expects
ENV = "HEALER_DETECT_NATIVE"


def _load() -> Any:
    if os.environ.get(ENV, "").strip().lower() in ("0", "no", "off", "false"):
        return None
    try:
        from healer.detect import _speedups  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _speedups if getattr(_speedups, "VERSION", None) == VERSION else None


# The module (parse_iso, Collector, confirm_lines, view_line, judge_lines, build_hits,
# filter_hits, make_alerts, line_texts, json_lines, alert_counts: see _speedups.c) or None. An
# Engine takes it when it is made; json_lines and the scan's tally look each time.
speedups = _load()
