"""Who said it: heartbeats, fleet messages and identity proofs carry an HMAC-SHA256 made with
the fleet's shared secret (``fleet.secret``), so a neighbour on the network cannot speak for a
node.

1. ``sign(doc, secret, purpose)`` returns the document with ``sig = {"v": 1, "ts", "nonce",
   "mac"}``. The MAC covers the purpose, ``ts``, ``nonce`` and the canonical JSON of the
   document (sorted keys, no ``sig``, no ``relayed_by`` — the chief adds that when it relays,
   and the sender's signature must still hold).
2. ``Verifier.check(doc, purpose)`` returns the document without ``sig`` or raises
   ``SignatureError`` with one reason of a fixed set:

   ==============  ======================================================================
   ``no_secret``   this side has no fleet secret: nothing can be verified, so nothing is
   ``unsigned``    no ``sig``
   ``malformed``   a ``sig`` of the wrong shape
   ``stale``       ``ts`` more than ``window_s`` (120 s) away from now, either way
   ``bad_signature`` the MAC does not match (``hmac.compare_digest``)
   ``replayed``    that nonce was seen inside the window (remembered for twice the window)
   ==============  ======================================================================

3. ``prove(secret, node_id, nonce)`` / ``proves(…)``: the identity challenge a moved node
   answers (``GET /identity?nonce=…``) — only a holder of the secret can answer it for a
   nonce it has never seen.
4. ``Refusals`` counts what was refused by purpose and reason, logs at most one line per
   purpose and reason a minute, and calls a hook (the loop's Prometheus counter).

The purpose is inside the MAC, so a heartbeat is never a valid message or identity proof.
Every holder of the secret can sign for any node: the secret is the fleet's, not a node's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from healer.errors import ConfigError, SignatureError

log = logging.getLogger(__name__)

FIELD = "sig"
UNSIGNED = frozenset({FIELD, "relayed_by"})
WINDOW_S = 120.0
MIN_SECRET = 16
REASONS = ("no_secret", "unsigned", "malformed", "stale", "bad_signature", "replayed")
_PREFIX = b"healer-fleet-v1"


def require_secret(secret: str, where: str = "environment") -> str:
    """``secret`` if it is usable as the fleet's signing key; ``ConfigError`` otherwise."""
    if len(secret) < MIN_SECRET:
        raise ConfigError(
            "the fleet has no signing secret: heartbeats, fleet messages and address moves "
            "must be signed" if not secret else
            f"the fleet secret is shorter than {MIN_SECRET} characters",
            file=where, key="fleet.secret",
            expected="the same random string on every node (HEALER_FLEET_SECRET), e.g. from "
                     "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`")
    return secret


def canonical(doc: dict[str, Any]) -> bytes:
    body = {k: v for k, v in doc.items() if k not in UNSIGNED}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def _mac(secret: str, *parts: bytes) -> str:
    return hmac.new(secret.encode(), b"\n".join((_PREFIX, *parts)), hashlib.sha256).hexdigest()


def sign(doc: dict[str, Any], secret: str, purpose: str, *,
         now: float | None = None) -> dict[str, Any]:
    """``doc`` with a fresh signature (a new nonce each call)."""
    ts = repr(float(time.time() if now is None else now))
    nonce = secrets.token_hex(16)
    mac = _mac(secret, purpose.encode(), ts.encode(), nonce.encode(), canonical(doc))
    return {**{k: v for k, v in doc.items() if k != FIELD},
            FIELD: {"v": 1, "ts": float(ts), "nonce": nonce, "mac": mac}}


def signed_at(doc: dict[str, Any]) -> float:
    """When ``doc`` says it was signed (only meaningful after ``Verifier.check``)."""
    return float(doc.get(FIELD, {}).get("ts", 0.0))


