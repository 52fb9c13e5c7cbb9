"""The loop's side of duties: one renewer task, and what starts and stops with each duty.

``healer.core.duties.Duties`` says which duties this replica holds; ``Leading`` acts on it:

* every ``ttl/3`` it takes or renews every lease (in a thread: the store may be remote);
* several times a second it compares what runs with what is held — a duty just taken starts
  its services (``Healer.lead``), a duty lost or about to run out stops them and cancels its
  periodic job in flight (``Healer.once``) before another replica can take it;
* on a clean stop it stops everything it started and releases the leases at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from healer.core.duties import Duties

log = logging.getLogger("healer.loop")

CHECK_S = 0.25  # how often what runs is compared with what is held (in memory, cheap)


class LedService:
    """A service that runs only while this replica leads its duty (``Healer.lead``). The loop
    starts and stops this wrapper with the others; ``Leading`` starts and stops the inner
    service as the duty comes and goes."""

    def __init__(self, duty: str, inner: Any, leading: Leading):
        self.duty, self.inner, self.leading = duty, inner, leading
        self.name = getattr(inner, "name", duty)
        self.running = False
        self.active = False  # between the loop's start() and stop() of this wrapper

    async def start(self) -> None:
        self.active = True
        await self.leading.apply()

    async def stop(self) -> None:
        self.active = False
        await self.stop_inner()

    async def start_inner(self) -> None:
        if self.running or not self.active:
            return
        self.running = True
        log.info("duty %s: starting %s", self.duty, self.name)
        try:
            await self.inner.start()
        except Exception:
            self.running = False
            log.exception("duty %s: %s did not start", self.duty, self.name)

    async def stop_inner(self) -> None:
        if not self.running:
            return
        self.running = False
        log.info("duty %s: stopping %s", self.duty, self.name)
        try:
            await self.inner.stop()
        except Exception:
            log.exception("duty %s: stopping %s failed", self.duty, self.name)


class Leading:
    def __init__(self, duties: Duties):
        self.duties = duties
        self.services: list[LedService] = []
        self._jobs: dict[str, set[asyncio.Task[Any]]] = {}
        self._lock = asyncio.Lock()

    def wrap(self, duty: str, service: Any) -> LedService:
        svc = LedService(duty, service, self)
        self.services.append(svc)
        return svc

    async def tick(self) -> None:
        """Take or renew the leases now (off the event loop), then act on the outcome."""
        await asyncio.to_thread(self.duties.tick)
        await self.apply()

    async def apply(self) -> None:
        """Start what a held duty runs; stop and cancel what a duty no longer held runs."""
        async with self._lock:
            for svc in self.services:
                if self.duties.holds(svc.duty):
                    await svc.start_inner()
                else:
                    await svc.stop_inner()
            for duty, tasks in self._jobs.items():
                if tasks and not self.duties.holds(duty):
                    log.warning("duty %s: no longer ours; cancelling its run in flight", duty)
                    for t in tasks:
                        t.cancel()

    async def run_job(self, duty: str, coro: Any) -> None:
        """Run one pass of a duty's periodic job, cancelled if the duty is lost meanwhile."""
        task = asyncio.ensure_future(coro)
        tasks = self._jobs.setdefault(duty, set())
        tasks.add(task)
        try:
            await asyncio.wait({task})
        finally:
            tasks.discard(task)
            if not task.done():
                task.cancel()
        if task.cancelled():
            log.info("duty %s: run stopped, the duty moved to another replica", duty)
            return
        task.result()

    async def run(self, stopping: asyncio.Event) -> None:
        """The renewer: a tick every ``ttl/3``, the held duties checked every ``CHECK_S``."""
        loop = asyncio.get_running_loop()
        pending: asyncio.Future[Any] | None = None
        next_tick = 0.0
        while not stopping.is_set():
            now = loop.time()
            if pending is not None and pending.done():
                if not pending.cancelled() and pending.exception() is not None:
                    log.warning("lease renewal failed: %s", pending.exception())
                pending = None
                await self.apply()
            if pending is None and now >= next_tick:
                pending = asyncio.ensure_future(asyncio.to_thread(self.duties.tick))
                next_tick = now + self.duties.renew_every_s
            await self.apply()  # a renewal that hangs must not keep an expiring duty running
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=CHECK_S)

    async def release(self) -> None:
        """A clean stop: stop every led service, cancel the duties' runs, free the leases."""
        for svc in self.services:
            await svc.stop_inner()
        for tasks in self._jobs.values():
            for t in tasks:
                t.cancel()
        try:  # the store may be away: the leases expire by themselves within the ttl anyway
            await asyncio.wait_for(asyncio.to_thread(self.duties.release), self.duties.ttl_s)
        except TimeoutError:
            log.warning("duties: the store did not answer; the leases expire within %.0f s",
                        self.duties.ttl_s)
