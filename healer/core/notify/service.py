"""The loop's notify service: a reconcile pass and the due deliveries every
``notify.interval_s``, each delivery its own task (one in flight per outbox item), so a
receiver that hangs until its timeout delays no other receiver and no other loop job.

Stopping (the ``notify`` duty moved, or the loop stops) ends the passes but lets each
delivery in flight finish and record its outcome (within the target's timeout): one
cancelled after its request went out would stay claimed, and be given up as "delivered or
not, unknown" once its claim ran out. Whoever leads meanwhile does not send what is still
in flight (it is claimed).

The outbox is in the store (``healer.core.notify.outbox``): on a shared store the replica
that leads the duty next sends what another one queued. The listing is read off the loop;
right before it sends, each delivery checks that this replica still leads the duty
(``Notifier.fence``) and claims its item as listed (``Outbox.claim``), so a listing made
before the last send finished, or a paused leader's, sends nothing twice. At start
(``Healer.recovery``, every replica) an older healer's outbox files move into the store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from healer.core.notify.reconcile import Notifier

log = logging.getLogger(__name__)


class NotifyService:
    name = "notify"

    def __init__(self, notifier: Notifier, interval_s: float):
        self.notifier, self.interval_s = notifier, interval_s
        self._task: asyncio.Task[None] | None = None
        self._flying: dict[str, asyncio.Task[bool]] = {}

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        # Not awaited: the loop stops the next duty's services meanwhile, before its lease
        # can run out. Each delivery ends within its target's timeout.

    async def tick(self) -> None:
        """One pass: reconcile, then start every due delivery not already in flight."""
        try:
            await asyncio.to_thread(self.notifier.reconcile)
        except Exception:
            log.exception("notify: reconcile pass failed")
        try:  # the store may be a network away: off the loop, and a failure waits a pass
            due = await asyncio.to_thread(self.notifier.due)
        except Exception:
            log.exception("notify: the outbox could not be read")
            return
        for item in due:
            if item.key in self._flying:
                continue
            task = asyncio.create_task(self.notifier.deliver(item))
            self._flying[item.key] = task
            task.add_done_callback(lambda _t, k=item.key: self._flying.pop(k, None))

    async def _run(self) -> None:
        while True:
            await self.tick()
            await asyncio.sleep(self.interval_s)


def create_service(healer: Any) -> Any:
    """The loop's factory: nothing to run when no target is configured."""
    notifier = Notifier(healer.settings, healer.store)
    # On every replica, whether or not it leads the duty: an older healer's outbox files
    # move into the store, where whoever leads sends them (and a failure is shown).
    healer.recovery.append(lambda: asyncio.to_thread(notifier.outbox.adopt_files,
                                                     healer.settings.state_path))
    if not notifier.targets:
        return None
    # Every replica may receive; one sends (as Alertmanager's HA cluster does).
    notifier.fence = lambda: healer.duties.fence("notify")
    return healer.lead("notify", NotifyService(notifier, healer.settings.notify.interval_s))
