"""When the Sentry ingest answers 200 (``ingest.answer``), through the real app on a real
uvicorn, with a store whose incident writes the test holds back or makes fail.

``filed``: the request is answered once the batch holding its events is in the store (a burst
shares one batch), else 503 with Retry-After and nothing counted as accepted; a client that
leaves does not stop the worker. ``queued``: answered at once. ``auto``: ``queued`` on the
file store, ``filed`` on JetStream (a real nats-server).
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from healer.api.app import ApiContext
from healer.context import sentry_intake
from healer.context.service import ContextService
from healer.core.incidents import INCIDENTS
from healer.core.store import FileStore, Store
from healer.core.store.jetstream import JetStreamStore
from healer.errors import StoreError
from healer.testing.api import served
from healer.testing.nats import NatsServer
from healer.testing.wait import until

KEY = "a1" * 16
ISSUE = "AnswerProbeError"
AUTH = {"x-sentry-auth": f"Sentry sentry_version=7, sentry_key={KEY}, sentry_client=t/1",
        "content-type": "application/x-sentry-envelope"}


def envelope(issue: str = ISSUE) -> bytes:
    event = {"event_id": uuid.uuid4().hex, "platform": "python", "level": "error",
             "exception": {"values": [{"type": issue, "value": "x", "stacktrace": {"frames": [
                 {"filename": "app/cart.py", "function": "add", "lineno": 7,
                  "in_app": True}]}}]}}
    payload = json.dumps(event).encode()
    return b"\n".join([json.dumps({"event_id": event["event_id"]}).encode(),
                       json.dumps({"type": "event", "length": len(payload)}).encode(),
                       payload]) + b"\n"


class Gate:
    """A store's incident writes wait while ``open`` is clear and raise ``failing`` while it
    is set; ``tried`` counts the writes begun, ``counts`` has the incident's count after each
    write that went through."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.open = threading.Event()
        self.open.set()
        self.failing: Exception | None = None
        self.tried = 0
        self.counts: list[int] = []

    def put(self, kind: str, key: str, data: dict[str, Any], **kw: Any) -> Any:
        if kind != INCIDENTS:
            return super().put(kind, key, data, **kw)  # type: ignore[misc]
        self.tried += 1
        if not self.open.wait(30):
            raise StoreError("the test never opened the gate")
        if self.failing is not None:
            raise self.failing
        rec = super().put(kind, key, data, **kw)  # type: ignore[misc]
        self.counts.append(int(data.get("count") or 0))
        return rec


class GatedFileStore(Gate, FileStore):
    pass


class GatedJetStream(Gate, JetStreamStore):
    pass


@pytest.fixture(scope="module")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with NatsServer(jetstream=True, store_dir=tmp_path_factory.mktemp("nats")) as ns:
        yield ns.url


class Rig:
    def __init__(self, client: httpx.AsyncClient, ctx: ApiContext, store: Any,
                 svc: ContextService):
        self.client, self.ctx, self.store, self.svc = client, ctx, store, svc

    async def send(self, issue: str = ISSUE) -> httpx.Response:
        return await self.client.post("/api/5/envelope/", content=envelope(issue),
                                      headers=AUTH)

    def start(self, issue: str = ISSUE) -> asyncio.Task[httpx.Response]:
        return asyncio.create_task(self.send(issue))

    @property
    def waiting(self) -> int:
        """Signals the intake holds that no batch took yet."""
        st = self.ctx.services.get("sentry-ingest")
        return st.queue.waiting if st is not None else 0

    def count(self, issue: str = ISSUE) -> int:
        """The events filed for ``issue`` (its incident's count), read from the store."""
        for rec in self.store.list(INCIDENTS):
            if rec.data.get("error_type") == issue:
                return int(rec.data.get("count") or 0)
        return 0

    async def metric(self, result: str) -> float:
        text = (await self.client.get("/metrics")).text
        for line in text.splitlines():
            if (line.startswith("healer_webhooks_total{") and 'source="sentry_sdk"' in line
                    and f'result="{result}"' in line):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


RigFactory = Callable[..., Any]


