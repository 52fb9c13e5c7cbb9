"""The engine's optional native fast paths (``_speedups.c``), or None for each.

Built by the package's build hook (``hatch_build.py``) when a C compiler and Python's headers
are there; without them, or with ``HEALER_DETECT_NATIVE=0``, or when the built module is older
than its source says (``VERSION``), every caller uses the pure-Python original it is tested
against (tests/detect/test_detect_native.py).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

VERSION = 9  # _speedups.c's NATIVE_VERSION this code expects
ENV = "HEALER_DETECT_NATIVE"
# Whether Hyperscan runs through the system's libhs (``libhs()``); "0" keeps the binding's.
LIBHS_ENV = "HEALER_DETECT_LIBHS"


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


def libhs() -> Any:
    """The native module when it can compile and scan with the system's libhs (``libhs.so.5``:
    Debian's ``libhyperscan5``), else None: Hyperscan then runs through the ``hyperscan``
    package's binding. Asked each time a matcher is built, so ``LIBHS_ENV`` can switch it."""
    if speedups is None:
        return None
    if os.environ.get(LIBHS_ENV, "").strip().lower() in ("0", "no", "off", "false"):
        return None
    return speedups if speedups.libhs_version() is not None else None
