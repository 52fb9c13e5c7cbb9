"""What every request passes before a handler runs: a browser on this machine is a client too.

The checks, in order, each answered before the body is read:

1. **Host** — a loopback name or address, the bound address, ``api.public_url``'s host or an
   ``api.allowed_hosts`` entry; anything else is 421 (a DNS-rebinding page reaches 127.0.0.1
   under its own name).
2. **Origin** — when a browser sends one, it must be healer's own (the request's scheme and
   Host, or ``api.public_url``'s) or an ``api.allowed_origins`` entry; anything else, ``null``
   included, is 403. A browser that sends no Origin on a mutating request but says
   ``Sec-Fetch-Site: cross-site`` or ``same-site`` is refused the same way.
3. **Token** — with ``api.token`` set every route needs ``Authorization: Bearer <token>``
   (scheme in any case), except the signed routes (webhooks) and, as configured, ``/health``,
   ``/ready`` and ``/metrics``. A client address that sent too many wrong tokens waits
   (``healer.api.throttle``): 429 with ``Retry-After``, its token not even looked at.
4. **Content type** — a mutating request with a body must say ``application/json`` (or a
   ``+json`` type): ``text/plain``, forms and multipart are what a page can send cross-site
   without a preflight, so they get 415. Signed routes keep their senders' types.
5. **Size and time** — a body larger than ``api.max_body_bytes`` is 413, one that takes longer
   than ``api.body_timeout_s`` to arrive is 408.

The dashboard (``/`` and ``/ui/…``, ``healer.api.dashboard``) passes checks 1, 2 and 5 like
any route and differs in two: it authenticates itself (the API token as a bearer header, or
the HttpOnly session cookie its login form sets, plus a CSRF token on every action), and its
actions are HTML forms, so a mutating request there must be
``application/x-www-form-urlencoded`` — made safe by the Origin check, the SameSite=Strict
cookie and the CSRF token, not by the content type.

Slack's interactivity route (``/api/v1/slack/interactions``, that exact path, POST only)
is exempt from the token like a signed route — its handler checks Slack's signature — and
its body must be ``application/x-www-form-urlencoded``, the form Slack posts.

The Sentry ingest (``/api/<project id>/envelope/`` and ``/store/``) is keyed like a signed
route, and differs in three ways, on those two paths only: browser pages of
``ingest.cors_origins`` may call it; its bodies may be ``application/x-sentry-envelope``,
``application/json``, ``text/plain`` (browser SDKs' beacons) or untyped (Node's transport);
and its size limit is ``ingest.max_body_bytes``.

Pure ASGI, so the hot read paths pay a few dictionary look-ups.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import re
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from healer.api.http import HTTPError, error_response
from healer.api.throttle import Throttle, client_key, retry_after_header
from healer.core.names import is_loopback_host

log = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Routes whose every request is authenticated by its own signature or key: they keep the
# content types their senders use and are exempt from the API token.
SIGNED_PREFIXES = ("/api/v1/webhooks/",)
# Slack's interactivity requests (healer.api.routes.slack_actions): signed by Slack, sent as a
# form. Exactly these paths: nothing under or beside them gets the exemption.
SLACK_PATHS = frozenset({"/api/v1/slack/interactions"})
INGEST_PATH = re.compile(r"/api/(?:\d{1,20}|\{project_id(?::int)?\})/(?:envelope|store)/?")
INGEST_TYPES = frozenset({b"application/x-sentry-envelope", b"application/json", b"text/plain",
                          b""})
# The HTML dashboard: its own login (cookie) and CSRF tokens; its forms post url-encoded.
DASHBOARD_PREFIX = "/ui/"
FORM_TYPE = b"application/x-www-form-urlencoded"
HOST_VERDICTS = 256  # Host header values whose verdict a guard remembers
_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "*"})  # noqa: S104 - names, not a bind


@dataclass(frozen=True)
class GuardPolicy:
    """What the guard accepts; built from ``api`` settings by ``from_settings``."""

    bind_host: str = "127.0.0.1"
    token: str = ""
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    public_health: bool = True
    public_metrics: bool = False
    max_body: int = 1 << 20
    body_timeout_s: float = 30.0
    signed_prefixes: tuple[str, ...] = SIGNED_PREFIXES
    ingest_origins: tuple[str, ...] = ()
    ingest_max_body: int = 1 << 20

    @classmethod
    def from_settings(cls, api: object, ingest: object = None) -> GuardPolicy:
        # The address healer tells people to use (api.public_url) is one it answers on.
        public = urlsplit(str(getattr(api, "public_url", "") or ""))
        own_host = (public.hostname,) if public.hostname else ()
        own_origin = (_origin_key(f"{public.scheme}://{public.netloc}"),) if own_host else ()
        return cls(
            ingest_origins=tuple(_origin_key(o) for o in getattr(ingest, "cors_origins", ())),
            ingest_max_body=getattr(ingest, "max_body_bytes", 1 << 20),
            bind_host=getattr(api, "host", "127.0.0.1"),
            token=getattr(api, "token", ""),
            allowed_hosts=tuple(h.lower().rstrip(".") for h in (
                *getattr(api, "allowed_hosts", ()), *own_host)),
            allowed_origins=tuple(_origin_key(o) for o in (
                *getattr(api, "allowed_origins", ()), *own_origin)),
            public_health=getattr(api, "public_health", True),
            public_metrics=getattr(api, "public_metrics", False),
            max_body=getattr(api, "max_body_bytes", 1 << 20),
            body_timeout_s=getattr(api, "body_timeout_s", 30.0),
        )

    @cached_property
    def _own_names(self) -> frozenset[str]:
        names = {self.bind_host.lower().strip("[]")}
        if self.bind_host in _WILDCARD_BINDS:
            # Bound everywhere: this machine's own names are its addresses too.
            names.update({socket.gethostname().lower(), socket.getfqdn().lower()})
        return frozenset(n for n in names if n)

    def host_allowed(self, host: str) -> bool:
        """``host`` is the Host header's name part (no port), lower case."""
        if is_loopback_host(host) or host in self._own_names:
            return True
        if self.bind_host in _WILDCARD_BINDS and _is_ip(host):
            # An address literal cannot be a rebinding attack (that needs a name the
            # attacker's DNS controls), and a wildcard bind serves every local address.
            return True
        for allowed in self.allowed_hosts:
            if allowed == "*" or host == allowed or (
                    allowed.startswith(".") and (host.endswith(allowed) or host == allowed[1:])):
                return True
        return False

    def public(self, method: str, path: str) -> bool:
        """Routes that need no token."""
        if path.startswith(self.signed_prefixes) or is_ingest(path) or \
                (method == "POST" and path in SLACK_PATHS):
            return True
        if method in SAFE_METHODS:
            if path in ("/health", "/ready"):
                return self.public_health
            if path == "/metrics":
                return self.public_metrics
            if path == "/openapi.json":
                return True
        return False


