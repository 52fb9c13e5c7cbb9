"""`healer eval`: graded replays of real bugs (the fixtures in evals/fixtures)."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

from healer.commands._common import add_settings_args, parser, run

HELP = "heal the eval fixtures and grade every fix (fixed, caught, got through …)"

EPILOG = """\
examples:
  healer eval                                  # every fixture × correct,wrong,unfixable
  healer eval --fixture py-off-by-one --replay correct
  ANTHROPIC_API_KEY=… healer eval --executor claude --json eval.json

Each case heals a fresh copy of the fixture's repository through healer's real intake and
grades the end: fixed (PR, hidden check passes on its head), unfixable_correct, caught (a
wrong fix stopped), got_through (a PR whose head fails the hidden check: the worst), missed,
gave_up, no_fix, error. `scripted` drives the real Claude Code CLI against a scripted model
replaying each fixture's patches (needs a healer checkout: evals/scripted.py); any other
executor heals with a real model, one case per fixture. See docs/eval.md.

exit codes: 0 every grade as expected, 1 any grade below its expectation, 2 bad input.
"""


def main(argv: list[str]) -> int:
    p = parser("eval", HELP, EPILOG)
    p.add_argument("--executor", default="scripted",
                   help="scripted (default), claude, or another executor healer knows")
    p.add_argument("--fixture", action="append", default=[], metavar="NAME",
                   help="run only this fixture (repeatable; default: all)")
    p.add_argument("--replay", default="correct,wrong,unfixable",
                   help="comma-separated replays for the scripted executor")
    p.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    p.add_argument("--fixtures-dir", metavar="DIR",
                   help="where fixtures live (default: evals/fixtures of this healer)")
    add_settings_args(p)
    args = p.parse_args(argv)

    def body() -> int:
        from rich.console import Console

        from healer.code.eval import fixtures as fx
        from healer.code.eval import runner
        from healer.code.eval.table import document, render, write_json
        from healer.errors import UsageError
        from healer.resources import bundle_root

        replays = [r.strip() for r in args.replay.split(",") if r.strip()]
        bad = sorted(set(replays) - set(fx.REPLAYS))
        if bad or not replays:
            raise UsageError(f"--replay takes {', '.join(fx.REPLAYS)} (got "
                             f"{', '.join(bad) or 'nothing'})")
        if not 1 <= args.jobs <= 32:
            raise UsageError("--jobs must be between 1 and 32")
        root = Path(args.fixtures_dir) if args.fixtures_dir else \
            bundle_root() / "evals" / "fixtures"
        todo = runner.cases(fx.discover(root, args.fixture), replays, args.executor)
        overrides = list(args.set)
        if args.log_level:
            overrides.append(f"log.level={args.log_level}")
        options = runner.Options(executor=args.executor, config=args.config,
                                 overrides=tuple(overrides))
        if not args.log_level:
            # Each case's escalations are part of what is graded, not news for the operator:
            # they stay in the case's own state; only errors reach the terminal.
            logging.getLogger("healer").setLevel(logging.ERROR)
        # A pipe or a CI log gets the whole table, not one cut to 80 columns.
        console = Console() if sys.stdout.isatty() else Console(width=140)
        with console.status(f"healing {len(todo)} case(s)…"):
            results = asyncio.run(runner.run_all(
                todo, options, jobs=args.jobs,
                on_result=lambda r: console.log(f"{r.fixture} × {r.replay}: {r.grade}")))
        console.print(render(results, args.executor))
        if args.json:
            write_json(Path(args.json), document(results, args.executor))
        return 0 if all(r.ok for r in results) else 1

    return run(body)
