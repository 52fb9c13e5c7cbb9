"""The loop's notify service: a reconcile pass and the due deliveries every
``notify.interval_s``, each delivery its own task (one in flight per outbox item), so a
receiver that hangs until its timeout delays no other receiver and no other loop job.

Stopping (the ``notify`` duty moved, or the loop stops) ends the passes but lets each
delivery in flight finish and record its outcome (within the target's timeout): one
cancelled after its request went out would stay in the outbox and be sent again when the
duty comes back. A restart meanwhile does not send what is still in flight."""

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
        for item in self.notifier.outbox.due():
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
    if not notifier.targets:
        return None
    # Every replica may receive; one sends (as Alertmanager's HA cluster does).
    notifier.fence = lambda: healer.duties.fence("notify")
    return healer.lead("notify", NotifyService(notifier, healer.settings.notify.interval_s))
