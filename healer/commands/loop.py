"""``healer loop`` (= ``python -m healer.loop``): the headless healer, or ``--demo``."""

from __future__ import annotations

import sys

HELP = "run the headless healer loop (= python -m healer.loop)"


def main(argv: list[str] | None = None) -> int:
    from healer.commands._common import add_settings_args, parser, settings_from
    from healer.commands._common import run as run_command
    from healer.core import aio
    from healer.loop import run
    from healer.resources import optional

    p = parser(
        "loop",
        "Run healer headless: watch results and seed files, serve the API, heal what breaks.\n"
        "Stops cleanly on SIGINT/SIGTERM.",
        "exit codes: 0 stopped cleanly, 2 bad settings or another loop owns the state dir,\n"
        "3 a service could not start (e.g. the API port is taken)",
    )
    p.add_argument("--once", action="store_true",
                   help="recover, process what is pending, run each periodic job once, exit")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--demo", action="store_true",
                   help="run on an embedded local fleet, inject faults, show them healed")
    add_settings_args(p)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.duration is not None and args.duration <= 0:
        p.error("--duration must be positive")

    def body() -> int:
        settings = settings_from(args)
        if args.demo:
            run_demo = optional("healer.demo:run_demo")
            if run_demo is None:
                print("healer: the fleet demo is not part of this installation", file=sys.stderr)
                return 3
            return int(run_demo(settings))
        return aio.run(run(settings, once=args.once, duration=args.duration))

    return run_command(body)
