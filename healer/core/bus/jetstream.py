"""The results bus over NATS JetStream, so each result is applied by exactly one node of a fleet.

Each node's file watcher validates results exactly as the file bus does, then *publishes* them
to the stream ``<bucket>-results`` (message id = result id, so a re-publish after a crash is
dropped by JetStream's duplicate window) instead of applying them locally. Every node pulls
from one durable consumer, so each result is applied by one node: the ledger record is created
in the bucket (exactly once), subscribers run, then the message is acked. A node that dies
before the ack leaves the message to be redelivered to another node, which finds the ledger
record or applies it itself.

The bus shares the store's connection and event loop (``healer.core.store.jetstream``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

from healer.core.bus.ledger import AgentResult, Applied
from healer.core.bus.validate import RESULT_NAME
from healer.core.bus.watch import ResultsBus
from healer.core.names import is_safe_name
from healer.core.schemas import errors as schema_errors
from healer.core.store.jetstream import JetStreamStore
from healer.core.strict_json import loads_strict
from healer.errors import StoreError, UnavailableError

log = logging.getLogger(__name__)

DURABLE = "apply"


def stream_names(bucket: str) -> tuple[str, str]:
    """(stream, subject prefix) for a bucket: every node sharing a bucket shares the stream."""
    return f"{bucket}-results", f"{bucket}.results"


class JetStreamResultsBus(ResultsBus):
    """The file bus whose valid results go through a JetStream stream to exactly one node."""

    def __init__(self, results_dir: Path | str, store: JetStreamStore, **kw: Any):
        super().__init__(results_dir, store, **kw)
        self.pending_set = f"results-pending-{self.node or 'node'}"
        self.js_store = store
        self.stream, self.subject = stream_names(store.bucket_name)
        self._consumer_stop = threading.Event()
        self._consumer: Any = None

    def start(self) -> None:
        self.js_store._run(self._ensure_stream())
        super().start()
        self._consumer_stop.clear()
        self._consumer = asyncio.run_coroutine_threadsafe(self._consume(),
                                                          self.js_store._io.loop)

    def stop(self, timeout: float = 10.0) -> None:
        super().stop(timeout)
        self._consumer_stop.set()
        if self._consumer is not None:
            try:
                self._consumer.result(timeout)
            except Exception:
                log.debug("consumer ended with an error", exc_info=True)

    async def _ensure_stream(self) -> None:
        from nats.js import api, errors

        js = self.js_store.js
        try:
            await js.stream_info(self.stream)
        except errors.NotFoundError:
            await js.add_stream(api.StreamConfig(
                name=self.stream, subjects=[f"{self.subject}.>"],
                retention=api.RetentionPolicy.WORK_QUEUE, num_replicas=self.js_store.replicas,
                storage=api.StorageType.FILE, duplicate_window=600.0, max_age=7 * 86400.0))

    def dispatch(self, result: AgentResult) -> None:
        """Publish instead of applying here; the pull consumer applies it on one node."""
        payload = json.dumps({"id": result.id, "name": result.name, "kind": result.kind,
                              "target": result.target, "epoch": result.epoch,
                              "data": result.data, "received_at": result.received_at}).encode()
        js = self.js_store.js
        deadline = time.monotonic() + 60
        while True:
            try:
                ack = self.js_store._io.run(js.publish(f"{self.subject}.{result.kind}", payload,
                                                       headers={"Nats-Msg-Id": result.id}),
                                            timeout=10)
                if ack.duplicate:  # JetStream's duplicate window already has this result
                    self.stats.duplicates += 1
                return
            except Exception as exc:
                # NATS restarting: keep the file (it is not moved until this returns) and retry.
                if time.monotonic() > deadline:
                    raise StoreError(f"could not publish {result.name}: {exc}") from exc
                time.sleep(0.5)

    def dispatch_batch(self, results: list[AgentResult]) -> Applied | None:
        """Publish each; the consumer applies them (one node each). A publish returns once
        the stream has it: nothing is left to wait for before the files move."""
        for result in results:
            self.dispatch(result)
        return None

    async def _consume(self) -> None:
        import nats.errors

        js = self.js_store.js
        sub = None
        while not self._consumer_stop.is_set():
            try:
                if sub is None:
                    sub = await js.pull_subscribe(f"{self.subject}.>", durable=DURABLE,
                                                  stream=self.stream)
                msgs = await sub.fetch(16, timeout=0.5)
            except nats.errors.TimeoutError:
                continue
            except Exception as exc:
                log.debug("consumer: %s; retrying", exc)
                sub = None
                await asyncio.sleep(0.5)
                continue
            for msg in msgs:
                try:
                    result = self.parse_message(msg.data)
                except ValueError as exc:
                    # Not from a healer bus (or damaged): never applied, never redelivered.
                    log.warning("bus: dropped a message on %s: %s", msg.subject, exc)
                    await msg.term()
                    continue
                await asyncio.to_thread(self.apply_result, result)
                await msg.ack()

    def parse_message(self, raw: bytes) -> AgentResult:
        """A published result, checked as strictly as the file it came from (``ValueError``
        saying why otherwise): strict JSON, the envelope's fields, the result schema."""
        d = loads_strict(raw, self.max_json_depth + 1)  # the envelope adds one level
        if not isinstance(d, dict):
            raise ValueError("message is not a JSON object")
        name = d.get("name")
        m = RESULT_NAME.fullmatch(name) if isinstance(name, str) else None
        if m is None or not is_safe_name(d.get("id")):
            raise ValueError("message has no valid result name and id")
        data, epoch, received = d.get("data"), d.get("epoch"), d.get("received_at")
        if (isinstance(epoch, bool) or not isinstance(epoch, int)
                or isinstance(received, bool) or not isinstance(received, int | float)):
            raise ValueError("message epoch/received_at are not numbers")
        problem = schema_errors("agent-result", data)
        if problem:
            key, message = problem[0]
            raise ValueError(f"schema: {key + ': ' if key else ''}{message}"[:500])
        named = (m["kind"], m["target"])
        if (d.get("kind"), d.get("target")) != named or (data["kind"], data["target"]) != named:
            raise ValueError("message kind/target disagree with its result name")
        return AgentResult(id=d["id"], name=name, kind=m["kind"], target=m["target"],
                           epoch=epoch, data=data, received_at=float(received))


def health(settings: Any) -> tuple[bool, str] | None:
    """For `healer doctor`: (ok, detail) of JetStream and the bucket; None on another backend."""
    if settings.store.backend != "jetstream":
        return None
    try:
        store = JetStreamStore.connect(settings)
    except UnavailableError as exc:
        return False, str(exc)
    try:
        status = store._run(store.kv.status())
        stream, _ = stream_names(store.bucket_name)
        stream_ok = True
        try:
            store._run(store.js.stream_info(stream))
        except Exception:
            stream_ok = False
        return True, (f"bucket {store.bucket_name}: {status.values} values, history "
                      f"{status.history}; stream {stream}: "
                      f"{'present' if stream_ok else 'created on first loop start'}")
    finally:
        store.close()
