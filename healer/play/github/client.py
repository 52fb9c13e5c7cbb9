"""A careful GitHub REST client: conditional requests and rate limits, never hammering.

* **Conditional requests.** The caller passes the ETag it stored for a URL; GitHub answers
  ``304 Not Modified`` when nothing changed, and a 304 to an authenticated request does not
  count against the rate limit — so a quiet PR costs nothing to watch.
* **The primary limit.** Every answer's ``X-RateLimit-Remaining`` / ``X-RateLimit-Reset`` is
  kept. At 0 (or below ``min_remaining``, leaving the forge its share of the same token) no
  request is sent until the reset.
* **Secondary limits.** A 403/429 with ``Retry-After`` waits that long; one that only says
  "secondary rate limit" waits ``backoff_s``, doubling while they keep coming
  (``backoff_cap_s``). While held, ``get`` raises ``GitHubRateLimitError`` without sending.

The token is sent in ``Authorization`` only; it is in no message, log line or repr.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from healer import __version__
from healer.core.names import safe_name
from healer.errors import GitHubError, GitHubRateLimitError, UnsafeNameError, UsageError

# httpx is imported where a client is made: `healer status` reads the watcher's records
# through this module's helpers and sends nothing.
if TYPE_CHECKING:
    import httpx

API_VERSION = "2022-11-28"
MAX_RESPONSE_BYTES = 8 << 20  # one page of 100 items is far smaller; a runaway body is refused


def headers(token: str) -> dict[str, str]:
    """The headers of every request healer sends to GitHub."""
    out = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION,
           "User-Agent": f"healer/{__version__}"}
    if token:
        out["Authorization"] = f"Bearer {token}"
    return out


def split_repo(full_name: object) -> tuple[str, str]:
    """``owner/name`` as two validated path segments (``UnsafeNameError`` otherwise)."""
    if not isinstance(full_name, str) or full_name.count("/") != 1:
        raise UnsafeNameError(str(full_name), "GitHub repository", "expected owner/name")
    owner, name = full_name.split("/")
    return safe_name(owner, "GitHub owner"), safe_name(name, "GitHub repository")


def check_api_url(url: str) -> str:
    if urlsplit(url).scheme not in ("http", "https"):
        raise UsageError(f"github.api_url {url!r} is not an http(s) URL")
    return url.rstrip("/")


@dataclass(frozen=True)
class RateLimit:
    """What GitHub said about the primary limit in its latest answer."""

    limit: int
    remaining: int
    reset: float
    resource: str = "core"


@dataclass(frozen=True)
class Reply:
    status: int
    data: Any
    etag: str
    headers: Mapping[str, str]

    @property
    def not_modified(self) -> bool:
        return self.status == 304


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class GitHubClient:
    """GETs against one GitHub API with one token (``transport`` for tests)."""

    def __init__(self, *, api_url: str, token: str = "", timeout: float = 15.0,
                 clock: Callable[[], float] = time.time, min_remaining: int = 0,
                 backoff_s: float = 60.0, backoff_cap_s: float = 900.0,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.api_url = check_api_url(api_url)
        self.clock = clock
        self.min_remaining = min_remaining
        self.backoff_s = backoff_s
        self.backoff_cap_s = backoff_cap_s
        self.rate: RateLimit | None = None
        self.blocked_until = 0.0
        self.blocked_reason = ""
        self.sent = 0  # requests that reached GitHub (for status and tests)
        self._secondary_streak = 0
        import httpx

        self._http = httpx.AsyncClient(base_url=self.api_url, headers=headers(token),
                                       timeout=timeout, follow_redirects=False,
                                       transport=transport)

    def __repr__(self) -> str:
        return f"GitHubClient({self.api_url!r})"

    def held(self) -> float:
        """Until when requests are held (0 when they are not)."""
        return self.blocked_until if self.clock() < self.blocked_until else 0.0

    async def get(self, path: str, *, params: Mapping[str, str | int] | None = None,
                  etag: str = "") -> Reply:
        """GET ``path`` (relative to the API root); ``etag`` makes it conditional."""
        now = self.clock()
        if now < self.blocked_until:
            raise GitHubRateLimitError(
                f"GitHub requests held for {self.blocked_until - now:.0f} s "
                f"({self.blocked_reason})", until=self.blocked_until, path=path,
                secondary=self.blocked_reason.startswith("secondary"))
        extra = {"If-None-Match": etag} if etag else {}
        import httpx

        try:
            resp = await self._http.get(path, params=params, headers=extra)
        except httpx.HTTPError as exc:
            raise GitHubError(f"GitHub GET {path}: {type(exc).__name__}", path=path) from None
        self.sent += 1
        self._note_rate(resp.headers)
        if resp.status_code in (403, 429):
            self._limited(resp, path)
        if resp.status_code == 304:
            self._secondary_streak = 0
            return Reply(304, None, etag, resp.headers)
        if resp.status_code >= 300:
            raise GitHubError(f"GitHub GET {path}: HTTP {resp.status_code} "
                              f"{_message(resp)}".rstrip(), status=resp.status_code, path=path)
        if len(resp.content) > MAX_RESPONSE_BYTES:
            raise GitHubError(f"GitHub GET {path}: answer larger than {MAX_RESPONSE_BYTES} "
                              "bytes", status=resp.status_code, path=path)
        self._secondary_streak = 0
        try:
            data = resp.json() if resp.content else None
        except ValueError:
            raise GitHubError(f"GitHub GET {path}: the answer is not JSON",
                              status=resp.status_code, path=path) from None
        return Reply(resp.status_code, data, resp.headers.get("etag", ""), resp.headers)

    def _note_rate(self, h: Mapping[str, str]) -> None:
        remaining, reset = _int(h.get("x-ratelimit-remaining")), _int(h.get("x-ratelimit-reset"))
        if remaining is None or reset is None:
            return
        self.rate = RateLimit(_int(h.get("x-ratelimit-limit")) or 0, remaining, float(reset),
                              h.get("x-ratelimit-resource", "core"))
        limit = self.rate.limit
        # A floor of a tenth of the limit at most: an anonymous 60/hour still polls.
        floor = min(self.min_remaining, limit // 10) if limit else self.min_remaining
        if remaining <= floor and reset > self.clock():
            # Polling can wait for the reset; the forge's issues and fix PRs cannot.
            self._hold(float(reset), f"{remaining} requests left until the reset")

    def _limited(self, resp: httpx.Response, path: str) -> None:
        """Raise if a 403/429 is a rate limit (else it is an ordinary refusal)."""
        now = self.clock()
        h = resp.headers
        retry_after = _int(h.get("retry-after"))
        message = _message(resp)
        secondary = "secondary rate limit" in message.lower() or "abuse" in message.lower()
        if retry_after is not None:
            until, why = now + max(1, retry_after), f"secondary limit: Retry-After {retry_after}"
            secondary = True
        elif h.get("x-ratelimit-remaining") == "0" and (_int(h.get("x-ratelimit-reset")) or 0):
            until, why = float(_int(h.get("x-ratelimit-reset")) or now), "primary limit spent"
            secondary = False
        elif secondary or resp.status_code == 429:
            wait = min(self.backoff_cap_s, self.backoff_s * (2 ** self._secondary_streak))
            self._secondary_streak += 1
            until, why, secondary = now + wait, f"secondary limit: backing off {wait:.0f} s", True
        else:
            return
        self._hold(max(until, now + 1), why)
        raise GitHubRateLimitError(f"GitHub GET {path}: rate limited ({why})",
                                   until=self.blocked_until, secondary=secondary,
                                   status=resp.status_code, path=path)

    def _hold(self, until: float, why: str) -> None:
        if until > self.blocked_until:
            self.blocked_until, self.blocked_reason = until, why

    async def close(self) -> None:
        await self._http.aclose()


def _message(resp: httpx.Response) -> str:
    try:
        data = resp.json()
    except ValueError:
        return ""
    return str(data.get("message", ""))[:200] if isinstance(data, dict) else ""
