"""One healer of a peer at a time, fleet-wide: a renewed lease and the core gate's claim.

A healing episode and a repair ladder both work on a peer by holding it. The lease
``heal-<peer>`` says who is alive and working (it expires within ``store.lease_ttl_s`` of
its holder dying); the gate's claim ``fleet-episode.<peer>`` puts the work in the one
admission record every kind shares, so ``healer status`` and the caps see it. Whoever holds
the lease owns the claim: a claim found while holding the lease is a crashed holder's, and
is released and claimed anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from healer.agents.task import new_run_id
from healer.core import gate
from healer.core.lease import Lease
from healer.core.store import Store

log = logging.getLogger(__name__)

# A hold takes no agent slot itself: the agents it starts take theirs from the dispatcher
# (executor.max_concurrent), so other kinds' global cap does not count it.
POLICY = gate.Policy(kind="fleet", cooldown_s=0.0, max_concurrent=1_000_000, breaker_window=0,
                     holds_slot=False)


def claim_key(peer: str) -> str:
    """The core gate's novelty key of the work on ``peer``."""
    return f"fleet-episode.{peer}"


def claim(store: Store, peer: str, now: float) -> str:
    """Claim ``peer`` at the core gate (the caller holds its lease); the claim's id."""
    d = gate.Decision(gate.ALREADY_INVESTIGATING, "")
    for _ in range(2):
        d = gate.admit(store, claim_key(peer), new_run_id, now, POLICY, lambda: True,
                       record=lambda _aid: None)
        if d.accepted:
            return d.attempt_id
        if d.reason != gate.ALREADY_INVESTIGATING:
            break
        gate.release(store, claim_key(peer), d.attempt_id)  # a crashed holder's
    raise RuntimeError(f"the core gate refused work on {peer}: {d.message}")


class PeerHold:
    """``await acquire()`` → True while this holder works on the peer; ``release()`` ends it."""

    def __init__(self, store: Store, peer: str, owner: str, ttl_s: float, *,
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.peer = peer
        self.clock = clock
        self.lease = Lease(store, f"heal-{peer}", owner, ttl_s, clock=clock)
        self.claim_id = ""
        self._renewer: asyncio.Task[None] | None = None

    async def acquire(self) -> bool:
        if not await asyncio.to_thread(self.lease.acquire):
            return False
        try:
            self.claim_id = await asyncio.to_thread(claim, self.store, self.peer, self.clock())
        except BaseException:
            await asyncio.to_thread(self.lease.release)
            raise
        self._renewer = asyncio.create_task(self._keep(), name=f"lease-{self.peer}")
        return True

    async def holder(self) -> str | None:
        return await asyncio.to_thread(self.lease.holder)

    async def release(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        if self.claim_id:
            await asyncio.to_thread(gate.settle, self.store, claim_key(self.peer),
                                    self.claim_id, now=self.clock(), kind=POLICY.kind,
                                    ended=True, cooldown=False)
            self.claim_id = ""
        await asyncio.to_thread(self.lease.release)

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(max(0.5, self.lease.ttl_s / 3))
            if not await asyncio.to_thread(self.lease.renew):
                log.warning("fleet: lost the lease %s", self.lease.name)
                return
