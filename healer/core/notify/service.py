"""The loop's notify service: a reconcile pass and the due deliveries every
``notify.interval_s``, each delivery its own task (one in flight per outbox item), so a
receiver that hangs until its timeout delays no other receiver and no other loop job."""

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
        tasks = [t for t in (self._task, *self._flying.values()) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

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
