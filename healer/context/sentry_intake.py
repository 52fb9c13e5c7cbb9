"""The Sentry ingest's state: its keys, its per-key rate, and the queue that files events.

* **Keys** (``KeyRing``): ``ingest.sentry_keys`` (``KEY`` serves every project, ``KEY:ID`` one)
  and the keys ``healer sentry dsn`` made, kept in ``<state>/sentry-keys.json`` (mode 0600)::

      {"projects": {"default": {"id": 1, "key": "3f…"}}}

  Every comparison is constant-time.
* **Rate** (``RateLimiter``): a token bucket per key (``ingest.rate_per_s``,
  ``ingest.rate_burst``); over it the route answers 429 with how long to wait.
* **Queue** (``EventQueue``): the route parses and authenticates, then hands the signals over
  (and answers at once, or once they are filed: **Answer** below); one worker files them,
  folding repeats of one incident that arrived together (within ``LINGER_S``) into one
  signal (its count, its users) so a burst of N events costs a few ledger writes, not N. A
  full queue is 429 too: the SDKs retry later. A batch the store fails to file (a NATS
  server gone, a stream electing a new leader: 503s and timeouts for a few seconds) is filed
  again, with pauses, for up to ``RETRY_FOR_S``; each signal keeps one delivery id across
  those tries, so one that had landed before the error is not counted twice
  (``healer.core.incidents.Signal.delivery``). Meanwhile the queue holds what arrives (up to
  ``ingest.queue_size``).
* **Answer** (``answer_mode``, ``ingest.answer``): ``offer`` hands back a future per request,
  resolved True once the batch(es) holding all its signals were filed and False as soon as
  one was dropped (an error of the input, or ``RETRY_FOR_S`` of store failures). With
  ``filed`` the route awaits it (up to ``ingest.answer_timeout_s``) before answering, so a
  200 means "in the store": the event survives the replica dying right after. The worker
  then does not linger (a request would wait it out for nothing): it files what is queued
  at once, and what arrives during that write is the next batch — under a burst still one
  ledger write per incident per batch, and a lone request waits only its write. A request
  that stops waiting (its bound, its client gone) does not take its signals back: they are
  filed all the same, so a sender that resends after a 503 may be counted twice, but is
  never lost (the ledger keeps counts, not event ids). With ``queued`` (the file store: one
  replica) nobody waits for the future.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from healer.context.ingest import Signal
from healer.core.files import atomic_write_bytes, dumps, read_json
from healer.core.names import is_safe_name
from healer.errors import UsageError

log = logging.getLogger(__name__)

KEYS_FILE = "sentry-keys.json"
BATCH = 500
RECHECK_S = 1.0
LINGER_S = 0.1
RETRY_FOR_S = 60.0  # a batch the store keeps failing is filed again this long, then dropped
RETRY_PAUSES_S = (0.2, 0.5, 1.0, 2.0, 5.0)  # then 5 s between tries
# Errors of the input, not of the store: filing the same batch again would fail the same way.
_FINAL = (UsageError, ValueError, TypeError, KeyError, AttributeError)


def answer_mode(settings: Any) -> Literal["filed", "queued"]:
    """``ingest.answer`` resolved: ``auto`` is ``filed`` on a shared store (several replicas:
    an event only one replica holds in memory dies with it) and ``queued`` on the file store
    (one replica: nothing else could take the event, and the answer stays immediate)."""
    mode = settings.ingest.answer
    if mode == "auto":
        return "queued" if settings.store.backend == "file" else "filed"
    return "filed" if mode == "filed" else "queued"


def keys_path(settings: Any) -> Path:
    return Path(settings.state_path) / KEYS_FILE


@dataclass(frozen=True)
class Key:
    key: str
    project: str = ""  # empty: every project


def _configured(value: object) -> list[Key]:
    items = [value] if isinstance(value, str) else list(value or [])
    out = []
    for item in items:
        for raw in str(item).split(","):
            key, _, project = raw.strip().partition(":")
            if key.strip():
                out.append(Key(key.strip(), project.strip()))
    return out


class KeyRing:
    """The keys the ingest accepts: configured ones and those in the state file (re-read
    when it changes)."""

    def __init__(self, settings: Any):
        self.configured = _configured(settings.ingest.sentry_keys)
        self.path = keys_path(settings)
        self._stored: list[Key] = []
        self._stamp: tuple[int, int] | None = None
        self._looked = -RECHECK_S
        self.clock = time.monotonic

    def _file_keys(self) -> list[Key]:
        try:
            st = self.path.stat()
        except OSError:
            self._stored, self._stamp = [], None
            return []
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            try:
                projects = (read_json(self.path) or {}).get("projects") or {}
                self._stored = [Key(str(p["key"]), str(p["id"])) for p in projects.values()
                                if isinstance(p, dict) and p.get("key")]
            except (OSError, ValueError, AttributeError, KeyError, TypeError) as exc:
                log.warning("%s is unreadable (%s): its keys are not accepted", self.path, exc)
                self._stored = []
            self._stamp = stamp
        return self._stored

    @property
    def keys(self) -> list[Key]:
        return [*self.configured, *self._file_keys()]

    def check(self, key: str, project: str) -> int:
        """200 if ``key`` may send to ``project``, 401 when no key is given or none is set
        up, 403 when it is wrong (or bound to another project).

        The state file is looked at once a second, and again whenever the keys known
        refuse: a stat per request cost more than the check, a key ``healer sentry dsn``
        just made works on its first use, and one taken out of the file stops within a
        second."""
        now = self.clock()
        if key and now - self._looked < RECHECK_S:
            known = [*self.configured, *self._stored]
            if known and self._verdict(known, key, project) == 200:
                return 200
        self._looked = now
        keys = self.keys
        if not key or not keys:
            return 401
        return self._verdict(keys, key, project)

    @staticmethod
    def _verdict(keys: list[Key], key: str, project: str) -> int:
        given = key.encode("utf-8", "replace")
        fits = False
        for k in keys:  # no early exit: the time does not say which key was close
            same = hmac.compare_digest(k.key.encode(), given)
            fits |= same and (not k.project or k.project == project)
        return 200 if fits else 403


def ensure_key(settings: Any, project: str = "default") -> tuple[str, str]:
    """(key, project id) for ``project``: the stored one, or a new one saved (0600)."""
    from filelock import FileLock

    if not is_safe_name(project) or len(project) > 64:
        raise UsageError(f"unusable project name {project!r} (letters, digits, - and _)")
    path = keys_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=10):
        try:
            data = read_json(path)
        except FileNotFoundError:
            data = {"projects": {}}
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path} is unreadable ({exc}); move it away") from exc
        projects = data.setdefault("projects", {})
        if project not in projects:
            ids = [int(p["id"]) for p in projects.values() if str(p.get("id", "")).isdigit()]
            projects[project] = {"id": max(ids, default=0) + 1, "key": secrets.token_hex(16)}
            atomic_write_bytes(path, dumps(data), mode=0o600)
        return str(projects[project]["key"]), str(projects[project]["id"])


class RateLimiter:
    """A token bucket per key: ``take(key)`` is 0 when allowed, else the seconds to wait."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate = rate_per_s
        self.burst = max(1, burst)
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, key: str, n: int = 1) -> int:
        if self.rate <= 0:
            return 0
        now = self.clock()
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens >= n:
            self._buckets[key] = (tokens - n, now)
            return 0
        self._buckets[key] = (tokens, now)
        if len(self._buckets) > 10_000:  # keys are few; a flood of wrong ones never gets here
            self._buckets.clear()
        return max(1, math.ceil((n - tokens) / self.rate))


