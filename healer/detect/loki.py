"""Loki as a log source: ``query_range`` backfill over HTTP and live ``tail`` over WebSocket.

Wire format (Loki HTTP API v1):

- ``GET /loki/api/v1/query_range?query=…&start=<ns>&end=<ns>&limit=N&direction=forward``
  (start inclusive, end exclusive) →
  ``{"status":"success","data":{"resultType":"streams","result":[{"stream":{labels},
  "values":[["<ns epoch>","<line>"], …]}]}}``. A server caps ``limit`` (5000 by default), so
  healer pages: the next page starts at the last timestamp seen (inclusive) and entries already
  seen at exactly that nanosecond are skipped.
- ``GET /loki/api/v1/tail?query=…&start=<ns>&limit=N`` upgraded to a WebSocket; each message is
  ``{"streams":[…same shape…],"dropped_entries":[{"labels":{…},"timestamp":"<ns>"}]}``.

Each entry becomes an ``Event("entry")`` whose source is the stream's labels in LogQL form, so
every pod keeps its own line numbers, start time and labels on its alerts.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from healer.detect.sources import Event
from healer.errors import UnavailableError, UsageError

PAGE_LIMIT = 5000  # Loki's default max_entries_limit_per_query


@dataclass(frozen=True)
class Entry:
    ts_ns: int
    line: str
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def source(self) -> str:
        inner = ",".join(f'{k}="{v}"' for k, v in sorted(self.labels.items()))
        return "loki:{" + inner + "}"

    def event(self) -> Event:
        return Event("entry", self.source, self.line.encode("utf-8", "surrogateescape"),
                     ts=self.ts_ns / 1e9, labels=dict(self.labels))


def _check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"--loki expects an http(s) URL such as http://127.0.0.1:3100, got "
                         f"{url!r}")
    return url.rstrip("/")


def parse_streams(doc: Any) -> list[Entry]:
    """Entries of a ``streams`` result (query_range ``data.result`` or a tail message)."""
    out: list[Entry] = []
    for stream in doc or ():
        labels = {str(k): str(v) for k, v in (stream.get("stream") or {}).items()}
        for value in stream.get("values") or ():
            if len(value) >= 2:
                out.append(Entry(int(value[0]), str(value[1]), labels))
    out.sort(key=lambda e: e.ts_ns)
    return out


class LokiSource:
    """Backfill (``query_range`` from ``since``) and, if ``follow``, ``tail`` after it."""

    def __init__(self, url: str, query: str, *, since: float | None = None,
                 until: float | None = None, follow: bool = False,
                 headers: Mapping[str, str] | None = None, timeout_s: float = 10.0,
                 page_limit: int = PAGE_LIMIT):
        if not query.strip():
            raise UsageError("--query needs a LogQL selector such as '{namespace=\"cto\"}'")
        self.url = _check_url(url)
        self.query = query
        self.since = since if since is not None else time.time() - 3600
        self.until = until
        self.follow = follow
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self.page_limit = page_limit
        self.last_ns = int(self.since * 1e9)
        self.dropped = 0  # entries Loki said it dropped from the tail (it could not keep up)

    def query_range(self, start_ns: int, end_ns: int) -> Iterator[Entry]:
        """Every entry in ``[start_ns, end_ns)``, oldest first, page by page."""
        import httpx

        seen_at_last: set[tuple[str, str]] = set()
        limit = self.page_limit
        with httpx.Client(timeout=self.timeout_s, headers=self.headers) as client:
            while True:
                entries = self._page(client, start_ns, end_ns, limit)
                fresh = [e for e in entries
                         if not (e.ts_ns == start_ns and (e.source, e.line) in seen_at_last)]
                yield from fresh
                if len(entries) < limit:
                    return
                if not fresh:
                    # A whole page at one nanosecond, all seen: ask for more at once, and past
                    # Loki's cap give up on that nanosecond rather than loop forever.
                    if limit < PAGE_LIMIT:
                        limit = min(PAGE_LIMIT, limit * 4)
                        continue
                    start_ns, seen_at_last = start_ns + 1, set()
                    continue
                limit = self.page_limit
                if entries[-1].ts_ns != start_ns:
                    seen_at_last = set()
                start_ns = entries[-1].ts_ns
                seen_at_last |= {(e.source, e.line) for e in entries if e.ts_ns == start_ns}

    def _page(self, client: Any, start_ns: int, end_ns: int, limit: int) -> list[Entry]:
        import httpx

        params = {"query": self.query, "start": str(start_ns), "end": str(end_ns),
                  "limit": str(limit), "direction": "forward"}
        try:
            resp = client.get(self.url + "/loki/api/v1/query_range", params=params)
        except httpx.HTTPError as exc:
            raise UnavailableError(f"Loki at {self.url} unreachable: {exc}") from None
        if resp.status_code != 200:
            raise UnavailableError(f"Loki query_range answered {resp.status_code}: "
                                   f"{resp.text[:200]}")
        try:
            return parse_streams(resp.json()["data"]["result"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UnavailableError(f"Loki query_range answer not understood: {exc}") from None

    def tail(self, start_ns: int, stop: threading.Event) -> Iterator[Entry]:
        """Live entries from ``start_ns`` on, until ``stop`` is set."""
        from websockets.exceptions import WebSocketException
        from websockets.sync.client import connect

        parts = urlsplit(self.url)
        scheme = "wss" if parts.scheme == "https" else "ws"
        query = urlencode({"query": self.query, "start": str(start_ns), "limit": "5000"})
        ws_url = urlunsplit((scheme, parts.netloc, parts.path + "/loki/api/v1/tail", query, ""))
        try:
            ws = connect(ws_url, additional_headers=self.headers, open_timeout=self.timeout_s)
        except (OSError, WebSocketException) as exc:
            raise UnavailableError(f"Loki tail at {self.url} unreachable: {exc}") from None
        with ws:
            while not stop.is_set():
                try:
                    message = ws.recv(timeout=0.2)
                except TimeoutError:
                    continue
                except WebSocketException:
                    return
                try:
                    doc = json.loads(message)
                except ValueError:
                    continue
                self.dropped += len(doc.get("dropped_entries") or ())
                yield from parse_streams(doc.get("streams"))

    def events(self, stop: threading.Event) -> Iterator[Event]:
        """The source as events for ``Follower``: backfill, then (if following) the tail."""
        end = self.until if self.until is not None else time.time()
        for entry in self.query_range(int(self.since * 1e9), int(end * 1e9)):
            self.last_ns = max(self.last_ns, entry.ts_ns)
            yield entry.event()
            if stop.is_set():
                return
        if self.follow:  # the backfill covered [since, end); the tail takes over at end
            for entry in self.tail(int(end * 1e9), stop):
                self.last_ns = max(self.last_ns, entry.ts_ns)
                yield entry.event()