class Verifier:
    """Checks signatures of one fleet secret and refuses replays within the window."""

    def __init__(self, secret: str, *, window_s: float = WINDOW_S,
                 clock: Callable[[], float] = time.time, max_nonces: int = 100_000,
                 refusals: Refusals | None = None):
        self.secret = secret
        self.window_s = window_s
        self.clock = clock
        self.max_nonces = max_nonces
        self.refusals = refusals or Refusals()
        self._seen: OrderedDict[str, float] = OrderedDict()

    def check(self, doc: Any, purpose: str) -> dict[str, Any]:
        """``doc`` without its signature, or ``SignatureError`` (counted in ``refusals``)."""
        try:
            return self._check(doc, purpose)
        except SignatureError as exc:
            self.refusals.count(purpose, exc.reason, exc.detail)
            raise

    def _check(self, doc: Any, purpose: str) -> dict[str, Any]:
        if len(self.secret) < MIN_SECRET:
            raise SignatureError("no_secret", "no fleet secret configured here")
        if not isinstance(doc, dict) or FIELD not in doc:
            raise SignatureError("unsigned", f"a {purpose} without a signature")
        sig = doc[FIELD]
        if not isinstance(sig, dict) or sig.get("v") != 1:
            raise SignatureError("malformed", "unknown signature version")
        ts, nonce, mac = sig.get("ts"), sig.get("nonce"), sig.get("mac")
        if (not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts)
                or not isinstance(nonce, str) or not 16 <= len(nonce) <= 64
                or not isinstance(mac, str) or len(mac) != 64):
            raise SignatureError("malformed", "signature fields of the wrong type or size")
        now = self.clock()
        if abs(now - ts) > self.window_s:
            raise SignatureError("stale", f"signed {now - ts:.0f} s from now "
                               f"(window ±{self.window_s:.0f} s)")
        try:
            body = canonical(doc)
        except (TypeError, ValueError) as exc:
            raise SignatureError("malformed", "not canonical JSON") from exc
        want = _mac(self.secret, purpose.encode(), repr(float(ts)).encode(), nonce.encode(),
                    body)
        if not hmac.compare_digest(want.encode(), mac.encode()):
            raise SignatureError("bad_signature", f"the {purpose}'s MAC does not match")
        self._forget(now)
        if nonce in self._seen:
            raise SignatureError("replayed", f"the {purpose}'s nonce was seen already")
        self._seen[nonce] = now
        while len(self._seen) > self.max_nonces:
            self._seen.popitem(last=False)
        return {k: v for k, v in doc.items() if k != FIELD}

    def _forget(self, now: float) -> None:
        horizon = now - 2 * self.window_s
        while self._seen:
            nonce, at = next(iter(self._seen.items()))
            if at >= horizon:
                break
            del self._seen[nonce]


class Refusals:
    """What was refused, by purpose and reason; one log line per pair a minute at most."""

    def __init__(self, *, log_every_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 hook: Callable[[str, str], None] | None = None):
        self.counts: dict[str, int] = {}
        self.hook = hook
        self.log_every_s = log_every_s
        self.clock = clock
        self._logged: dict[str, tuple[float, int]] = {}

    def count(self, purpose: str, reason: str, detail: str = "") -> None:
        key = f"{purpose}:{reason}"
        self.counts[key] = self.counts.get(key, 0) + 1
        if self.hook is not None:
            try:
                self.hook(purpose, reason)
            except Exception:  # a metrics hiccup must not let a forged document through
                log.exception("counting a refused %s failed", purpose)
        now = self.clock()
        last, at_count = self._logged.get(key, (-math.inf, 0))
        if now - last >= self.log_every_s:
            since = self.counts[key] - at_count - 1
            log.warning("fleet: refused a %s (%s)%s%s", purpose, reason,
                        f": {detail}" if detail else "",
                        f"; {since} more like it since the last report" if since > 0 else "")
            self._logged[key] = (now, self.counts[key])

    def snapshot(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))


def prove(secret: str, node_id: str, nonce: str, host: str, port: int) -> str:
    """The answer to an identity challenge sent to ``host:port``: only a holder of the secret
    can make it, and it names the address the node listens on, so a server that relays the
    challenge to the real node elsewhere gets a proof for the wrong address."""
    return _mac(secret, b"identity", node_id.encode(), nonce.encode(), host.encode(),
                str(port).encode())


def proves(secret: str, node_id: str, nonce: str, host: str, port: int, proof: Any) -> bool:
    if len(secret) < MIN_SECRET or not isinstance(proof, str):
        return False
    want = prove(secret, node_id, nonce, host, port)
    return hmac.compare_digest(want.encode(), proof.encode())