def fold(signals: list[Signal]) -> list[Signal]:
    """Signals of one key as one: the latest one, with the sum of counts and all users."""
    by_key: dict[str, list[Signal]] = {}
    for s in signals:
        by_key.setdefault(s.key, []).append(s)
    out = []
    for group in by_key.values():
        last = group[-1]
        if len(group) == 1:
            out.append(last)
            continue
        users = tuple(dict.fromkeys(u for s in group for u in s.users))
        out.append(replace(last, count=sum(s.count for s in group), users=users))
    return out


@dataclass(eq=False)
class _Offer:
    """One request's signals on their way to the store, and the future its answer waits on."""

    filed: asyncio.Future[bool]
    left: int  # its signals not yet filed

    def settle(self, signals: int, ok: bool) -> None:
        self.left -= signals
        if self.filed.done():  # answered False already, or its request stopped waiting
            return
        if not ok:
            self.filed.set_result(False)
        elif self.left <= 0:
            self.filed.set_result(True)


class EventQueue:
    """Signals accepted by the route and not yet filed; one worker files them in batches."""

    def __init__(self, ingest: Callable[[list[Signal]], Awaitable[Any]], size: int,
                 linger_s: float = LINGER_S):
        self._ingest = ingest
        self._linger_s = linger_s
        self._queue: asyncio.Queue[tuple[Signal, _Offer]] = asyncio.Queue(maxsize=size)
        self._worker: asyncio.Task[None] | None = None
        self._batch: list[tuple[Signal, _Offer]] = []  # being filed
        self.filed = 0

    @property
    def waiting(self) -> int:
        """Signals queued and not yet taken into a batch."""
        return self._queue.qsize()

    def offer(self, signals: list[Signal]) -> asyncio.Future[bool] | None:
        """Queue all of ``signals``, or none of them (None: the queue is full). The future
        is True once all of them are filed, False once any was dropped (see the module
        docstring); a caller may cancel it to stop waiting."""
        if self._queue.maxsize - self._queue.qsize() < len(signals):
            return None
        loop = asyncio.get_running_loop()
        offer = _Offer(loop.create_future(), len(signals))
        for s in signals:
            self._queue.put_nowait((s, offer))
        if not signals:
            offer.settle(0, True)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._run(), name="sentry-ingest")
        return offer.filed

    async def _run(self) -> None:
        while True:
            # self._batch from its first event on: close() tells whatever it holds.
            self._batch = batch = [await self._queue.get()]
            # Under load events arrive one request at a time: lingering a moment lets a burst
            # become one batch (a few ledger writes) instead of one fsync'd write per event,
            # which took the CPU the requests needed.
            deadline = asyncio.get_running_loop().time() + self._linger_s
            while len(batch) < BATCH:
                if self._queue.empty():
                    left = deadline - asyncio.get_running_loop().time()
                    if left <= 0:
                        break
                    try:
                        # asyncio.timeout, not wait_for: on 3.11 wait_for loses a
                        # cancellation (close) that comes as an event arrives.
                        async with asyncio.timeout(left):
                            batch.append(await self._queue.get())
                    except TimeoutError:
                        break
                    continue
                batch.append(self._queue.get_nowait())
            signals = [replace(s, delivery=secrets.token_hex(8))
                       for s in fold([s for s, _ in batch])]
            ok = await self._file(signals, len(batch))
            if ok:
                self.filed += len(batch)
            _settle(batch, ok)
            self._batch = []

    async def _file(self, signals: list[Signal], events: int) -> bool:
        """File one batch, again while the store fails (see the module docstring)."""
        loop = asyncio.get_running_loop()
        give_up, tries = loop.time() + RETRY_FOR_S, 0
        while True:
            try:
                await self._ingest(signals)
                return True
            except _FINAL:  # one bad batch must not stop the intake
                log.exception("filing %d Sentry event(s) failed", events)
                return False
            except Exception as exc:
                pause = RETRY_PAUSES_S[min(tries, len(RETRY_PAUSES_S) - 1)]
                tries += 1
                if loop.time() + pause > give_up:
                    log.exception("filing %d Sentry event(s) failed for %.0f s; dropped",
                                  events, RETRY_FOR_S)
                    return False
                log.warning("filing %d Sentry event(s) failed (%s: %s); again in %.1f s",
                            events, type(exc).__name__, exc, pause)
                await asyncio.sleep(pause)

    async def close(self) -> None:
        """Stop the worker; requests still waiting are told their events were not filed
        (rather than waiting out their bound for a worker that is gone)."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        left = [*self._batch]
        while not self._queue.empty():
            left.append(self._queue.get_nowait())
        _settle(left, False)
        self._batch = []


def _settle(batch: list[tuple[Signal, _Offer]], ok: bool) -> None:
    """Tell each request with signals in ``batch`` how they went (one request's signals may
    be folded with others', or, past ``BATCH``, split over two batches)."""
    per_offer: dict[_Offer, int] = {}
    for _, offer in batch:
        per_offer[offer] = per_offer.get(offer, 0) + 1
    for offer, n in per_offer.items():
        offer.settle(n, ok)


def dsn_for(settings: Any, key: str, project_id: str, host: str | None = None) -> str:
    """``http://KEY@HOST:PORT/ID`` at the address SDKs reach healer by
    (``healer.core.address.served_url``: ``api.public_url``, else the running server's
    address, else ``api.host:api.port``); ``host`` replaces its host name."""
    from urllib.parse import urlsplit, urlunsplit

    from healer.core.address import served_url

    parts = urlsplit(served_url(settings))
    name = host or parts.hostname or "localhost"
    if ":" in name and not name.startswith("["):
        name = f"[{name}]"
    netloc = f"{key}@{name}" + (f":{parts.port}" if parts.port else "")
    path = f"{parts.path.rstrip('/')}/{project_id}"
    return urlunsplit((parts.scheme, netloc, path, "", ""))
