"""The notify duty changes hands on a shared store (a real JetStream bucket): what one
replica queued, the next leader sends, once.

Two replicas, each with its own state dir, share one bucket and lead ``notify`` under the
real lease (``healer.core.duties``). Replica A reconciles and queues a notice, then stops
before delivering it (it died, or was paused): its lease runs out and B takes the duty. B
does not queue the notice again (the shared mark says queued) but finds it in the shared
outbox and delivers it: the receiver gets it exactly once. When A wakes up — still holding
the listing it made and believing it leads (its clock stood still) — it sends neither that
stale item nor the next notice B queued: the fence refuses them. A delivery A was sending
when it stopped is claimed: B leaves it to A, and gives it up (not sent twice, shown as
failed) only once the claim has run out."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.config import load_settings
from healer.core import incidents as inc
from healer.core.duties import Duties
from healer.core.notify import Notifier, status_view
from healer.core.notify.targets import configured
from healer.core.store import Store
from healer.testing.nats import NatsServer, jetstream_store
from healer.testing.notify_receivers import HeldAnswer, SignedWebhook
from healer.testing.wait import until

SECRET = "whsec_" + base64.b64encode(b"the-notify-handover-secret-32by!").decode()
TTL = 3.0
T0 = 1_000_000.0
_bucket = itertools.count()


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    with NatsServer(jetstream=True, store_dir=tmp_path_factory.mktemp("nats")) as ns:
        yield ns


@pytest.fixture
def stores(nats_server: NatsServer, tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """Two replicas' handles on one bucket."""
    bucket = f"handover{next(_bucket)}"
    opened = (jetstream_store(nats_server.url, bucket), jetstream_store(nats_server.url, bucket))
    yield opened
    for s in opened:
        s.close()


class Replica:
    """One replica's notifier under its own lease, state dir and clock."""

    def __init__(self, name: str, store: Store, state: Path, hook_url: str, *,
                 held: bool = False):
        self.now = T0
        settings = load_settings(env={"HEALER_STATE_DIR": str(state), "HEALER_NODE_ID": name,
                                      "HEALER_NOTIFY_WEBHOOK_URL": hook_url,
                                      "HEALER_NOTIFY_WEBHOOK_SECRET": SECRET})
        self.duties = Duties(store, f"{name}/test", TTL, clock=lambda: self.now)
        self.duties.add("notify")
        webhook = configured(settings.notify)["webhook"]
        self.held = HeldAnswer(webhook)
        self.notifier = Notifier(settings, store, clock=lambda: self.now,
                                 targets={"webhook": self.held if held else webhook})
        self.notifier.fence = lambda: self.duties.fence("notify")

    def leads(self) -> bool:
        return self.duties.tick()["notify"]

    async def deliver_due(self) -> list[bool]:
        return [await self.notifier.deliver(i) for i in self.notifier.due()]


def escalate(store: Store, key: str) -> str:
    ledger = inc.Ledger(store)
    sig = inc.Signal("code", key, "report_error", severity="critical", trust="trusted",
                     summary=f"{key} in app/users.py")
    ledger.receive(sig)
    ledger.escalated(sig.id, seed_file="", reason="three attempts failed")
    return sig.id


def told(hook: SignedWebhook) -> list[tuple[str, str]]:
    return [(v["body"]["data"]["incident"], v["body"]["data"]["state"]) for v in hook.verified]


async def test_the_next_leader_sends_what_the_old_one_queued_once(
        stores: tuple[Store, Store], tmp_path: Path) -> None:
    with SignedWebhook(SECRET) as hook:
        a = Replica("n1", stores[0], tmp_path / "a", hook.url + "/in")
        b = Replica("n2", stores[1], tmp_path / "b", hook.url + "/in")
        assert a.leads() and not b.leads()
        first = escalate(stores[0], "KeyError-user-id")
        assert a.notifier.reconcile() == 1
        stale = a.notifier.due()  # A listed it, then stopped: nothing sent
        assert hook.verified == [] and not (tmp_path / "a" / "notify").exists()

        b.now = T0 + TTL + 1  # A's lease ran out: B takes the duty
        assert b.leads()
        assert b.notifier.reconcile() == 0  # marked queued in the shared record: not again
        assert await b.deliver_due() == [True]
        assert told(hook) == [(first, "escalated")]

        second = escalate(stores[1], "TimeoutError-in-db")
        assert b.notifier.reconcile() == 1  # B queued it; A wakes before B sends it
        # A still believes it leads (its clock stood still); the fence reads the lease.
        assert [await a.notifier.deliver(i) for i in stale] == [False]
        assert [await a.notifier.deliver(i) for i in a.notifier.outbox.due(now=1e12)] == [False]
        assert told(hook) == [(first, "escalated")]

        assert await b.deliver_due() == [True]
        assert b.notifier.outbox.items() == []
    assert told(hook) == [(first, "escalated"), (second, "escalated")]


