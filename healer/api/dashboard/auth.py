"""Who may read the dashboard and who may act on it.

- With ``api.token`` set, every page needs a session: the login form takes the token and sets
  an HttpOnly, SameSite=Strict cookie (``Secure`` when the page came over https) naming a
  server-side session record (``sessions``: logout and "end session" revoke it at once, also
  across restarts; changing the token ends every session). A script may read pages with
  ``Authorization: Bearer <token>`` instead.
- Without a token, pages are readable only while healer is bound to loopback (the guard keeps
  foreign Host names and Origins out), and there are no actions: nobody can log in.
- Every action is a POST form carrying a CSRF token: an HMAC of the session cookie, so it
  cannot be read or made by another origin (the guard checks Origin as well).

Wrong logins and wrong bearer tokens slow down the client address that sent them, and only
it (``healer.api.throttle``: growing delays, 429 with ``Retry-After``): a flood of guesses
from one address never locks the operator out from another. The bearer bucket is the API's,
so the token cannot be guessed through the pages faster than through the API.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from starlette.requests import Request

from healer.api.dashboard.sessions import Sessions
from healer.api.http import HTTPError
from healer.api.throttle import Throttle, client_key, retry_after_header
from healer.core.names import is_loopback_host

COOKIE = "healer_session"

NONE, READ, ACT = 0, 1, 2  # what a request may do


@dataclass
class DashboardAuth:
    token: str
    bind_host: str
    sessions: Sessions
    bearer: Throttle  # the API's bucket: one count of wrong tokens, pages or API
    login: Throttle

    @property
    def _key(self) -> bytes:
        # A key of its own, so a CSRF token is never a value the API would take as a token.
        return hashlib.sha256(b"healer-dashboard-csrf\0" + self.token.encode()).digest()

    def _mac(self, *parts: str) -> str:
        return hmac.new(self._key, "|".join(parts).encode(), hashlib.sha256).hexdigest()

    # -- sessions ------------------------------------------------------------------------

    @property
    def can_log_in(self) -> bool:
        return bool(self.token)

    def check_token(self, given: str) -> bool:
        return bool(self.token) and hmac.compare_digest(given.strip().encode(),
                                                        self.token.encode())

    def csrf_token(self, session: str) -> str:
        return self._mac("csrf", session)

    def csrf_ok(self, session: str, given: str) -> bool:
        return bool(given and session) and hmac.compare_digest(given, self.csrf_token(session))

    # -- requests ------------------------------------------------------------------------

    def session_id(self, request: Request) -> str:
        """The id of the live session ``request``'s cookie names, or ""; asked once a
        request (the answer is kept on ``request.state``)."""
        cached = getattr(request.state, "dashboard_session", None)
        if cached is None:
            value = request.cookies.get(COOKIE, "")
            cached = self.sessions.check(value) if self.token and value else ""
            request.state.dashboard_session = cached
        return str(cached)

    def session_of(self, request: Request) -> str:
        """The cookie value of a live session (what CSRF tokens are made of), or ""."""
        return request.cookies.get(COOKIE, "") if self.session_id(request) else ""

    def access(self, request: Request) -> int:
        """What ``request`` may do; HTTPError 429 while its address waits after wrong bearer
        tokens. Asked once a request."""
        cached = getattr(request.state, "dashboard_access", None)
        if cached is None:
            cached = request.state.dashboard_access = self._access(request)
        return int(cached)

    def _access(self, request: Request) -> int:
        if self.session_id(request):
            return ACT
        if self.token:
            given = request.headers.get("authorization")
            if given is None:
                return NONE
            client = client_key(request.scope)
            wait = self.bearer.retry_after(client)
            if wait > 0:
                raise HTTPError(429, "too many wrong bearer tokens from this address: try "
                                "again later", headers=retry_after_header(wait))
            scheme, _, value = given.partition(" ")
            if scheme.lower() == "bearer" and self.check_token(value):
                return READ  # a script reading pages; actions are for a logged-in person
            self.bearer.failed(client)
            return NONE
        return READ if is_loopback_host(self.bind_host.strip("[]")) else NONE