@pytest.fixture
async def rig(make_settings: Callable[..., Any], project: Path, dirs: Any,
              nats_url: str) -> AsyncIterator[RigFactory]:
    """``async with rig(answer, backend="file", *overrides) as r`` — the app over a gated
    store of that backend (``jetstream``: a fresh bucket on the module's nats-server)."""
    from contextlib import asynccontextmanager

    stores: list[Any] = []

    @asynccontextmanager
    async def make(answer: str, *extra: str, backend: str = "file") -> AsyncIterator[Rig]:
        settings = make_settings(f"ingest.answer={answer}", f"store.backend={backend}",
                                 f'ingest.sentry_keys=["{KEY}:5"]', *extra)
        store: Store = (GatedFileStore(settings.state_path) if backend == "file" else
                        GatedJetStream({"servers": [nats_url], "connect_timeout": 5},
                                       bucket=f"answer-{uuid.uuid4().hex[:8]}"))
        stores.append(store)
        svc = ContextService(settings, store, root=project)
        ctx = ApiContext(settings=settings, store=store, services={"context": svc})
        async with served(ctx) as client:
            yield Rig(client, ctx, store, svc)
            store.open.set()  # type: ignore[attr-defined]
            st = ctx.services.get("sentry-ingest")
            if st is not None:
                await st.queue.close()
        await svc.drain(10)

    yield make
    for store in stores:  # a failed test must not leave a writer thread waiting
        store.open.set()
        store.close()


