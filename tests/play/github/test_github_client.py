"""The GitHub client's rate-limit arithmetic, with a mock transport and a hand-moved clock."""

from __future__ import annotations

import httpx
import pytest

from healer.errors import GitHubError, GitHubRateLimitError
from healer.play.github.client import GitHubClient


def client(handler: httpx.MockTransport, now: list[float], **kw: object) -> GitHubClient:
    return GitHubClient(api_url="http://127.0.0.1:1", token="t", clock=lambda: now[0],
                        transport=handler, **kw)  # type: ignore[arg-type]


def answer(status: int, remaining: int, limit: int = 5000, reset: int = 2000,
           **headers: str) -> httpx.MockTransport:
    return httpx.MockTransport(lambda req: httpx.Response(status, json={"message": "no"} if
                                                          status >= 400 else [], headers={
        "x-ratelimit-remaining": str(remaining), "x-ratelimit-limit": str(limit),
        "x-ratelimit-reset": str(reset), **headers}))


class TestClient:
    async def test_an_anonymous_budget_is_not_held_by_the_default_floor(self) -> None:
        """60 requests an hour: the floor is a tenth of the limit, not min_remaining."""
        now = [1000.0]
        c = client(answer(200, 20, limit=60), now, min_remaining=100)
        await c.get("/x")
        assert c.held() == 0.0
        c = client(answer(200, 5, limit=60), now, min_remaining=100)
        await c.get("/x")
        assert c.held() == 2000.0

    async def test_a_plain_403_is_a_refusal_not_a_limit(self) -> None:
        now = [1000.0]
        c = client(answer(403, 4000), now)
        with pytest.raises(GitHubError) as err:
            await c.get("/repos/a/b/pulls")
        assert not isinstance(err.value, GitHubRateLimitError) and err.value.status == 403
        assert c.held() == 0.0

    async def test_429_without_headers_backs_off_and_holds(self) -> None:
        now = [1000.0]
        c = client(httpx.MockTransport(lambda req: httpx.Response(429)), now)
        with pytest.raises(GitHubRateLimitError) as err:
            await c.get("/x")
        assert err.value.secondary and err.value.until == 1060.0
        with pytest.raises(GitHubRateLimitError):
            await c.get("/x")  # held: not sent
        assert c.sent == 1

    async def test_the_token_is_not_in_errors(self) -> None:
        def boom(req: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError("refused", request=req)

        c = GitHubClient(api_url="http://127.0.0.1:1", token="ghp_secretValue123",
                         transport=httpx.MockTransport(boom))
        with pytest.raises(GitHubError) as err:
            await c.get("/user")
        assert "ghp_secretValue123" not in str(err.value) + repr(c)
