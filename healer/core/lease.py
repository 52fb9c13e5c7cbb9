"""Leases: one node at a time works on a peer or an incident, without home-made consensus.

A lease is a store record ``leases/<name>`` = ``{owner, expires_at}`` taken and renewed with
compare-and-set. Whoever holds an unexpired lease owns the work; a node that dies stops
renewing, and once the lease expires another node takes it over. With the JetStream store the
compare-and-set is the bucket's, so this holds across machines.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from healer.core.store import Store
from healer.errors import ConflictError

KIND = "leases"


@dataclass
class Lease:
    store: Store
    name: str
    owner: str
    ttl_s: float
    clock: Callable[[], float] = time.time
    revision: int = 0

    @property
    def held(self) -> bool:
        return self.revision != 0

    def acquire(self) -> bool:
        """Take the lease if free, expired or already ours. True if we hold it now."""
        rec = self.store.get(KIND, self.name)
        now = self.clock()
        data = {"owner": self.owner, "expires_at": now + self.ttl_s, "taken_at": now}
        try:
            if rec is None:
                self.revision = self.store.create(KIND, self.name, data).revision
                return True
            if rec.data["owner"] == self.owner or float(rec.data["expires_at"]) <= now:
                if rec.data["owner"] == self.owner:
                    data["taken_at"] = rec.data.get("taken_at", now)
                self.revision = self.store.put(KIND, self.name, data,
                                               expected_revision=rec.revision).revision
                return True
        except ConflictError:
            pass
        self.revision = 0
        return False

    def renew(self) -> bool:
        """Extend our lease; False if we lost it (someone took it after it expired)."""
        if not self.held:
            return False
        rec = self.store.get(KIND, self.name)
        if rec is None or rec.revision != self.revision or rec.data["owner"] != self.owner:
            self.revision = 0
            return False
        data = {**rec.data, "expires_at": self.clock() + self.ttl_s}
        try:
            self.revision = self.store.put(KIND, self.name, data,
                                           expected_revision=rec.revision).revision
            return True
        except ConflictError:
            self.revision = 0
            return False

    def release(self) -> None:
        if not self.held:
            return
        with contextlib.suppress(ConflictError):
            self.store.delete(KIND, self.name, expected_revision=self.revision)
        self.revision = 0

    def holder(self) -> str | None:
        rec = self.store.get(KIND, self.name)
        if rec is None or float(rec.data["expires_at"]) <= self.clock():
            return None
        return str(rec.data["owner"])


def lapsed(store: Store, name: str, now: float, holder: str = "") -> dict[str, Any] | None:
    """The lease ``name`` as a takeover sees it when its holder stopped renewing — its record
    with ``revision`` (the compare-and-set a seizure needs), or ``{owner: holder,
    expires_at: None, revision: 0}`` when it is gone — else None (it is held)."""
    rec = store.get(KIND, name)
    if rec is None:
        return {"owner": holder, "expires_at": None, "revision": 0}
    if float(rec.data.get("expires_at") or 0) > now:
        return None
    return {**rec.data, "revision": rec.revision}
