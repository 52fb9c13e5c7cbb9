"""What every command shares: settings flags, JSON output, errors → exit codes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from healer.errors import EXIT_INTERRUPTED, EXIT_USAGE, HealerError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one clear line on a usage mistake — the first mistake:
    an unknown option is named before the required ones it may have left out
    (``--bogus x`` is a typo of ``--type x``, not a missing ``--type``)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self._refuse_unknown(args)
        return super().parse_args(args, namespace)

    def _refuse_unknown(self, args: Any) -> None:
        """Parse once with nothing required; arguments left over are the error to name."""
        required = [a for a in self._actions if a.required]
        groups = [g for g in self._mutually_exclusive_groups if g.required]
        for item in (*required, *groups):
            item.required = False
        try:
            _, extras = self.parse_known_args(args, argparse.Namespace())
        finally:
            for item in (*required, *groups):
                item.required = True
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")


class Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter, sized without importing shutil: argparse makes one for every
    option it adds, and shutil (with bz2 and lzma) costs each command ~4 ms to import."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position,
                         _columns() - 2 if width is None else width)


def _columns() -> int:
    """``shutil.get_terminal_size().columns``: $COLUMNS, else the terminal's, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


def parser(name: str, description: str, epilog: str = "") -> Parser:
    return Parser(
        prog=f"healer {name}", description=description, epilog=epilog,
        formatter_class=Formatter,
    )


def add_settings_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("settings")
    g.add_argument("--config", metavar="FILE", help="settings file (default: ./healer.yaml)")
    g.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="override one setting, e.g. --set api.port=9000 (repeatable)")
    g.add_argument("--state-dir", help="state dir (default .healer, env HEALER_STATE_DIR)")
    g.add_argument("--results-dir",
                   help="agent results dir (default /tmp/atlas-agent-results)")
    g.add_argument("--fleet-dir", help="seed-file dir (default .fleet-messages)")
    g.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    g.add_argument("--log-format", choices=["text", "json"])


def settings_from(args: argparse.Namespace) -> Any:
    """Load the settings tree honouring the common flags, and set up logging."""
    from healer import log  # here, not at the top: importing logging costs `healer scan` ~15 ms
    from healer.config import load_settings

    overrides = list(args.set)
    for flag, key in (("state_dir", "state_dir"), ("results_dir", "results_dir"),
                      ("fleet_dir", "fleet_dir"), ("log_level", "log.level"),
                      ("log_format", "log.format")):
        value = getattr(args, flag, None)
        if value:
            overrides.append(f"{key}={value}")
    settings = load_settings(args.config, overrides=overrides)
    log.setup(settings.log.level, settings.log.format)
    return settings


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def run(fn: Callable[[], int]) -> int:
    """Run a command body: a HealerError is one line on stderr and its exit code."""
    try:
        return fn()
    except HealerError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
