"""Dashboard sessions as server-side records, so that logging out really ends one.

1. **The cookie** is ``<id>.<secret>``: ``id`` (16 hex digits) names the record and is what
   the session list and the audit show; ``secret`` (32 random bytes) is stored nowhere — the
   record keeps its HMAC keyed by the API token. A copy of the state dir is therefore no
   cookie, and changing the token ends every session.
2. **The record** lives in the state store (kind ``dashboard-session``): when it was made and
   last seen, when it expires, the client address and User-Agent of the login. Ending a session
   deletes the record, so a logout stays a logout across a restart of ``healer serve``, and a
   session nobody ended survives one.
3. **Logging in** makes a new record every time (the old one a browser presents is ended:
   no session fixation); past ``api.max_sessions`` the least recently seen ones end.
4. **Last seen** is written at most once a minute per session and never brings an ended
   session back (a compare-and-set on the record's revision).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from healer.core.store import Record, Store
from healer.errors import ConflictError, StoreError

log = logging.getLogger(__name__)

KIND = "dashboard-session"
TOUCH_S = 60.0  # how stale ``last_seen`` may be before it is written again
MAX_AGENT_CHARS = 200
_COOKIE = re.compile(r"([0-9a-f]{16})\.([0-9a-f]{64})")


@dataclass(frozen=True)
class SessionInfo:
    """What the dashboard shows of a session: never its secret."""

    id: str
    created: float
    last_seen: float
    expires: float
    client: str
    agent: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Sessions:
    """The records of point 2, in ``store``, keyed by ``token`` (point 1)."""

    def __init__(self, store: Store, token: str, *, ttl_s: float = 12 * 3600.0,
                 max_sessions: int = 32, clock: Callable[[], float] = time.time):
        self.store = store
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.clock = clock
        # A key of its own, so a stored MAC is never a value the API would take as a token.
        self._key = hashlib.sha256(b"healer-dashboard-session\0" + token.encode()).digest()

    def _mac(self, sid: str, secret: str) -> str:
        return hmac.new(self._key, f"{sid}|{secret}".encode(), hashlib.sha256).hexdigest()

    def create(self, client: str, agent: str) -> tuple[str, str]:
        """A new session for a login from ``client``: (its id, the cookie value)."""
        now = self.clock()
        sid, secret = secrets.token_hex(8), secrets.token_hex(32)
        self.store.create(KIND, sid, {
            "mac": self._mac(sid, secret), "created": now, "last_seen": now,
            "expires": now + self.ttl_s, "client": client[:100],
            "agent": "".join(c for c in agent if c.isprintable())[:MAX_AGENT_CHARS]})
        self._trim(keep=sid)
        return sid, f"{sid}.{secret}"

    def check(self, cookie: str) -> str:
        """The session id ``cookie`` proves, or "" (unknown, ended, expired, forged)."""
        found = _COOKIE.fullmatch(cookie)
        if found is None:
            return ""
        sid, secret = found.groups()
        rec = self.store.get(KIND, sid)
        if rec is None or not hmac.compare_digest(str(rec.data.get("mac", "")),
                                                  self._mac(sid, secret)):
            return ""
        now = self.clock()
        if now >= float(rec.data.get("expires", 0)):
            self.end(sid)
            return ""
        if now - float(rec.data.get("last_seen", 0)) >= TOUCH_S:
            self._touch(rec, now)
        return sid

    def end(self, sid: str) -> bool:
        """End session ``sid``; whether there was one."""
        if not re.fullmatch(r"[0-9a-f]{16}", sid):
            return False
        return self.store.delete(KIND, sid)

    def list(self) -> list[SessionInfo]:
        """The sessions that have not ended, most recently seen first."""
        now = self.clock()
        out: list[SessionInfo] = []
        for rec in self.store.list(KIND):
            d = rec.data
            if now >= float(d.get("expires", 0)):
                self.end(rec.key)
                continue
            out.append(SessionInfo(id=rec.key, created=float(d.get("created", 0)),
                                   last_seen=float(d.get("last_seen", 0)),
                                   expires=float(d.get("expires", 0)),
                                   client=str(d.get("client", "")), agent=str(d.get("agent", ""))))
        return sorted(out, key=lambda s: s.last_seen, reverse=True)

    def _touch(self, rec: Record, now: float) -> None:
        try:
            self.store.put(KIND, rec.key, {**rec.data, "last_seen": now},
                           expected_revision=rec.revision, durable=False)
        except ConflictError:
            pass  # ended meanwhile (must stay ended) or touched by another request
        except StoreError as exc:
            log.warning("could not note that session %s was seen: %s", rec.key, exc)

    def _trim(self, *, keep: str) -> None:
        live = [s for s in self.list() if s.id != keep]
        for old in live[self.max_sessions - 1:]:
            self.end(old.id)
