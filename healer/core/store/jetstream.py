"""``JetStreamStore``: healer's shared state in a NATS JetStream key-value bucket, for fleets
that span machines.

One key-value bucket (``store.bucket``, default ``healer``) holds every record under
``<kind>.<key>`` and every set member under ``_set.<set>.<member>``. The record's revision is
the KV revision: ``create`` fails if the key exists and ``update(last=N)`` fails if someone
wrote after N, so compare-and-set — the novelty gate, incident and lease ownership — is atomic
across every node's healer, with no home-made consensus. Records keep ``store.history``
revisions.

The store's API is synchronous (the bus thread and request handlers call it); nats-py is
asyncio, so the connection lives on its own event loop in a background thread, which the
JetStream results bus (``healer.core.bus.jetstream``) shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from healer.core.names import safe_name
from healer.core.nats_auth import NatsAuth
from healer.core.store.base import Record, Store
from healer.errors import ConflictError, StoreError, UnavailableError

log = logging.getLogger(__name__)
T = TypeVar("T")
FETCH_RETRIES_S = (0.02, 0.05, 0.1, 0.2, 0.5)  # pauses before asking a 503'd pull again


class _LoopThread:
    """An asyncio loop in a daemon thread; ``run(coro)`` waits for its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="healer-nats",
                                       daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    def stop(self) -> None:
        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.loop.is_running():
            with contextlib.suppress(Exception):
                self.run(shutdown(), timeout=5)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
        if not self.loop.is_running():
            self.loop.close()


def connect_options(settings: Any) -> dict[str, Any]:
    """nats-py connect() options from ``store.*`` (credentials and TLS passed through)."""
    s = settings.store
    opts: dict[str, Any] = {"servers": list(s.nats_urls), "connect_timeout": s.connect_timeout_s,
                            "max_reconnect_attempts": -1, "reconnect_time_wait": 0.5,
                            "name": f"healer-{settings.node}"}
    opts.update(NatsAuth.from_store(s).options())
    if s.tls_ca or s.tls_cert:
        import ssl

        ctx = ssl.create_default_context(cafile=s.tls_ca or None)
        if s.tls_cert:
            ctx.load_cert_chain(s.tls_cert, s.tls_key or None)
        opts["tls"] = ctx
    return opts


