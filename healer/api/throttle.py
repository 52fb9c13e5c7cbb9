"""Growing delays per client for wrong secrets: wrong API tokens and wrong dashboard logins.

1. **Who a client is** — ``client_key``: the socket's peer address as the ASGI server reports
   it. uvicorn rewrites it from ``X-Forwarded-For`` only for a peer in ``api.trusted_proxies``
   (default none, ``healer.api.service``), so a client cannot name the address it is counted
   as. IPv6 addresses count per /64, the block one host usually gets.
2. **What a failure costs** — the first ``free_failures`` nothing; then failure *n* makes the
   client wait ``base_delay_s · 2^(n - free_failures - 1)``, at most ``max_delay_s``.
3. **While it waits** — ``retry_after`` says how long; the caller answers 429 with
   ``Retry-After`` and does not even look at the secret, so waiting cannot be skipped by
   guessing faster. Nothing sleeps: the server answers at once.
4. **Only that client** — other addresses are never delayed, so a flood from one address
   never locks the operator out from another. (Clients behind one address share its wait.)
5. **Bounded** — at most ``max_clients`` addresses are remembered, least recently seen
   forgotten first; an address quiet for ``forget_after_s`` starts afresh.

One ``Throttle`` per kind of secret (``Throttles``): a wrong login does not slow the API.
The clock is a parameter, so tests move time instead of sleeping.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Scope

Clock = Callable[[], float]


@dataclass(frozen=True)
class ThrottlePolicy:
    """The limits of one ``Throttle``; ``from_settings`` reads ``api.throttle``."""

    free_failures: int = 5
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0
    forget_after_s: float = 3600.0
    max_clients: int = 10000

    @classmethod
    def from_settings(cls, throttle: Any) -> ThrottlePolicy:
        return cls(free_failures=throttle.free_failures, base_delay_s=throttle.base_delay_s,
                   max_delay_s=throttle.max_delay_s, forget_after_s=throttle.forget_after_s,
                   max_clients=throttle.max_clients)

    def delay(self, failures: int) -> float:
        """How long a client must wait after its ``failures``-th failure."""
        over = failures - self.free_failures
        if over <= 0:
            return 0.0
        # 2**over grows without bound; cap the exponent before it overflows a float.
        return min(self.base_delay_s * 2.0 ** min(over - 1, 64), self.max_delay_s)


@dataclass
class _Client:
    failures: int = 0
    last: float = 0.0  # when the last failure was counted
    until: float = 0.0  # no attempt before this


class Throttle:
    """Failures per client key and the wait they impose (the module docstring's rules)."""

    def __init__(self, policy: ThrottlePolicy | None = None, *, clock: Clock = time.monotonic):
        self.policy = policy or ThrottlePolicy()
        self.clock = clock
        self._clients: OrderedDict[str, _Client] = OrderedDict()

    @property
    def remembered(self) -> int:
        """How many client addresses are remembered (at most ``max_clients``)."""
        return len(self._clients)

    def _get(self, key: str, now: float) -> _Client | None:
        entry = self._clients.get(key)
        if entry is not None and now - entry.last > self.policy.forget_after_s \
                and now >= entry.until:
            del self._clients[key]
            return None
        return entry

    def retry_after(self, key: str) -> float:
        """Seconds ``key`` must still wait before its next attempt; 0 if it may try now."""
        now = self.clock()
        entry = self._get(key, now)
        return max(entry.until - now, 0.0) if entry is not None else 0.0

    def failed(self, key: str) -> float:
        """Count a failure of ``key``; return the wait it now has (0 while still free)."""
        now = self.clock()
        entry = self._get(key, now)
        if entry is None:
            entry = self._clients[key] = _Client()
        self._clients.move_to_end(key)
        entry.failures += 1
        entry.last = now
        wait = self.policy.delay(entry.failures)
        entry.until = now + wait
        while len(self._clients) > self.policy.max_clients:
            self._clients.popitem(last=False)
        return wait


@dataclass
class Throttles:
    """The two buckets: wrong bearer tokens (API and dashboard pages) and wrong logins."""

    bearer: Throttle = field(default_factory=Throttle)
    login: Throttle = field(default_factory=Throttle)

    @classmethod
    def from_settings(cls, api: Any, *, clock: Clock = time.monotonic) -> Throttles:
        policy = ThrottlePolicy.from_settings(api.throttle)
        return cls(bearer=Throttle(policy, clock=clock), login=Throttle(policy, clock=clock))


def retry_after_header(wait: float) -> dict[str, str]:
    """``Retry-After`` in whole seconds, never 0 while a wait runs."""
    return {"Retry-After": str(max(1, math.ceil(wait)))}


def client_key(scope: Scope) -> str:
    """The address a request is counted under (rule 1 of the module docstring)."""
    client = scope.get("client")
    host = client[0] if client else ""
    return address_key(host)


def address_key(host: str) -> str:
    try:
        addr = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host or "unknown"
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        if not addr.is_loopback:
            return str(ipaddress.IPv6Network((addr, 64), strict=False))
    return str(addr)
