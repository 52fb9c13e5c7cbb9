"""Shared by this skill's scripts: find healer, print JSON, exit with healer's codes.

Not a command. Scripts run with any ``python3``; the ones that need healer's modules call
``need_healer()``, which re-runs the script under the interpreter healer is installed in
(``$HEALER_PYTHON``, the checkout's ``.venv``, or the ``healer`` on ``PATH``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, NoReturn

EXIT_OK, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 2, 3
_GUARD = "HEALER_SKILL_REEXEC"
# skills/<skill>/scripts/_healer.py → the checkout (or plugin) root
_ROOT = Path(__file__).resolve().parents[3]


def emit(data: Any) -> None:
    """The result, as JSON on stdout."""
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def fail(message: str, code: int = EXIT_USAGE, **extra: Any) -> NoReturn:
    """One line on stderr, a JSON error on stdout, and the exit code."""
    print(f"{Path(sys.argv[0]).name}: {message}", file=sys.stderr)
    emit({"ok": False, "error": message, **extra})
    raise SystemExit(code)


def _python_of(exe: str) -> str | None:
    """The interpreter a console script (``#!/path/python``) runs with."""
    try:
        with open(exe, "rb") as fh:
            first = fh.readline(512).decode(errors="replace").strip()
    except OSError:
        return None
    if first.startswith("#!"):
        cand = first[2:].strip().split()[0] if first[2:].strip() else ""
        if "python" in Path(cand).name and os.access(cand, os.X_OK):
            return cand
    return None


def healer_python() -> str | None:
    """An interpreter that can ``import healer``, or None."""
    if importlib.util.find_spec("healer") is not None:
        return sys.executable
    candidates = [os.environ.get("HEALER_PYTHON", ""), str(_ROOT / ".venv" / "bin" / "python")]
    exe = shutil.which("healer")
    if exe:
        candidates.append(_python_of(exe) or "")
    for cand in candidates:
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def need_healer() -> None:
    """Make ``import healer`` work: re-run this script under healer's interpreter if needed."""
    if importlib.util.find_spec("healer") is not None:
        return
    py = healer_python()
    if py is None or os.environ.get(_GUARD):
        fail("healer is not installed for any Python found (install it: pip install healer, "
             "or set HEALER_PYTHON)", EXIT_UNAVAILABLE)
    # The same script and arguments under another interpreter: an argv list, no shell.
    os.execve(py, [py, sys.argv[0], *sys.argv[1:]], {**os.environ, _GUARD: "1"})  # noqa: S606


def healer_argv() -> list[str]:
    """How to run the ``healer`` command: ``$HEALER_BIN``, ``healer`` on PATH, or python -m."""
    if os.environ.get("HEALER_BIN"):
        return [os.environ["HEALER_BIN"]]
    exe = shutil.which("healer")
    if exe:
        return [exe]
    py = healer_python()
    if py is None:
        fail("the healer command is not installed (pip install healer)", EXIT_UNAVAILABLE)
    return [py, "-m", "healer"]
