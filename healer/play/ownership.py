"""Who runs a play remediation: its lease, renewed by the run, and what a takeover finds dead.

With several replicas on one shared store a remediation must not die with the replica that
fired its alert, and must never run twice. Like a healing attempt
(``healer.selfheal.ownership``), it is owned through a lease (``healer.core.lease``):

1. **Take.** ``Remediator.handle`` takes ``leases/remediation-<digest of its key>`` (owner
   ``<node>/<instance>``, ttl ``ha.lease_ttl_s``) *before* it asks the gate — only a free or
   expired lease, never one a live run holds, even one of this replica. The record
   ``remediations/<key>`` is written with ``owner {lease, revision, holder, tenure}``:
   ``revision`` is the lease's revision when taken (the fencing token), ``tenure`` a random
   name of this holding (the lease record carries it too, through every renewal).
2. **Renew.** The run renews the lease every third of its ttl from an asyncio task (the
   store call in a thread: the store is synchronous and may hang). A renewal that finds the
   lease taken, or that has failed (or hung) until the lease would expire within a third of
   its ttl, marks the lease lost and cancels the run: it writes nothing more — no ledger
   entry, no gate settle, no record update.
3. **Fence.** Every write of the run to its record is refused (``RemediationLostError``) once
   the record names another owner; before a write elsewhere (the incident, the gate, the
   escalation) the run re-reads its lease (``check``).
4. **Take over.** The ``play-takeover`` duty (every ``ttl/3``) looks at the running
   remediations whose lease expired or is gone (``expired``), takes the lease with
   compare-and-set (``seize``: another replica may race), writes itself as the record's
   owner if the record still names the owner it found dead, and resumes the cycle there
   (``Remediator.resume``).
5. **Hand over.** A clean stop cancels the run: it gives its lease back (``give_back``) and
   leaves the record running and the gate claim held, so a replica — another, or this one
   restarted — resumes it within ``ttl/3``. So does a run whose store call failed. After
   ``MAX_TAKEOVERS`` (``healer.play.remediate``) the next takeover escalates at once.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from healer.core import lease as lease_mod
from healer.core.incidents import digest
from healer.core.lease import Lease
from healer.core.store import Store
from healer.errors import ConflictError, RemediationLostError

log = logging.getLogger(__name__)

PREFIX = "remediation-"


def lease_name(key: str) -> str:
    """The lease of remediation ``key`` (``incidents.digest``: the key itself while it is a
    short safe name, else its start and a hash)."""
    return PREFIX + digest(key)


@dataclass
class RemediationLease:
    """The lease of one remediation, held by the run working on it (see the module's list)."""

    store: Store
    key: str
    owner: str  # <node>/<instance>
    ttl_s: float
    clock: Callable[[], float] = time.time
    lease: Lease = field(init=False)
    token: int = 0  # the revision taken: the fencing token
    tenure: str = ""  # this holding's name, in the lease record and the remediation's owner
    lost: bool = False
    _keeper: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.lease = Lease(self.store, lease_name(self.key), self.owner, self.ttl_s,
                           clock=self.clock)

    @property
    def every_s(self) -> float:
        return self.ttl_s / 3

    def take(self) -> bool:
        """Take the lease if it is free or expired; False while any run holds it (this
        replica's own too: one run per remediation)."""
        rec = self.store.get(lease_mod.KIND, self.lease.name)
        if rec is not None and float(rec.data.get("expires_at") or 0) > self.clock():
            return False
        return self._write(rec.revision if rec is not None else 0)

    def _write(self, seen_revision: int) -> bool:
        now = self.clock()
        tenure = secrets.token_hex(4)
        data = {"owner": self.owner, "expires_at": now + self.ttl_s, "taken_at": now,
                "tenure": tenure, "remediation": self.key}
        try:
            if seen_revision:
                rec = self.store.put(lease_mod.KIND, self.lease.name, data,
                                     expected_revision=seen_revision)
            else:
                rec = self.store.create(lease_mod.KIND, self.lease.name, data)
        except ConflictError:
            return False
        self.lease.revision = self.token = rec.revision
        self.tenure = tenure
        return True

    def owner_record(self) -> dict[str, Any]:
        """What the remediation record carries as ``owner``."""
        return {"lease": self.lease.name, "revision": self.token, "holder": self.owner,
                "tenure": self.tenure}

    def owns(self, record: dict[str, Any] | None) -> bool:
        """Whether the remediation record ``record`` still names this holding as its owner."""
        return bool(record) and (record or {}).get("owner") == self.owner_record()

    def check(self) -> None:
        """Refuse (``RemediationLostError``) unless this run still holds its lease: call it
        right before a write outside the remediation record."""
        if not self.lost:
            rec = self.store.get(lease_mod.KIND, self.lease.name)
            if rec is not None and rec.data.get("owner") == self.owner and \
                    rec.data.get("tenure") == self.tenure:
                return
            self.lost = True
        raise RemediationLostError(self.key, self.token, None)

    def keep(self, on_lost: Callable[[], object]) -> None:
        """Renew in the background until ``halt``; ``on_lost`` (on the loop) when the lease
        is gone or could not be renewed in time."""
        self._keeper = asyncio.get_running_loop().create_task(
            self._keep(on_lost), name=f"lease-{self.lease.name}")

    async def _keep(self, on_lost: Callable[[], object]) -> None:
        loop = asyncio.get_running_loop()
        good_until = self.clock() + self.ttl_s
        call: asyncio.Future[bool] | None = None  # a renewal still in flight (a slow store)
        called = 0.0
        while True:
            await asyncio.sleep(self.every_s)
            if call is None:
                called = self.clock()
                call = loop.run_in_executor(None, self.lease.renew)
            done, _ = await asyncio.wait({call}, timeout=self.every_s)
            problem = f"no answer from the store within {self.every_s:g} s"
            if done:
                finished, call = call, None
                try:
                    if finished.result():
                        good_until = called + self.ttl_s
                        continue
                    self._lose("its lease is gone or another replica's", on_lost)
                    return
                except Exception as exc:  # the store is away: the clock decides
                    problem = str(exc)
            if self.clock() < good_until - self.every_s:
                log.warning("remediation %s: could not renew its lease: %s", self.key, problem)
                continue
            self._lose(f"its lease could not be renewed before it expired ({problem})",
                       on_lost)
            return

    def _lose(self, why: str, on_lost: Callable[[], object]) -> None:
        self.lost = True
        log.warning("remediation %s: %s; this run stops and writes nothing more", self.key,
                    why)
        on_lost()

    def halt(self) -> None:
        """Stop renewing (a renewal in flight may still land: ``give_back`` allows for it)."""
        if self._keeper is not None:
            self._keeper.cancel()

    def give_back(self) -> None:
        """Stop renewing and delete the lease if it is still this holding's — a renewal
        landing meanwhile only makes the delete try again. Never raises: a lease not given
        back expires by itself."""
        self.halt()
        if self.lost:
            return
        for _ in range(3):
            try:
                rec = self.store.get(lease_mod.KIND, self.lease.name)
                if rec is None or rec.data.get("tenure") != self.tenure or \
                        rec.data.get("owner") != self.owner:
                    return
                self.store.delete(lease_mod.KIND, self.lease.name,
                                  expected_revision=rec.revision)
                return
            except ConflictError:
                continue
            except Exception as exc:  # the store is away
                log.warning("remediation %s: could not give its lease back: %s", self.key,
                            exc)
                return

    async def halted(self) -> None:
        """Wait (briefly) for the renewal task to end after ``halt``."""
        if self._keeper is not None:
            await asyncio.wait({self._keeper}, timeout=self.every_s)


def expired(store: Store, owner: dict[str, Any], now: float) -> dict[str, Any] | None:
    """The lease record of a remediation's ``owner`` if its run stopped renewing (expired
    or gone), else None (it still runs somewhere)."""
    return lease_mod.lapsed(store, str(owner["lease"]), now, str(owner.get("holder", "")))


def seize(store: Store, key: str, owner: str, ttl_s: float, seen: dict[str, Any],
          clock: Callable[[], float] = time.time) -> RemediationLease | None:
    """Take the expired or gone lease ``seen`` (from ``expired``) for a takeover; None if its
    run renewed it meanwhile or another replica took it first."""
    lease = RemediationLease(store, key, owner, ttl_s, clock)
    return lease if lease._write(int(seen.get("revision") or 0)) else None
