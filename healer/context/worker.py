"""``python -m healer.context.worker KEY``: one living-context heal as a detached process.

A process without an event loop of its own that admitted a heal — ``healer approve`` on the
command line — starts it this way, as ``report_error`` starts ``healer.selfheal.dispatch``:
the settings as JSON on stdin, the incident already admitted (``healing``, its attempt
``dispatch_pending``). The run outlives the command that started it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    from healer.config import load_settings
    from healer.context.service import ContextService
    from healer.core.store import open_store
    from healer.errors import HealerError
    from healer.log import setup

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m healer.context.worker INCIDENT_KEY < settings.json",
              file=sys.stderr)
        return 2
    snapshot = json.loads(sys.stdin.read() or "{}")
    settings = load_settings(overrides=snapshot, env={}) if snapshot else load_settings()
    setup(settings.log.level, settings.log.format)
    store = open_store(settings)
    try:
        out = asyncio.run(ContextService(settings, store).healer.heal(args[0]))
    except HealerError as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    log.info("heal of %s ended: %s", args[0], out.status)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
