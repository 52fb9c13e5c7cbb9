"""When a person is told that self-healing could not fix a reported error.

The text is the one of every code attempt (``healer.code.escalation.build``); this module
owns report_error's bookkeeping around it.

Which attempts escalate (the state machine decides, ``healer.selfheal.attempts``): every
investigation of a ``report_error`` attempt that ends

=========================  ============================================================
``unfixable``              at once: the healing agent says a person is needed; its UNFIXABLE
                           note (sanitised) is the heart of the escalation
``failed``                 on every such end — healer has no "attempts per fingerprint"
``timeout``                limit (a fingerprint is tried again after ``selfheal.cooldown_s``
``anonymization_failed``   for as long as it is reported), so each failed try tells a person
=========================  ============================================================

Dedup is per fingerprint: one open seed file in ``.fleet-messages/human/`` and one forge
issue. A later escalation of the same fingerprint rewrites that file ("escalated N times")
and comments on the issue; once a person moves the file to ``archive/``, the next one starts
a new file. ``anonymization_failed`` writes the seed file only: its subject (a fix that
carried secrets or personal data) goes neither to the forge nor to Discord, not even scrubbed.

Escalating never raises: a failure is logged, recorded on the attempt
(``escalation_error``) and retried by the next ``SelfHealService.recover()`` up to
``attempts.MAX_ESCALATION_TRIES`` times. Everything written passes through the scrubber and
the publication validator in ``healer.core.escalation``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from healer.code.escalation import build, minimal
from healer.core.escalation import escalate
from healer.core.store import Store
from healer.selfheal.attempts import Attempts

log = logging.getLogger(__name__)

MAX_PER_SWEEP = 50


async def escalate_attempt(settings: Any, store: Store, attempt_id: str, *,
                           metrics: Any = None, clock: Callable[[], float] = time.time
                           ) -> str | None:
    """Escalate one ended attempt if it is due; the seed file's path, or None. Never raises."""
    attempts = Attempts(store, clock)
    try:
        att = attempts.claim_escalation(attempt_id)
    except Exception:
        log.exception("could not claim the escalation of %s", attempt_id)
        return None
    if att is None:
        return None
    try:
        history = attempts.for_fingerprint(att["fingerprint"])
        record = await escalate(settings, store, build(settings, att, history), metrics=metrics)
        if record.seed_file is None:
            record = await escalate(settings, store, minimal(att), metrics=metrics)
        if record.seed_file is None and record.issue is None:
            attempts.escalation_failed(attempt_id, "neither a seed file nor a forge issue "
                                                   "could be written (see the log)")
            return None
        seed = str(record.seed_file or "")
        attempts.escalation_done(attempt_id, seed_file=seed,
                                 issue_url=record.issue.url if record.issue else "")
        return seed
    except Exception as exc:  # an escalation never takes a worker or the loop down
        log.exception("escalation of attempt %s failed", attempt_id)
        try:
            attempts.escalation_failed(attempt_id, f"{type(exc).__name__}: {exc}")
        except Exception:
            log.exception("could not record the failed escalation of %s", attempt_id)
        return None


async def escalate_due(settings: Any, store: Store, *, metrics: Any = None,
                       clock: Callable[[], float] = time.time) -> list[str]:
    """Escalate what is still due (a worker died before it escalated, recovery settled it);
    the attempt ids escalated."""
    try:
        due = Attempts(store, clock).escalations_due()[:MAX_PER_SWEEP]
    except Exception:
        log.exception("could not list the escalations due")
        return []
    done = []
    for aid in due:
        if await escalate_attempt(settings, store, aid, metrics=metrics, clock=clock) is not None:
            done.append(aid)
    return done


def run_blocking(make: Callable[[], Coroutine[Any, Any, Any]], timeout: float = 120.0) -> Any:
    """Run a coroutine to the end from synchronous code, also when this thread already runs
    an event loop (then in a helper thread). None if it did not finish within ``timeout``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(make())
        except Exception:
            log.exception("background escalation failed")

    thread = threading.Thread(target=target, name="healer-escalate", daemon=True)
    thread.start()
    thread.join(timeout)
    return box.get("value")