class TestFiled:
    @pytest.mark.parametrize(("answer", "backend"), [("filed", "file"), ("auto", "jetstream")])
    async def test_the_answer_waits_until_the_batch_is_in_the_store(
            self, rig: RigFactory, answer: str, backend: str) -> None:
        async with rig(answer, backend=backend) as r:
            r.store.open.clear()
            request = r.start()
            await until(lambda: r.store.tried, 10)  # the batch is being written, held
            assert not request.done()
            assert await r.metric("accepted") == 0
            r.store.open.set()
            got = await request
            assert got.status_code == 200, got.text
            assert got.json()["id"]
            assert r.count() == 1  # in the store when the answer came
            assert await r.metric("accepted") == 1

    async def test_a_burst_of_requests_waits_on_one_batch(self, rig: RigFactory) -> None:
        """While one batch is held, 20 requests arrive; they are filed as one batch (the
        incident's count goes from 1 to 21 in one write) and each is answered 200 once it is
        in the store."""
        async with rig("filed") as r:
            r.store.open.clear()
            first = r.start()
            await until(lambda: r.store.tried, 10)
            burst = [r.start() for _ in range(20)]
            await until(lambda: r.waiting == 20, 10)
            assert not any(t.done() for t in [first, *burst])
            r.store.open.set()
            answers = await asyncio.gather(first, *burst)
            assert [a.status_code for a in answers] == [200] * 21
            assert r.count() == 21
            assert sorted(set(r.store.counts)) == [1, 21]  # the first batch, then the burst

    @pytest.mark.parametrize("failure", ["final", "retries_exhausted"])
    async def test_a_batch_the_store_does_not_take_is_503(
            self, rig: RigFactory, monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
        """A batch dropped — an error of the input (not tried again), or a store that kept
        failing for the retry window (shortened here) — is 503 with Retry-After, counted
        ``not_filed`` and not ``accepted``; the intake goes on once the store is back."""
        if failure == "final":
            error: Exception = ValueError("a record the ledger refuses")
        else:
            error = StoreError("JetStream did not answer within 10s")
            monkeypatch.setattr(sentry_intake, "RETRY_FOR_S", 0.5)
        async with rig("filed") as r:
            r.store.failing = error
            got = await r.send()
            assert (r.store.tried == 1) == (failure == "final")  # tried again, or not
            assert got.status_code == 503, got.text
            assert int(got.headers["retry-after"]) > 0
            assert got.json()["error"] == "not filed: the store is unavailable; retry"
            assert "x-sentry-rate-limits" not in got.headers  # the SDKs would drop events
            assert await r.metric("not_filed") == 1
            assert await r.metric("accepted") == 0
            assert r.store.counts == []
            r.store.failing = None
            assert (await r.send()).status_code == 200
            assert r.count() == 1 and await r.metric("accepted") == 1

    async def test_past_the_bound_it_is_503_and_the_events_are_filed_later(
            self, rig: RigFactory) -> None:
        """``ingest.answer_timeout_s`` only ends the wait: the worker keeps the events and
        files them once the store takes them (a sender that resends counts twice)."""
        async with rig("filed", "ingest.answer_timeout_s=0.2") as r:
            r.store.open.clear()
            got = await r.send()
            assert got.status_code == 503, got.text
            assert got.json()["error"].startswith("not filed within 0.2 s")
            assert await r.metric("not_filed") == 1 and await r.metric("accepted") == 0
            r.store.open.set()
            await until(lambda: r.count() == 1, 10)

    async def test_a_client_that_leaves_does_not_stop_the_worker(
            self, rig: RigFactory) -> None:
        async with rig("filed") as r:
            r.store.open.clear()
            gone = r.start()
            await until(lambda: r.store.tried, 10)
            gone.cancel()  # the client hangs up while its batch is held
            with pytest.raises(asyncio.CancelledError):
                await gone
            r.store.open.set()
            got = await r.send()
            assert got.status_code == 200, got.text
            assert r.count() == 2  # the one whose client left is filed too


class TestQueued:
    @pytest.mark.parametrize("answer", ["queued", "auto"])  # auto: the file store
    async def test_the_answer_is_immediate(self, rig: RigFactory, answer: str) -> None:
        async with rig(answer) as r:
            r.store.open.clear()  # nothing can be filed
            got = await r.send()
            assert got.status_code == 200, got.text
            assert r.count() == 0 and await r.metric("accepted") == 1
            r.store.open.set()
            await until(lambda: r.count() == 1, 10)


class TestTheQueuesFutures:
    @pytest.mark.parametrize("second", ["filed", "dropped"])
    async def test_a_request_split_over_two_batches_waits_for_both(self, second: str) -> None:
        """499 single events, then a request of two: a batch holds 500, so the pair is
        split. Its future resolves only once the second batch is settled, with its fate."""
        from healer.context import envelope as env

        release = asyncio.Event()
        batches: list[int] = []

        async def ingest(signals: list[Any]) -> None:
            batches.append(sum(s.count for s in signals))
            if len(batches) == 1:
                await release.wait()
            elif second == "dropped":
                raise ValueError("refused")  # final: dropped at once

        queue = sentry_intake.EventQueue(ingest, 1000)
        one = env.signal_of(json.loads(envelope().split(b"\n")[2]), "1", None)
        singles = [queue.offer([one]) for _ in range(499)]
        pair = queue.offer([one, one])
        assert pair is not None and all(f is not None for f in singles)
        await until(lambda: batches, 10)
        assert batches == [500] and not pair.done()
        release.set()
        assert await asyncio.wait_for(pair, 10) is (second == "filed")
        assert batches == [500, 1]
        assert all(f.result() for f in singles if f is not None)
        await queue.close()

    @pytest.mark.parametrize("moment", ["filing", "lingering"])
    async def test_close_tells_the_waiting_requests(self, moment: str) -> None:
        """A worker stopped with events queued, gathered into a batch or in flight answers
        their requests False at once, rather than leaving them to their bound."""
        from healer.context import envelope as env

        calls: list[int] = []

        async def ingest(signals: list[Any]) -> None:
            calls.append(len(signals))
            await asyncio.Event().wait()  # never filed

        queue = sentry_intake.EventQueue(ingest, 10)
        one = env.signal_of(json.loads(envelope().split(b"\n")[2]), "1", None)
        first = queue.offer([one])
        if moment == "filing":
            await until(lambda: calls, 10)  # its batch is in flight
        else:
            await until(lambda: queue.waiting == 0, 10)  # taken; the worker lingers
        later = queue.offer([one])  # queued behind it, or gathered into its batch
        await queue.close()
        assert first is not None and later is not None
        assert first.result() is False and later.result() is False


@pytest.mark.parametrize(("answer", "backend", "mode"), [
    ("auto", "file", "queued"), ("auto", "jetstream", "filed"),
    ("filed", "file", "filed"), ("queued", "jetstream", "queued")])
def test_answer_mode(make_settings: Callable[..., Any], answer: str, backend: str,
                     mode: str) -> None:
    settings = make_settings(f"ingest.answer={answer}", f"store.backend={backend}")
    assert sentry_intake.answer_mode(settings) == mode
