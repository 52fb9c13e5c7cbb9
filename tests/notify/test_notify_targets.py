"""Each notify target against a receiver that speaks its real wire format on 127.0.0.1, routes,
and the outbox's retries: an incident moves through the ledger, the reconciler queues, one
delivery pass sends."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from healer.config import load_settings
from healer.core import incidents as inc
from healer.core.notify import Notifier, status_view
from healer.core.notify import routes as r
from healer.core.notify.webhook import sign, verify
from healer.core.store import FileStore
from healer.errors import ConfigError, StoreError
from healer.testing.notify_receivers import (
    HeldAnswer,
    PagerDutyEvents,
    SignedWebhook,
    SlackApi,
    SmtpInbox,
)
from healer.testing.receivers import WebhookReceiver

TOKEN = "xoxb-1-test-not-a-real-token"
ROUTING = "R0123456789abcdef0123456789abcde"
SECRET = "whsec_" + base64.b64encode(b"a-notify-test-secret-of-32-bytes").decode()


def setup(tmp_path: Path, **env: str) -> tuple[Any, FileStore, inc.Ledger]:
    settings = load_settings(env={"HEALER_STATE_DIR": str(tmp_path / "state"),
                                  "HEALER__NOTIFY__BACKOFF_S": "0.01", **env})
    store = FileStore(settings.state_path / "store")
    return settings, store, inc.Ledger(store)


async def drain(n: Notifier) -> None:
    n.reconcile()
    for item in n.outbox.due(now=1e12):
        await n.deliver(item)


def escalate(ledger: inc.Ledger, key: str = "KeyError-in-app", severity: str = "critical",
             kind: str = "code") -> str:
    sig = inc.Signal(kind, key, "report_error", severity=severity,
                     summary="KeyError: 'user_id' in app/users.py:lookup", trust="trusted")
    ledger.receive(sig)
    ledger.escalated(sig.id, seed_file="/tmp/x.md", reason="three attempts failed")
    return sig.id


async def test_slack_web_api_posts_once_then_updates_in_place_with_buttons(tmp_path: Path
                                                                          ) -> None:
    with SlackApi(TOKEN) as slack:
        settings, store, ledger = setup(
            tmp_path, HEALER_SLACK_BOT_TOKEN=TOKEN, HEALER__NOTIFY__SLACK__CHANNEL="C0HEALER",
            HEALER__NOTIFY__SLACK__API_URL=slack.url + "/api")
        n = Notifier(settings, store)
        sig = inc.Signal("code", "k1", "report_error", severity="high", summary="boom",
                         trust="trusted")
        ledger.receive(sig)
        await drain(n)
        ledger.escalated(sig.id, seed_file="/tmp/s.md", reason="gave up")
        await drain(n)
        escalated = slack.calls[-1]["body"]
        ledger.resolve(sig.id, by="test")
        await drain(n)
    assert [c["method"] for c in slack.calls] == ["chat.postMessage", "chat.update",
                                                  "chat.update"]
    assert len(slack.messages) == 1  # one message per incident
    buttons = [b for block in escalated["blocks"] if block["type"] == "actions"
               for b in block["elements"]]
    assert [(b["action_id"], b["value"]) for b in buttons] == [
        ("healer_ack", sig.id), ("healer_silence_1h", sig.id)]
    final = next(iter(slack.messages.values()))
    assert final["channel"] == "C0HEALER" and "resolved" in final["text"]
    assert not any(b["type"] == "actions" for b in final["blocks"])


async def test_slack_approve_and_deny_buttons_while_waiting(tmp_path: Path) -> None:
    from healer.core.gate import Decision
    from healer.core.notify.notices import build
    from healer.core.notify.slack import blocks

    _, _, ledger = setup(tmp_path)
    sig = inc.Signal("code", "k2", "report_error", severity="critical", summary="x")
    ledger.receive(sig, decision=Decision("awaiting_approval", "waits"))
    notice = build(ledger.require(sig.id))
    assert notice.state == "awaiting_approval"
    actions = next(b for b in blocks(notice) if b["type"] == "actions")["elements"]
    assert [b["action_id"] for b in actions] == ["healer_approve", "healer_deny"]
    assert {b["value"] for b in actions} == {sig.id}


async def test_slack_incoming_webhook(tmp_path: Path) -> None:
    with WebhookReceiver(status=200) as hook:
        settings, store, ledger = setup(tmp_path, HEALER_SLACK_WEBHOOK=hook.url + "/services/T/B/x")
        iid = escalate(ledger)
        await drain(Notifier(settings, store))
    assert hook.posts[0]["path"] == "/services/T/B/x"
    assert hook.posts[0]["body"]["blocks"][0]["type"] == "header" and iid


async def test_pagerduty_trigger_acknowledge_resolve_with_one_dedup_key(tmp_path: Path) -> None:
    with PagerDutyEvents(ROUTING) as pd:
        settings, store, ledger = setup(tmp_path, HEALER_PAGERDUTY_ROUTING_KEY=ROUTING,
                                        HEALER__NOTIFY__PAGERDUTY__URL=pd.url + "/v2/enqueue")
        n = Notifier(settings, store)
        iid = escalate(ledger, severity="high")
        await drain(n)
        ledger.update(iid, "acknowledged", acknowledged={"by": "ana", "at": 1.0, "via": "cli"})
        await drain(n)
        ledger.resolve(iid, by="test")
        await drain(n)
    assert [e["event_action"] for e in pd.events] == ["trigger", "acknowledge", "resolve"]
    assert {e["dedup_key"] for e in pd.events} == {iid}
    assert pd.events[0]["payload"]["severity"] == "error"  # high → error
    assert status_view(settings, store)["targets"]["pagerduty"]["sent"] == 3


def test_pagerduty_severity_map() -> None:
    from healer.core.notify.pagerduty import SEVERITY

    assert SEVERITY == {"critical": "critical", "high": "error", "medium": "warning",
                        "low": "warning", "info": "info"}


async def test_signed_webhook_verifies_and_a_wrong_secret_does_not(tmp_path: Path) -> None:
    with SignedWebhook(SECRET) as hook:
        settings, store, ledger = setup(tmp_path, HEALER_NOTIFY_WEBHOOK_URL=hook.url + "/in",
                                        HEALER_NOTIFY_WEBHOOK_SECRET=SECRET)
        iid = escalate(ledger)
        await drain(Notifier(settings, store))
    got = hook.verified[0]
    assert got["body"]["type"] == "incident.escalated" and got["body"]["data"]["incident"] == iid
    assert hook.refused == 0
    wrong = "whsec_" + base64.b64encode(b"another-secret-of-thirty-two-by").decode()
    raw = json.dumps(got["body"], separators=(",", ":")).encode()
    assert not verify(wrong, got["headers"], raw)


def test_standard_webhooks_test_vector() -> None:
    """The Standard Webhooks reference libraries' vector."""
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    assert sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == \
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    headers = {"webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "webhook-timestamp": "1614265330",
               "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}
    assert verify(secret, headers, body, now=1614265330)
    assert not verify(secret, headers, body, now=1614265330 + 301)  # stale
    assert not verify(secret, headers, body + b" ", now=1614265330)


async def test_email_over_starttls_with_auth(tmp_path: Path) -> None:
    with SmtpInbox(tmp_path, user="healer", password="pw-for-the-test") as smtp:
        settings, store, ledger = setup(
            tmp_path, HEALER_SMTP_HOST="127.0.0.1", HEALER__NOTIFY__EMAIL__PORT=str(smtp.port),
            HEALER__NOTIFY__EMAIL__CA_FILE=str(smtp.cert), HEALER_SMTP_USER="healer",
            HEALER_SMTP_PASSWORD="pw-for-the-test",
            HEALER__NOTIFY__EMAIL__TO='["oncall@example.com"]')
        iid = escalate(ledger)
        await drain(Notifier(settings, store))
    msg = smtp.messages[0]
    body = msg.get_content()
    assert iid in msg["Subject"] or "KeyError" in msg["Subject"]
    assert msg["X-Healer-Incident"] == iid
    for part in ("What happened", "What healer did", "What to do", f"healer status {iid}"):
        assert part in body


async def test_email_with_a_wrong_password_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    with SmtpInbox(tmp_path, user="healer", password="right") as smtp:
        settings, store, ledger = setup(
            tmp_path, HEALER_SMTP_HOST="127.0.0.1", HEALER__NOTIFY__EMAIL__PORT=str(smtp.port),
            HEALER__NOTIFY__EMAIL__CA_FILE=str(smtp.cert), HEALER_SMTP_USER="healer",
            HEALER_SMTP_PASSWORD="wrong", HEALER__NOTIFY__EMAIL__TO='["a@example.com"]')
        escalate(ledger)
        await drain(Notifier(settings, store))
    view = status_view(settings, store)["targets"]["email"]
    assert not smtp.messages and view["failures"] + view["retries"] == 1
    assert view["last_error"]["detail"]
    assert "wrong" not in json.dumps(view)


async def test_discord_shorthand_keeps_escalations_of_p0_p1(tmp_path: Path) -> None:
    with WebhookReceiver() as hook:
        settings, store, ledger = setup(tmp_path,
                                        HEALER_DISCORD_WEBHOOK=hook.url + "/api/webhooks/1/abc")
        escalate(ledger, key="low-one", severity="medium")
        escalate(ledger, key="high-one", severity="high")
        await drain(Notifier(settings, store))
    assert len(hook.posts) == 1 and "[HIGH]" in hook.posts[0]["body"]["content"]


async def test_a_down_receiver_backs_off_then_delivers_and_gives_up_when_bounded(
        tmp_path: Path) -> None:
    with PagerDutyEvents(ROUTING) as pd:
        settings, store, ledger = setup(tmp_path, HEALER_PAGERDUTY_ROUTING_KEY=ROUTING,
                                        HEALER__NOTIFY__PAGERDUTY__URL=pd.url,
                                        HEALER__NOTIFY__MAX_ATTEMPTS="3",
                                        HEALER__NOTIFY__BACKOFF_S="10")
        n = Notifier(settings, store, clock=lambda: 1000.0)
        pd.down = True
        iid = escalate(ledger)
        n.reconcile()
        [item] = n.outbox.due(now=1000.0)
        assert not await n.deliver(item)
        [item] = n.outbox.items()
        assert item.tries == 1 and item.next_at == 1010.0  # backoff_s × 2^0
        assert not n.outbox.due(now=1005.0)  # not before its time
        assert not await n.deliver(item)
        assert n.outbox.items()[0].next_at == 1020.0  # doubled
        pd.down = False
        assert await n.deliver(n.outbox.items()[0])
        assert pd.events[0]["dedup_key"] == iid and not n.outbox.items()
        # Down for good: bounded tries, then failed, and visible.
        pd.down = True
        ledger.resolve(iid, by="test")
        n.reconcile()
        for _ in range(3):
            for it in n.outbox.items():
                await n.deliver(it)
    view = status_view(settings, store)
    assert view["queue"] == 0 and view["failed"][0]["state"] == "healed"
    assert view["targets"]["pagerduty"]["failures"] == 1
    assert view["targets"]["pagerduty"]["retries"] == 4
    assert "503" in view["targets"]["pagerduty"]["last_error"]["detail"]


async def test_secrets_in_incident_text_are_scrubbed_before_they_leave(tmp_path: Path) -> None:
    with PagerDutyEvents(ROUTING) as pd:
        settings, store, ledger = setup(tmp_path, HEALER_PAGERDUTY_ROUTING_KEY=ROUTING,
                                        HEALER__NOTIFY__PAGERDUTY__URL=pd.url)
        sig = inc.Signal("code", "leak", "report_error", severity="critical", trust="trusted",
                         summary="auth failed for ghp_abcdefghijklmnopqrstuvwxyz0123456789")
        ledger.receive(sig)
        ledger.escalated(sig.id, seed_file="", reason="x")
        n = Notifier(settings, store)
        await drain(n)
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in json.dumps(pd.events)
    assert pd.events and not n.outbox.items()


async def test_silenced_incidents_send_nothing(tmp_path: Path) -> None:
    with PagerDutyEvents(ROUTING) as pd:
        settings, store, ledger = setup(tmp_path, HEALER_PAGERDUTY_ROUTING_KEY=ROUTING,
                                        HEALER__NOTIFY__PAGERDUTY__URL=pd.url)
        sig = inc.Signal("play", "quiet", "detect", severity="critical")
        ledger.receive(sig)
        ledger.update(sig.id, silenced_by="sil-1")
        ledger.escalated(sig.id, seed_file="", reason="x")
        await drain(Notifier(settings, store))
    assert pd.events == []


def test_routes_first_match_wins_unless_continue() -> None:
    routes = r.parse([
        {"match": {"kind": "fleet"}, "targets": ["email"], "continue": True},
        {"match": {"severity": ["critical"], "labels": {"team": "infra"}},
         "targets": ["pagerduty", "slack"]},
        {"match": {"source": "sentry"}, "targets": ["webhook"]},
        {"targets": ["discord"]},
    ], [])

    def pick(kind: str = "code", severity: str = "high", source: str = "x",
             **labels: str) -> list[str]:
        return r.select(routes, kind=kind, severity=severity, source=source, labels=labels)

    assert pick(severity="critical", team="infra") == ["pagerduty", "slack"]
    assert pick(kind="fleet", severity="critical", team="infra") == ["email", "pagerduty",
                                                                     "slack"]
    assert pick(severity="critical", team="web") == ["discord"]
    assert pick(source="sentry") == ["webhook"]
    assert r.select(r.parse([], ["slack", "discord"]), kind="code", severity="high",
                    source="x", labels={}) == ["slack", "discord"]
    assert r.select(r.parse([], ["slack"]), kind="code", severity="medium", source="x",
                    labels={}) == []


@pytest.mark.parametrize("bad", [[{"targets": ["sms"]}], [{"targets": []}],
                                 [{"match": {"colour": "red"}, "targets": ["slack"]}],
                                 ["slack"]])
def test_bad_routes_are_a_clear_config_error(bad: list[Any]) -> None:
    with pytest.raises(ConfigError, match=r"notify\.routes"):
        r.parse(bad, [])


class FailingWrites(FileStore):
    """The store refuses the next ``fail`` writes of notify records (a NATS timeout)."""

    fail = 0

    def put(self, kind: str, key: str, data: dict[str, Any], **kw: Any) -> Any:
        if kind == "notify" and self.fail:
            self.fail -= 1
            raise StoreError("JetStream did not answer within 10s")
        return super().put(kind, key, data, **kw)


async def test_a_pass_whose_record_write_fails_queues_nothing(tmp_path: Path) -> None:
    """The notify record is written before the outbox: a pass that cannot write it sends
    nothing, and the next pass sends the notice once (queued first, it went out twice)."""
    with SignedWebhook(SECRET) as hook:
        settings, _, ledger = setup(tmp_path, HEALER_NOTIFY_WEBHOOK_URL=hook.url + "/in",
                                    HEALER_NOTIFY_WEBHOOK_SECRET=SECRET)
        store = FailingWrites(settings.state_path / "store")
        ledger = inc.Ledger(store)
        iid = escalate(ledger)
        n = Notifier(settings, store)
        store.fail = 1
        await drain(n)
        assert hook.verified == []
        for _ in range(2):
            ledger.update(iid, doing="something changed")  # the next passes look again
            await drain(n)
    assert [v["body"]["data"]["incident"] for v in hook.verified] == [iid]


async def test_a_delivery_in_flight_when_the_duty_stops_is_not_sent_again(
        tmp_path: Path) -> None:
    """The notify duty stops (and comes back) while a delivery is in flight: the delivery
    finishes and is recorded, so the service started again does not send it a second time."""
    import asyncio

    from healer.core.notify.service import NotifyService
    from healer.core.notify.targets import configured

    with SignedWebhook(SECRET) as hook:
        settings, store, ledger = setup(tmp_path, HEALER_NOTIFY_WEBHOOK_URL=hook.url + "/in",
                                        HEALER_NOTIFY_WEBHOOK_SECRET=SECRET)
        escalate(ledger)
        held = HeldAnswer(configured(settings.notify)["webhook"])
        n = Notifier(settings, store, targets={"webhook": held})
        passes: list[int] = []
        reconcile = n.reconcile
        n.reconcile = lambda: passes.append(1) or reconcile()  # type: ignore[method-assign]
        svc = NotifyService(n, interval_s=0.05)
        await svc.start()
        while not hook.verified:  # sent; its answer not yet recorded when the duty stops
            await asyncio.sleep(0.01)
        await svc.stop()
        held.release.set()
        await svc.start()
        seen = len(passes)
        while len(passes) < seen + 5:  # passes of the service started again
            await asyncio.sleep(0.01)
        await svc.stop()
    assert len(hook.verified) == 1 and n.outbox.items() == []


class FailingListings(FileStore):
    """The store cannot list the outbox the next ``fail`` times (a NATS timeout)."""

    fail = 0

    def keys(self, kind: str) -> list[str]:
        if kind == "notify-outbox" and self.fail:
            self.fail -= 1
            raise StoreError("JetStream did not answer within 10s")
        return super().keys(kind)


async def test_an_outbox_the_store_cannot_list_is_sent_on_a_later_pass(tmp_path: Path) -> None:
    """The outbox is in the store, which may be away: the service's pass logs it and the
    next one sends what is queued (the service does not die of it)."""
    from healer.core.notify.service import NotifyService
    from healer.testing.wait import until

    with SignedWebhook(SECRET) as hook:
        settings, _, _ = setup(tmp_path, HEALER_NOTIFY_WEBHOOK_URL=hook.url + "/in",
                               HEALER_NOTIFY_WEBHOOK_SECRET=SECRET)
        store = FailingListings(settings.state_path / "store")
        iid = escalate(inc.Ledger(store))
        n = Notifier(settings, store)
        store.fail = 2
        svc = NotifyService(n, interval_s=0.05)
        await svc.start()
        await until(lambda: hook.verified and store.fail == 0 and n.outbox.items() == [])
        await svc.stop()
    assert [v["body"]["data"]["incident"] for v in hook.verified] == [iid]


async def test_a_delivery_s_store_calls_leave_the_event_loop_free(tmp_path: Path) -> None:
    """On a shared store each store call is a network round trip: a delivery makes them off
    the event loop, which goes on serving (here: another coroutine runs while the store
    answers slowly), and the notice still goes out once."""
    import asyncio
    import threading

    with WebhookReceiver(status=200) as hook:
        settings, store, ledger = setup(tmp_path, HEALER_SLACK_WEBHOOK=hook.url + "/s/T/B/x")
        escalate(ledger)
        n = Notifier(settings, store)
        n.reconcile()
        [item] = n.outbox.due(now=1e12)
        in_call, answer = threading.Event(), threading.Event()
        waited_out: list[bool] = []
        real_get = store.get

        def slow_get(kind: str, key: str) -> Any:
            if kind == "notify":
                in_call.set()
                # On the event loop, this call would hold it: nothing could answer it.
                waited_out.append(not answer.wait(10))
            return real_get(kind, key)

        store.get = slow_get  # type: ignore[method-assign]
        delivery = asyncio.create_task(n.deliver(item))
        assert await asyncio.to_thread(in_call.wait, 10)
        ran = asyncio.Event()
        asyncio.get_running_loop().call_soon(ran.set)
        await asyncio.wait_for(ran.wait(), 10)  # the loop is free while the store answers
        assert not delivery.done()
        answer.set()
        assert await asyncio.wait_for(delivery, 10)
    assert waited_out and not any(waited_out) and len(hook.posts) == 1
