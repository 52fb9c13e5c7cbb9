"""Who runs an attempt: its lease, renewed by the run, and what a takeover finds expired.

With several replicas on one shared store (``store.backend: jetstream``) a pid says nothing
about a process on another host, so an attempt is owned through a lease (``healer.core.lease``):

1. The run that moves an attempt ``dispatch_pending`` → ``investigating`` first takes
   ``leases/attempt-<id>`` (owner ``<node>/<instance>/<pid>``, ttl ``selfheal.lease_ttl_s``)
   and writes ``owner {lease, revision, node}`` in that same transition. ``revision`` is the
   lease's revision when taken: the fencing token.
2. The run renews the lease every third of its ttl from a thread of its own — the worker
   process does, not the loop that started it, so a loop that dies leaves a live worker its
   attempt, and a host that dies drops it. A renewal that finds the lease taken, or that has
   failed until the lease would expire within a third of its ttl, marks the lease lost and
   calls ``on_lost``: the run stops and writes nothing more.
3. Every write the run makes to its attempt is fenced (``Attempts.fence``): refused with
   ``AttemptLostError`` once the record names another owner revision.
4. A takeover (``SelfHealService.take_over``) treats an ``investigating`` attempt whose lease
   expired, on any host, as dead — ``expired`` — and takes the lease itself (``seize``)
   before it writes the attempt, so the old run, should it come back, finds the lease gone.
5. An attempt still ``dispatch_pending`` two lease times after it was dispatched never got
   a run: the replica that admitted it died before its worker took the lease
   (``unstarted``). Twice, because a live worker may be slow to take it — a busy machine,
   or a NATS server that died with the worker's first request in flight (it waits for its
   timeout). The takeover seizes the lease the same way, so a worker that starts later still
   finds it taken (or the attempt no longer pending) and runs nothing.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from healer.core import lease as lease_mod
from healer.core.lease import Lease
from healer.core.store import Store
from healer.errors import ConflictError, StoreError
from healer.selfheal.attempts import DISPATCH_PENDING

log = logging.getLogger(__name__)

PENDING_LEASES = 2  # lease times an attempt may wait for its worker before a takeover

# One per process start: tells two runs of one node apart (a restarted worker is another).
INSTANCE = secrets.token_hex(4)


def lease_name(attempt_id: str) -> str:
    return f"attempt-{attempt_id}"


def owner_name(node: str) -> str:
    return f"{node}/{INSTANCE}/{os.getpid()}"


@dataclass
class AttemptLease:
    """The lease of one attempt, held by the run working on it (see the module's list)."""

    store: Store
    attempt_id: str
    node: str
    ttl_s: float
    clock: Callable[[], float] = time.time
    lease: Lease = field(init=False)
    token: int = field(init=False, default=0)  # the revision taken: the fencing token
    lost: threading.Event = field(init=False, default_factory=threading.Event)
    _stop: threading.Event = field(init=False, default_factory=threading.Event)
    _thread: threading.Thread | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.lease = Lease(self.store, lease_name(self.attempt_id), owner_name(self.node),
                           self.ttl_s, clock=self.clock)

    @classmethod
    def for_settings(cls, settings: Any, store: Store, attempt_id: str,
                     clock: Callable[[], float] = time.time) -> AttemptLease:
        return cls(store, attempt_id, settings.node, settings.selfheal.lease_ttl_s, clock)

    def take(self) -> bool:
        """Take the lease (free, expired, or ours); False while another run holds it."""
        if not self.lease.acquire():
            return False
        self.token = self.lease.revision
        return True

    def owner(self) -> dict[str, Any]:
        """What the attempt record carries as ``owner``."""
        return {"lease": self.lease.name, "revision": self.token, "node": self.node,
                "holder": self.lease.owner}

    def keep(self, on_lost: Callable[[], None]) -> None:
        """Renew in the background until ``release``; ``on_lost`` (from that thread) when the
        lease is gone or could not be renewed in time."""
        self._thread = threading.Thread(target=self._renew, args=(on_lost,), daemon=True,
                                        name=f"lease-{self.attempt_id}")
        self._thread.start()

    def _renew(self, on_lost: Callable[[], None]) -> None:
        good_until = self.clock() + self.ttl_s
        while not self._stop.wait(self.ttl_s / 3):
            try:
                if self.lease.renew():
                    good_until = self.clock() + self.ttl_s
                    continue
                why = "another replica took its lease"
            except (StoreError, OSError) as exc:
                # The store is away: keep trying while the lease surely still holds.
                if self.clock() < good_until - self.ttl_s / 3:
                    log.warning("attempt %s: could not renew its lease: %s", self.attempt_id,
                                exc)
                    continue
                why = f"its lease could not be renewed before it expired ({exc})"
            log.warning("attempt %s: %s; this run stops and writes nothing more",
                        self.attempt_id, why)
            self.lost.set()
            on_lost()
            return

    def release(self) -> None:
        """Stop renewing and give the lease back (unless it was lost: then it is not ours)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if not self.lost.is_set():
            try:
                self.lease.release()
            except (StoreError, OSError) as exc:  # it expires by itself
                log.warning("attempt %s: could not release its lease: %s", self.attempt_id,
                            exc)


def expired(store: Store, att: dict[str, Any], now: float) -> dict[str, Any] | None:
    """The attempt's lease record if the run owning it stopped renewing (expired or gone),
    else None (it still runs somewhere, or the attempt has no lease: the pid decides)."""
    owner = att.get("owner")
    if not isinstance(owner, dict) or not owner.get("lease"):
        return None
    return lease_mod.lapsed(store, str(owner["lease"]), now, str(owner.get("holder", "")))


def pending_since(att: dict[str, Any]) -> float:
    """When the attempt last became ``dispatch_pending`` (created, or resumed after a hold)."""
    for step in reversed(att.get("history") or []):
        if step.get("status") == DISPATCH_PENDING:
            return float(step.get("at") or 0)
    return float(att.get("created_at") or 0)


def unstarted(store: Store, att: dict[str, Any], now: float, ttl_s: float
              ) -> dict[str, Any] | None:
    """The attempt's lease state (as ``expired`` gives it) if the attempt has waited
    ``dispatch_pending`` for two lease times (``ttl_s``) with no run holding its lease — the
    worker that should have taken it never started — else None (it is young, or a run is
    starting)."""
    if now - pending_since(att) < PENDING_LEASES * ttl_s:
        return None
    return lease_mod.lapsed(store, lease_name(str(att["attempt_id"])), now)


def seize(store: Store, attempt_id: str, node: str, ttl_s: float, seen: dict[str, Any],
          now: float) -> Lease | None:
    """Take the expired lease ``seen`` (from ``expired``) for a takeover; None if its run
    renewed it meanwhile or another replica took it first."""
    lease = Lease(store, lease_name(attempt_id), f"{node}/{INSTANCE}/takeover", ttl_s,
                  clock=lambda: now)
    data = {"owner": lease.owner, "expires_at": now + ttl_s, "taken_at": now}
    try:
        if seen.get("revision"):
            lease.revision = store.put(lease_mod.KIND, lease.name, data,
                                       expected_revision=int(seen["revision"])).revision
        else:
            lease.revision = store.create(lease_mod.KIND, lease.name, data).revision
    except ConflictError:
        return None
    return lease