class JetStreamStore(Store):
    """The Store interface over a JetStream key-value bucket."""

    def __init__(self, options: dict[str, Any], *, bucket: str = "healer", history: int = 5,
                 replicas: int = 1, clock: Callable[[], float] = time.time,
                 timeout: float = 10.0):
        import nats
        from nats.js import errors as js_errors

        self._errors = js_errors
        self._clock = clock
        self._timeout = timeout
        self.bucket_name = bucket
        self.replicas = replicas
        self._closed = False
        self._io = _LoopThread()
        # Reconnects retry forever (a NATS restart must not lose the store), so the first
        # connection is bounded here instead.
        first = float(options.get("connect_timeout", 5)) + 1.0
        seen: list[str] = []  # the server's reasons (e.g. an authorization violation)

        async def on_error(exc: Exception) -> None:
            text = str(exc)[:200]
            if text not in seen:
                seen.append(text)

        try:
            self.nc = self._io.run(nats.connect(**{"error_cb": on_error, **options}),
                                   timeout=first)
        except Exception as exc:
            self._io.stop()
            why = str(exc) or type(exc).__name__
            # The retries that follow a refusal end in resets and timeouts; the refusal is
            # what the operator can act on.
            told = next((t for t in seen if "authoriz" in t.lower()), seen[-1] if seen else "")
            raise UnavailableError(f"cannot connect to NATS at {options.get('servers')}: {why}"
                                   + (f" ({told})" if told else "")) from exc
        self.js = self.nc.jetstream()
        try:
            self.kv = self._io.run(self._bucket(bucket, history))
        except Exception as exc:
            self.close()
            raise UnavailableError(f"JetStream is not available on "
                                   f"{options.get('servers')}: {exc}") from exc

    @classmethod
    def connect(cls, settings: Any) -> JetStreamStore:
        return cls(connect_options(settings), bucket=settings.store.bucket,
                   history=settings.store.history, replicas=settings.store.replicas)

    async def _bucket(self, name: str, history: int) -> Any:
        try:
            return await self.js.key_value(name)
        except self._errors.BucketNotFoundError:
            return await self.js.create_key_value(bucket=name, history=history,
                                                  replicas=self.replicas,
                                                  description="healer state")

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            return self._io.run(coro, timeout=self._timeout)
        except TimeoutError as exc:
            raise StoreError(f"JetStream did not answer within {self._timeout}s") from exc

    @staticmethod
    def _k(kind: str, key: str) -> str:
        safe_name(kind, "record kind")
        safe_name(key, "record key")
        if "." in kind:
            raise StoreError(f"record kind {kind!r} must not contain '.'")
        return f"{kind}.{key}"

    # -- records ---------------------------------------------------------------------------

    def get(self, kind: str, key: str) -> Record | None:
        k = self._k(kind, key)
        e = self._errors
        try:
            entry = self._run(self.kv.get(k))
        except (e.KeyNotFoundError, e.KeyDeletedError):
            return None
        if entry.value is None or entry.operation in ("DEL", "PURGE"):
            return None
        doc = json.loads(entry.value)
        return Record(kind, key, int(entry.revision or 0), doc["data"], doc["updated_at"])

    def put(self, kind: str, key: str, data: dict[str, Any], *,
            expected_revision: int | None = None, durable: bool = True) -> Record:
        # JetStream persists on its own schedule: ``durable`` changes nothing here.
        if not isinstance(data, dict):
            raise TypeError("record data must be a dict")
        k = self._k(kind, key)
        now = self._clock()
        value = json.dumps({"data": data, "updated_at": now}, separators=(",", ":")).encode()
        try:
            if expected_revision is None:
                rev = self._run(self.kv.put(k, value))
            elif expected_revision == 0:
                rev = self._run(self.kv.create(k, value))
            else:
                rev = self._run(self.kv.update(k, value, last=expected_revision))
        except self._errors.KeyWrongLastSequenceError as exc:
            current = self.get(kind, key)
            raise ConflictError(kind, key, expected_revision,
                                current.revision if current else None) from exc
        except self._errors.APIError as exc:
            # create() on a key whose last operation was a delete is a CAS on that marker.
            if expected_revision == 0 and "wrong last sequence" in str(exc).lower():
                raise ConflictError(kind, key, 0, None) from exc
            raise StoreError(f"{kind}/{key}: {exc}") from exc
        return Record(kind, key, int(rev), data, now)

    def delete(self, kind: str, key: str, *, expected_revision: int | None = None) -> bool:
        k = self._k(kind, key)
        if self.get(kind, key) is None:
            return False
        try:
            self._run(self.kv.delete(k, last=expected_revision))
        except self._errors.KeyWrongLastSequenceError as exc:
            current = self.get(kind, key)
            raise ConflictError(kind, key, expected_revision,
                                current.revision if current else None) from exc
        return True

    async def _list_keys(self, prefix: str) -> list[str]:
        """The live keys under ``prefix``: the last message of each subject, read by an
        ephemeral pull consumer. (nats-py's ``kv.watch``/``keys`` decide "initial values done"
        from a consumer-info snapshot taken while messages are already in flight, so under
        load they can end early and list nothing: nats-io/nats.py#842. A pull consumer sends
        nothing until asked, so the pending count at its creation is the exact number to
        read.)"""
        from nats.js import api

        stream, pre = f"KV_{self.bucket_name}", f"$KV.{self.bucket_name}."
        name = f"healer-keys-{uuid.uuid4().hex}"
        info = await self.js.add_consumer(stream, config=api.ConsumerConfig(
            name=name, filter_subject=f"{pre}{prefix}.>",
            deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT, ack_policy=api.AckPolicy.NONE,
            headers_only=True, mem_storage=True, num_replicas=1, inactive_threshold=60.0))
        want, got = int(info.num_pending or 0), 0
        keys: list[str] = []
        sub = None
        try:
            if want:
                sub = await self.js.pull_subscribe_bind(consumer=name, stream=stream)
            while sub is not None and got < want:
                try:
                    msgs = await self._fetch(sub, min(want - got, 1024))
                except TimeoutError:
                    # Fewer than counted: keys purged meanwhile, or (on a loaded cluster) a
                    # pull that no server answered; only the consumer can tell which.
                    if not (await self.js.consumer_info(stream, name)).num_pending:
                        break
                    continue  # (the store's own time limit bounds the asking)
                got += len(msgs)
                keys += [m.subject[len(pre):] for m in msgs
                         if (m.headers or {}).get("KV-Operation") not in ("DEL", "PURGE")]
        finally:
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
            with contextlib.suppress(Exception):
                await self.js.delete_consumer(stream, name)
        return keys

    async def _fetch(self, sub: Any, batch: int) -> list[Any]:
        """One pull. On a cluster the consumer just created may not listen yet on the
        stream's leader: the pull is answered 503 (about one listing in a hundred on an idle
        three-server cluster), so it is asked again a few times before that counts."""
        for pause in FETCH_RETRIES_S:
            try:
                return list(await sub.fetch(batch=batch, timeout=self._timeout / 2))
            except self._errors.ServiceUnavailableError:
                await asyncio.sleep(pause)
        return list(await sub.fetch(batch=batch, timeout=self._timeout / 2))

    def _keys(self, prefix: str) -> list[str]:
        return sorted(k[len(prefix) + 1:] for k in self._run(self._list_keys(prefix)))

    def keys(self, kind: str) -> list[str]:
        safe_name(kind, "record kind")
        return self._keys(kind)

    # -- sets ------------------------------------------------------------------------------

    def add_member(self, set_name: str, key: str) -> None:
        safe_name(set_name, "set name")
        self._run(self.kv.put(f"_set.{set_name}.{safe_name(key, 'member')}", b"1"))

    def remove_member(self, set_name: str, key: str) -> None:
        safe_name(set_name, "set name")
        k = f"_set.{set_name}.{safe_name(key, 'member')}"
        with contextlib.suppress(self._errors.KeyNotFoundError, self._errors.KeyDeletedError):
            self._run(self.kv.delete(k))

    def members(self, set_name: str) -> list[str]:
        safe_name(set_name, "set name")
        return self._keys(f"_set.{set_name}")

    def close(self) -> None:
        if self._closed:
            return
        self.before_closing()
        self._closed = True
        try:
            self._io.run(self.nc.close(), timeout=5)
        except Exception:  # closing must not raise
            log.debug("NATS close failed", exc_info=True)
        self._io.stop()
