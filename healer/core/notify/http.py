"""One HTTP POST for the HTTP targets: a timeout always, no redirects followed, and an error
that names the receiver's host only (``redact_url``), never its secret-bearing URL."""

from __future__ import annotations

import httpx

from healer.core.notify.base import Delivery, redact_url


async def post(url: str, *, timeout: float, json: object | None = None,
               content: bytes | None = None,
               headers: dict[str, str] | None = None) -> httpx.Response | Delivery:
    """The response, or a retryable ``Delivery`` when the receiver could not be reached."""
    try:
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            return await client.post(url, json=json, content=content, headers=headers)
    except httpx.HTTPError as exc:
        return Delivery(False, retryable=True,
                        detail=f"{type(exc).__name__} posting to {redact_url(url)}")
