"""Who may read the dashboard and who may act on it.

- With ``api.token`` set, every page needs a session: the login form takes the token and sets
  an HttpOnly, SameSite=Strict cookie (``Secure`` when the page came over https) holding an
  expiry and an HMAC keyed by the token — nothing to store, and changing the token ends every
  session. A script may read pages with ``Authorization: Bearer <token>`` instead.
- Without a token, pages are readable only while healer is bound to loopback (the guard keeps
  foreign Host names and Origins out), and there are no actions: nobody can log in.
- Every action is a POST form carrying a CSRF token: an HMAC of the session cookie, so it
  cannot be read or made by another origin (the guard checks Origin as well).

Failed logins are limited per process (``MAX_FAILURES`` within ``FAILURE_WINDOW_S``), so the
token cannot be guessed through the form faster than through the API.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request

from healer.core.names import is_loopback_host

COOKIE = "healer_session"
SESSION_S = 12 * 3600
MAX_FAILURES = 10
FAILURE_WINDOW_S = 60.0

NONE, READ, ACT = 0, 1, 2  # what a request may do


@dataclass
class DashboardAuth:
    token: str
    bind_host: str
    clock: Callable[[], float] = time.time
    _failures: deque[float] = field(default_factory=deque)

    @property
    def _key(self) -> bytes:
        # A key of its own, so a cookie's MAC is never a value the API would take as a token.
        return hashlib.sha256(b"healer-dashboard-session\0" + self.token.encode()).digest()

    def _mac(self, *parts: str) -> str:
        return hmac.new(self._key, "|".join(parts).encode(), hashlib.sha256).hexdigest()

    # -- sessions ------------------------------------------------------------------------

    @property
    def can_log_in(self) -> bool:
        return bool(self.token)

    def check_token(self, given: str) -> bool:
        return bool(self.token) and hmac.compare_digest(given.strip().encode(),
                                                        self.token.encode())

    def new_session(self) -> str:
        expires = str(int(self.clock()) + SESSION_S)
        nonce = secrets.token_hex(8)
        return f"{expires}.{nonce}.{self._mac('session', expires, nonce)}"

    def session_ok(self, value: str) -> bool:
        if not self.token or value.count(".") != 2:
            return False
        expires, nonce, mac = value.split(".")
        if not expires.isdigit() or int(expires) < self.clock():
            return False
        return hmac.compare_digest(mac, self._mac("session", expires, nonce))

    def csrf_token(self, session: str) -> str:
        return self._mac("csrf", session)

    def csrf_ok(self, session: str, given: str) -> bool:
        return bool(given) and self.session_ok(session) and hmac.compare_digest(
            given, self.csrf_token(session))

    # -- requests ------------------------------------------------------------------------

    def session_of(self, request: Request) -> str:
        value = request.cookies.get(COOKIE, "")
        return value if self.session_ok(value) else ""

    def access(self, request: Request) -> int:
        if self.session_of(request):
            return ACT
        if self.token:
            scheme, _, value = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() == "bearer" and self.check_token(value):
                return READ  # a script reading pages; actions are for a logged-in person
            return NONE
        return READ if is_loopback_host(self.bind_host.strip("[]")) else NONE

    # -- guessing ------------------------------------------------------------------------

    def locked_out(self) -> bool:
        now = self.clock()
        while self._failures and now - self._failures[0] > FAILURE_WINDOW_S:
            self._failures.popleft()
        return len(self._failures) >= MAX_FAILURES

    def failed(self) -> None:
        self._failures.append(self.clock())