class GuardMiddleware:
    """The checks of this module's docstring, as ASGI middleware."""

    def __init__(self, app: ASGIApp, *, policy: GuardPolicy, throttle: Throttle | None = None):
        self.app = app
        self.policy = policy
        self.throttle = throttle if throttle is not None else Throttle()
        self._token = policy.token.encode()
        # Host header value -> served here? The policy is frozen, so a verdict never changes;
        # clients send the same few values, and parsing one (an address literal included)
        # cost more than the rest of the checks. Bounded: past the limit, nothing is added.
        self._hosts: dict[bytes, bool] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ingest = is_ingest(scope["path"])
        refusal = self._refusal(scope, ingest)
        if refusal is not None:
            code, reason, extra = refusal
            await error_response(code, reason, headers=extra)(scope, receive, send)
            return
        if scope["method"] not in SAFE_METHODS:
            receive = self._bounded(receive, self.policy.ingest_max_body
                                    if ingest else self.policy.max_body)
        await self.app(scope, receive, send)

    def _host_served(self, header: bytes) -> bool:
        served = self._hosts.get(header)
        if served is None:
            host = _host_name(header)
            served = host is not None and self.policy.host_allowed(host)
            if len(self._hosts) < HOST_VERDICTS:
                self._hosts[header] = served
        return served

    def _refusal(self, scope: Scope, ingest: bool) -> tuple[int, str, dict[str, str]] | None:
        p = self.policy
        method: str = scope["method"]
        path: str = scope["path"]
        headers = _headers(scope["headers"])

        host_header = headers.get(b"host")
        if host_header is None:
            return 400, "missing Host header", {}
        if not self._host_served(host_header):
            return (421, "Host header not served here (allowed: loopback, the bound address "
                    "and api.allowed_hosts)", {})

        origin = headers.get(b"origin")
        if origin is not None:
            if not self._origin_allowed(origin, scope, host_header, ingest):
                return 403, "cross-origin request refused (not in api.allowed_origins)", {}
        elif method not in SAFE_METHODS and headers.get(b"sec-fetch-site") in (
                b"cross-site", b"same-site"):
            return 403, "cross-site request refused", {}

        dashboard = is_dashboard(path)
        if self._token and not dashboard and not p.public(method, path):
            refusal = self._token_refusal(scope, headers.get(b"authorization"))
            if refusal is not None:
                return refusal
        if method in SAFE_METHODS:
            return None
        length = headers.get(b"content-length")
        limit = p.ingest_max_body if ingest else p.max_body
        if length is not None:
            if not length.isdigit():
                return 400, "bad Content-Length", {}
            if int(length) > limit:
                return 413, f"body larger than {limit} bytes", {}
        if dashboard:
            media = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
            if media != FORM_TYPE:
                return (415, "expected Content-Type: application/x-www-form-urlencoded (a "
                        f"dashboard form), got {media.decode('latin-1') or 'none'}", {})
        elif ingest:
            media = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
            if media not in INGEST_TYPES:
                return (415, "expected Content-Type: application/x-sentry-envelope, "
                        f"application/json or text/plain, got {media.decode('latin-1')}", {})
        elif path in SLACK_PATHS:
            has_body = (length is not None and int(length) > 0) or b"transfer-encoding" in headers
            media = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
            if (media or has_body) and media != FORM_TYPE:
                return (415, "expected Content-Type: application/x-www-form-urlencoded (a "
                        f"Slack interaction), got {media.decode('latin-1') or 'none'}", {})
        elif not path.startswith(p.signed_prefixes):
            has_body = (length is not None and int(length) > 0) or b"transfer-encoding" in headers
            ctype = headers.get(b"content-type")
            if ctype is not None or has_body:
                media = (ctype or b"").split(b";", 1)[0].strip().lower()
                if media != b"application/json" and not (
                        media.startswith(b"application/") and media.endswith(b"+json")):
                    shown = media.decode("latin-1") or "none"
                    return (415, f"expected Content-Type: application/json, got {shown}", {})
        return None

    def _origin_allowed(self, origin: bytes, scope: Scope, host_header: bytes,
                        ingest: bool = False) -> bool:
        try:
            value = origin.decode("ascii").strip().lower()
        except UnicodeDecodeError:
            return False
        if value == "null":
            return False
        scheme = scope.get("scheme", "http")
        own = _origin_key(f"{scheme}://{host_header.decode('latin-1')}")
        key = _origin_key(value)
        return key == own or key in self.policy.allowed_origins or (
            ingest and key in self.policy.ingest_origins)

    def _token_refusal(self, scope: Scope,
                       given: bytes | None) -> tuple[int, str, dict[str, str]] | None:
        client = client_key(scope)
        wait = self.throttle.retry_after(client)
        if wait > 0:
            return (429, "too many wrong bearer tokens from this address: try again later",
                    retry_after_header(wait))
        if given is not None and self._bearer_ok(given):
            return None
        if given is not None:  # a guess; a request without any token guesses nothing
            wait = self.throttle.failed(client)
            if wait > 0:
                log.warning("wrong bearer tokens from %s: it waits %.3g s", client, wait)
        return 401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"}

    def _bearer_ok(self, given: bytes) -> bool:
        scheme, _, value = given.strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self._token)

    def _bounded(self, receive: Receive, limit: int) -> Receive:
        """The body, capped in size and in time."""
        deadline = time.monotonic() + self.policy.body_timeout_s
        seen = 0

        async def wrapped() -> Message:
            nonlocal seen
            left = deadline - time.monotonic()
            try:
                # asyncio.timeout, not wait_for: no task per receive (wait_for's cost
                # was a tenth of a session start's time on the event loop).
                async with asyncio.timeout(max(left, 0.001)):
                    message = await receive()
            except TimeoutError:
                raise HTTPError(408, f"the body did not arrive within "
                                     f"{self.policy.body_timeout_s:g} s") from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise HTTPError(413, f"body larger than {limit} bytes")
            return message

        return wrapped