async def mid_send(stores: tuple[Store, Store], tmp_path: Path, hook: Any
                   ) -> tuple[Replica, Replica, str, asyncio.Task[bool]]:
    """Replica A leads and is sending an incident's notice: the receiver has it, A's answer
    is held. B stands by. Returns (A, B, the incident, A's delivery)."""
    a = Replica("n1", stores[0], tmp_path / "a", hook.url + "/in", held=True)
    b = Replica("n2", stores[1], tmp_path / "b", hook.url + "/in")
    assert a.leads()
    iid = escalate(stores[0], "KeyError-user-id")
    assert a.notifier.reconcile() == 1
    [item] = a.notifier.due()
    sending = asyncio.create_task(a.notifier.deliver(item))
    await until(lambda: hook.verified)
    return a, b, iid, sending


async def test_a_delivery_in_flight_on_a_paused_leader_is_not_sent_again(
        stores: tuple[Store, Store], tmp_path: Path) -> None:
    """A was sending when it was paused: the receiver has the message, A has not recorded
    it. B takes over and leaves the claimed delivery alone; A wakes up and finishes it."""
    with SignedWebhook(SECRET) as hook:
        a, b, iid, sending = await mid_send(stores, tmp_path, hook)

        b.now = T0 + TTL + 1
        assert b.leads() and b.notifier.reconcile() == 0
        assert await b.deliver_due() == []  # claimed by A: B does not send it
        a.held.release.set()
        assert await sending
        assert await b.deliver_due() == [] and b.notifier.outbox.items() == []
    assert told(hook) == [(iid, "escalated")]


async def test_a_delivery_whose_sender_died_mid_send_is_given_up_not_sent_twice(
        stores: tuple[Store, Store], tmp_path: Path) -> None:
    """A died while sending (the receiver may have the message): once A's claim runs out,
    B gives the delivery up where a person sees it, and does not send it again."""
    with SignedWebhook(SECRET) as hook:
        _, b, iid, sending = await mid_send(stores, tmp_path, hook)
        sending.cancel()  # A is gone, its delivery unrecorded
        with contextlib.suppress(asyncio.CancelledError):
            await sending

        b.now = T0 + TTL + 1
        assert b.leads()
        assert await b.deliver_due() == []  # A's claim may still be sending: left alone
        b.now = T0 + b.notifier.claim_s  # A's claim ran out
        assert await b.deliver_due() == []
        assert b.notifier.outbox.items() == []
        [failed] = b.notifier.outbox.failures()
    assert told(hook) == [(iid, "escalated")]
    assert failed["incident"] == iid and "n1 stopped while sending it" in failed["error"]
    assert status_view(b.notifier.settings, stores[1])["targets"]["webhook"]["failures"] == 1


def test_both_replicas_see_one_shared_outbox(stores: tuple[Store, Store], tmp_path: Path
                                            ) -> None:
    """Queued on one replica's handle, listed (and given up, for ``healer status``) on the
    other's: no local folder holds any of it."""
    a = Notifier(load_settings(env={"HEALER_STATE_DIR": str(tmp_path / "a")}), stores[0])
    b = Notifier(load_settings(env={"HEALER_STATE_DIR": str(tmp_path / "b")}), stores[1])
    from healer.core.notify.base import Notice

    a.outbox.put("webhook", Notice(incident="code-x", kind="code", state="escalated",
                                   severity="high", title="x"), now=T0)
    [item] = b.outbox.due(now=T0)
    assert not b.outbox.failed(item, "HTTP 400", retryable=False, now=T0)
    view: list[dict[str, Any]] = a.outbox.failures()
    assert [(f["incident"], f["error"]) for f in view] == [("code-x", "HTTP 400")]
    assert a.outbox.items() == [] and not list(tmp_path.rglob("*.json"))
