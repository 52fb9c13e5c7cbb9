"""The heartbeat watchdog: who has gone quiet, and what to do about it, without a storm.

Starts ``fleet.watchdog_start_s`` (60 s) after boot, then checks every
``fleet.watchdog_interval_s`` (30 s). For each peer, by the age of its last heartbeat:

========  ==============  =========================================================
age >     state           action
========  ==============  =========================================================
45 s      slow            none (shown in status)
90 s      stale           repair its NATS channel — per peer at most once per
                          ``fleet.repair_cooldown_s`` (300 s)
300 s     silent          re-read its address (the fleet config may have changed)
600 s     silent          alert the chief — per peer at most once per
                          ``fleet.alert_interval_s`` (15 min)
never     never_seen      after 300 s of uptime: repair NATS and HTTP (cooldown as above)
========  ==============  =========================================================

The cooldowns are what stop the "55 repair attempts on one stale heartbeat" incident the
original had: a peer that stays stale for an hour gets 12 repair requests, not 120. The repair
is the ladder of ``healer.fleet.repair``; when it runs out the peer is escalated to a person —
one seed file per peer, rewritten (not repeated) by later ladders while it is open.
``check()`` is pure bookkeeping (the clock is injected); the fleet service executes actions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

REPAIR_NATS = "repair_nats"
REPAIR_HTTP = "repair_http"
READDRESS = "readdress"
ALERT_CHIEF = "alert_chief"


@dataclass
class Finding:
    """One peer at one check: its state and what should happen now."""

    peer: str
    state: str  # ok | slow | stale | silent | never_seen
    age_s: float | None
    actions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"peer": self.peer, "state": self.state,
                "age_s": None if self.age_s is None else round(self.age_s, 1),
                "actions": list(self.actions)}


class Watchdog:
    """Heartbeat ages in, findings with rate-limited actions out."""

    def __init__(self, fleet: Any, *, started_at: float | None = None,
                 clock: Callable[[], float] = time.time):
        self.fleet = fleet
        self.clock = clock
        self.started_at = clock() if started_at is None else started_at
        self._last: dict[tuple[str, str], float] = {}
        self.counts: dict[str, int] = {}

    @property
    def uptime(self) -> float:
        return self.clock() - self.started_at

    @property
    def armed(self) -> bool:
        return self.uptime >= self.fleet.watchdog_start_s

    def _allow(self, peer: str, action: str, every: float) -> bool:
        now = self.clock()
        last = self._last.get((peer, action))
        if last is not None and now - last < every:
            return False
        self._last[(peer, action)] = now
        self.counts[action] = self.counts.get(action, 0) + 1
        return True

    def check(self, peers: Iterable[str], age: Callable[[str], float | None]) -> list[Finding]:
        """Findings for ``peers`` given each one's heartbeat age (None: never heard)."""
        if not self.armed:
            return []
        f = self.fleet
        out = []
        for peer in peers:
            a = age(peer)
            if a is None:
                finding = Finding(peer, "never_seen", None)
                if self.uptime > f.readdress_s and self._allow(peer, "repair", f.repair_cooldown_s):
                    finding.actions += [REPAIR_NATS, REPAIR_HTTP]
            elif a > f.stale_s:
                finding = Finding(peer, "silent" if a > f.readdress_s else "stale", a)
                if self._allow(peer, "repair", f.repair_cooldown_s):
                    finding.actions.append(REPAIR_NATS)
                if a > f.readdress_s and self._allow(peer, READDRESS, f.readdress_s):
                    finding.actions.append(READDRESS)
                if a > f.alert_chief_s and self._allow(peer, ALERT_CHIEF, f.alert_interval_s):
                    finding.actions.append(ALERT_CHIEF)
            elif a > f.slow_s:
                finding = Finding(peer, "slow", a)
            else:
                finding = Finding(peer, "ok", a)
            out.append(finding)
        return out