def is_ingest(path: str) -> bool:
    """Whether ``path`` is one of the Sentry ingest routes."""
    return INGEST_PATH.fullmatch(path) is not None


def is_dashboard(path: str) -> bool:
    """Whether ``path`` is the HTML dashboard's (it checks its own login and CSRF tokens)."""
    return path == "/" or path.startswith(DASHBOARD_PREFIX)


def _headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    # A repeated Host or Origin is ambiguous: the first one wins everywhere in healer.
    out: dict[bytes, bytes] = {}
    for k, v in raw:
        out.setdefault(k, v)
    return out


def _host_name(header: bytes) -> str | None:
    """The name part of a Host header, lower case; None if it is not a plausible host."""
    try:
        value = header.decode("ascii").strip().lower()
    except UnicodeDecodeError:
        return None
    if not value or any(c in value for c in "/\\@ ?#"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        return name if _is_ip(name) else None
    name, sep, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    if sep and not port.isdigit():
        return None
    return name.rstrip(".") or None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _origin_key(origin: str) -> str:
    """``scheme://host:port`` with the default port dropped, lower case."""
    origin = origin.strip().lower().rstrip("/")
    scheme, sep, rest = origin.partition("://")
    if not sep:
        return origin
    default = {"http": ":80", "https": ":443"}.get(scheme)
    if default and rest.endswith(default):
        rest = rest[: -len(default)]
    return f"{scheme}://{rest}"
