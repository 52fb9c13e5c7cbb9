"""The ``healer`` command.

Each subcommand lives in ``healer/commands/<name>.py`` with a one-line ``HELP`` and a
``main(argv) -> int``; this module only finds them and dispatches, so adding a command never
touches this file and ``healer --help`` stays fast (command modules import their heavy
dependencies inside ``main``).

Exit codes: 0 ok · 1 the command found problems (alerts, failures, unhealthy) · 2 usage or
input error, nothing changed · 3 something healer needs is missing or unreachable (a taken
port too) · 130 interrupted.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from types import ModuleType

from healer import __version__, commands
from healer.errors import EXIT_USAGE


def _command_modules() -> dict[str, str]:
    # os.scandir rather than pkgutil: pkgutil imports inspect and ast, ~15 ms on every command.
    found = {}
    for folder in commands.__path__:
        for entry in os.scandir(folder):
            name, ext = os.path.splitext(entry.name)
            if ext == ".py" and not name.startswith("_"):
                found[name.replace("_", "-")] = f"healer.commands.{name}"
    return dict(sorted(found.items()))


def _load(module: str) -> ModuleType:
    return importlib.import_module(module)


def _load_uncollected(module: str) -> ModuleType:
    """``_load``, for the process's own command: its imports make objects by the ten thousand
    and no garbage, which the cyclic collector would only walk again and again (~1 ms of a
    `healer scan` that takes ~60). They are then frozen: the collections of the command's
    own objects skip them. (Not for a caller's ``main(argv)``: freezing keeps whatever
    garbage the caller has not collected yet.)"""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _load(module)
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


def usage() -> str:
    lines = [
        "usage: healer [--version] [--help] COMMAND [ARGS...]",
        "",
        "healer keeps a fleet of AI coding agents healthy: it detects failures, dispatches",
        "healing agents, verifies the repair, and escalates to a human when it cannot heal.",
        "",
        "commands:",
    ]
    for name, module in _command_modules().items():
        lines.append(f"  {name:<9} {getattr(_load(module), 'HELP', '')}")
    lines += [
        "",
        "Run 'healer COMMAND --help' for a command's options.",
        "Exit codes: 0 ok, 1 problems found, 2 usage/input error, 3 something needed is",
        "missing or unreachable (e.g. the API port is in use), 130 interrupted.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else EXIT_USAGE
    if args[0] in ("-V", "--version"):
        print(f"healer {__version__}")
        return 0
    name, rest = args[0], args[1:]
    modules = _command_modules()
    if name not in modules:
        print(f"healer: unknown command {name!r}; run 'healer --help' for the list.",
              file=sys.stderr)
        return EXIT_USAGE
    module = _load(modules[name]) if argv is not None else _load_uncollected(modules[name])
    code: int = module.main(rest)
    if argv is None and getattr(module, "EXIT_AT_ONCE", False):
        _exit_at_once(code)
    return code


def _exit_at_once(code: int) -> None:
    """End the process now, without Python's teardown (clearing some 300 modules and what the
    command made: ~10 ms, as long as scanning 50 MB takes) — for a command that opts in
    (``EXIT_AT_ONCE``), run as the program itself, and only when nothing is left to finalize:
    no other thread, no profiler or tracer (cProfile, coverage write at exit) and no atexit
    callback. Otherwise it returns, and the process exits as usual."""
    import atexit
    import threading

    callbacks = getattr(atexit, "_ncallbacks", None)
    if (callbacks is None or callbacks() or threading.active_count() != 1
            or sys.gettrace() is not None or sys.getprofile() is not None):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # a broken or closed stream: Python's own exit deals with it
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
