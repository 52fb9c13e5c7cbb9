"""``python -m healer.code.worker ATTEMPT_ID``: one code attempt as a detached process.

The settings come as JSON on stdin; the attempt is already admitted (``dispatch_pending``).
An attempt of a living-context incident (its record names the ``incident``) runs through the
context intake (``healer.context.heal``), any other through report_error's
(``healer.selfheal.dispatch``); both end in ``healer.code.attempt``.

This process holds the attempt's lease (``healer.selfheal.ownership``) and renews it itself,
so the attempt stays its own when the loop that started it dies, and is taken over by another
replica when this process (or its host) stops. A run that finds its lease taken — it was
stopped or cut off past the lease's time — stops without touching the attempt (exit 1).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    from healer.config import load_settings
    from healer.core.store import open_store
    from healer.errors import AttemptLostError, HealerError
    from healer.log import setup
    from healer.selfheal import attempts as st

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m healer.code.worker ATTEMPT_ID < settings.json", file=sys.stderr)
        return 2
    try:
        snapshot = json.loads(sys.stdin.read() or "{}")
    except ValueError as exc:
        print(f"healer: the settings on stdin are not JSON: {exc}", file=sys.stderr)
        return 2
    settings = load_settings(overrides=snapshot, env={}) if snapshot else load_settings()
    setup(settings.log.level, settings.log.format)
    store = open_store(settings)
    try:
        att = st.Attempts(store).get(args[0])
        if att is None:
            print(f"healer: no attempt {args[0]}", file=sys.stderr)
            return 1
        if att.get("incident"):
            from healer.context.service import ContextService

            out = asyncio.run(ContextService(settings, store).healer.heal(att["incident"]))
            status = out.status
        else:
            from healer.selfheal.dispatch import Dispatcher

            status = asyncio.run(Dispatcher(settings, store).run(args[0]))["status"]
    except AttemptLostError as exc:
        print(f"healer: stopped, the attempt is no longer this run's: {exc}", file=sys.stderr)
        return 1
    except (st.TransitionError, HealerError) as exc:
        print(f"healer: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    log.info("attempt %s ended: %s", args[0], status)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
