"""The webhook routes on a real `healer serve`: authentication, replays, end-to-end healing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from context_helpers import (
    AM_TOKEN,
    BUGGY,
    FLOAT_FIX,
    GOOD_FIX,
    SECRET,
    SLACK_SECRET,
    edit,
    plan,
)

from healer.testing.api import ServeProcess
from healer.testing.webhooks import (
    sentry_delivery,
    sentry_event_alert,
    slack_command,
    slack_delivery,
)

pytestmark = [pytest.mark.e2e]


@pytest.fixture
def serve(serve_env: Any) -> Iterator[Any]:
    started: list[ServeProcess] = []

    def start(**kw: Any) -> ServeProcess:
        proc = ServeProcess(serve_env(**kw))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()


def post_sentry(srv: ServeProcess, body: dict[str, Any], *, secret: str = SECRET,
                resource: str = "event_alert", tamper: bool = False) -> Any:
    raw, headers = sentry_delivery(body, secret=secret, resource=resource)
    if tamper:
        raw = raw.replace(b'"level": "error"', b'"level": "errox"')
    return srv.http.post("/api/v1/webhooks/sentry", content=raw, headers=headers)


def incident(srv: ServeProcess, key: str) -> dict[str, Any] | None:
    resp = srv.http.get(f"/api/v1/context/incidents/{key}")
    return resp.json() if resp.status_code == 200 else None


def metric(srv: ServeProcess, source: str, result: str) -> float:
    for line in srv.http.get("/metrics").text.splitlines():
        if line.startswith("healer_webhooks_total{") and f'source="{source}"' in line \
                and f'result="{result}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class TestSentryEndToEnd:
    def test_signed_alert_is_healed_to_a_verified_fix(self, serve: Any, tmp_path: Path,
                                                      dirs: Any) -> None:
        """A signed event_alert about app/payment.py is accepted at once (202) and healed in
        the background: rejected on iteration 1 (float), verified on 2, PR record written."""
        srv = serve(plan=plan(tmp_path / "agent", edit(BUGGY, FLOAT_FIX),
                              edit(FLOAT_FIX, GOOD_FIX)))
        resp = post_sentry(srv, sentry_event_alert(line=6))
        assert resp.status_code == 202, resp.text
        (receipt,) = resp.json()["incidents"]
        assert receipt["key"] == "sentry-4242" and receipt["action"] == "opened"
        assert receipt["heal"] is True and receipt["status"] == "healing"
        done = srv.wait_for(lambda: (i := incident(srv, "sentry-4242")) and i["incident"][
            "status"] in ("fixed", "escalated") and i, timeout=90)
        inc = done["incident"]
        assert inc["status"] == "fixed", inc.get("escalation")
        assert inc["fix"]["iterations"] == 2
        events = [e["event"] for e in done["audit"]]
        assert events.count("verdict") == 2 and "pr_opened" in events
        pr = json.loads((dirs.state / "forge" / "prs" / "1.json").read_text())
        assert pr["head"] == inc["fix"]["branch"] and "Verdict: PASSED" in pr["body"]
        assert metric(srv, "sentry", "accepted") == 1

    def test_signatures_and_replays(self, serve: Any) -> None:
        """A body altered by one byte, or signed with another secret, is refused (401); a
        replayed delivery is answered but dropped; other resources are ignored."""
        srv = serve(HEALER__EXECUTOR__DEFAULT="playbook")  # record only: no agent here
        body = sentry_event_alert(line=6)
        assert post_sentry(srv, body, tamper=True).status_code == 401
        assert post_sentry(srv, body, secret="someone-else").status_code == 401
        unsigned = srv.http.post("/api/v1/webhooks/sentry", json=body,
                                 headers={"Sentry-Hook-Resource": "event_alert"})
        assert unsigned.status_code == 401
        assert incident(srv, "sentry-4242") is None
        raw, headers = sentry_delivery(body, secret=SECRET)
        first = srv.http.post("/api/v1/webhooks/sentry", content=raw, headers=headers)
        replay = srv.http.post("/api/v1/webhooks/sentry", content=raw, headers=headers)
        assert first.status_code == 202 and replay.status_code == 200
        assert replay.json()["status"] == "duplicate"
        assert incident(srv, "sentry-4242")["incident"]["occurrences"] == 1
        other = post_sentry(srv, {"action": "created", "data": {}}, resource="installation")
        assert other.status_code == 200 and other.json()["status"] == "ignored"
        bad, bad_headers = sentry_delivery({"action": "triggered", "data": {}}, secret=SECRET)
        assert srv.http.post("/api/v1/webhooks/sentry", content=bad,
                             headers=bad_headers).status_code == 400
        assert metric(srv, "sentry", "unauthorized") == 3
        assert metric(srv, "sentry", "duplicate") == 1

    def test_nothing_is_trusted_without_secrets(self, serve: Any) -> None:
        """With no secrets configured every webhook is refused, whatever it carries."""
        srv = serve(HEALER_SENTRY_SECRET="", HEALER_ALERTMANAGER_TOKEN="",
                    HEALER_SLACK_SECRET="")
        resp = post_sentry(srv, sentry_event_alert(), secret="")
        assert resp.status_code == 401 and "no Sentry client secret" in resp.json()["error"]
        am = srv.http.post("/api/v1/webhooks/alertmanager", json={"version": "4", "alerts": []},
                           headers={"Authorization": "Bearer anything"})
        assert am.status_code == 401 and "no Alertmanager token" in am.json()["error"]
        raw, headers = slack_delivery(slack_command("x.py:1 boom"), secret="")
        sl = srv.http.post("/api/v1/webhooks/slack", content=raw, headers=headers)
        assert sl.status_code == 401


class TestOtherSources:
    def test_alertmanager_bearer(self, serve: Any) -> None:
        """Alertmanager needs the bearer token; with it, firing alerts open incidents."""
        srv = serve(HEALER__EXECUTOR__DEFAULT="playbook")
        body = {"version": "4", "status": "firing", "alerts": [{
            "status": "firing", "fingerprint": "c0ffee", "labels": {"alertname": "Err"},
            "annotations": {"summary": "KeyError: 'sku'", "file": "app/util.py"}}]}
        wrong = srv.http.post("/api/v1/webhooks/alertmanager", json=body,
                              headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        ok = srv.http.post("/api/v1/webhooks/alertmanager", json=body,
                           headers={"Authorization": f"Bearer {AM_TOKEN}"})
        assert ok.status_code == 202
        assert incident(srv, "am-c0ffee")["incident"]["error"]["file"] == "app/util.py"
        bad = srv.http.post("/api/v1/webhooks/alertmanager", json={"version": "3"},
                            headers={"Authorization": f"Bearer {AM_TOKEN}"})
        assert bad.status_code == 400 and "version" in bad.json()["error"]

    def test_slack_report_by_hand(self, serve: Any) -> None:
        """A signed /heal opens an incident and tells the person; a stale timestamp or a
        changed body is refused; an empty /heal gets the usage."""
        srv = serve(HEALER__EXECUTOR__DEFAULT="playbook")
        form = slack_command("app/payment.py:6 ZeroDivisionError on an empty basket")
        raw, headers = slack_delivery(form, secret=SLACK_SECRET)
        resp = srv.http.post("/api/v1/webhooks/slack", content=raw, headers=headers)
        assert resp.status_code == 200, resp.text
        text = resp.json()["text"]
        assert resp.json()["response_type"] == "ephemeral" and "recorded incident" in text
        key = text.split("`")[1]
        inc = incident(srv, key)["incident"]
        assert inc["error"]["file"] == "app/payment.py" and inc["source"] == "slack"
        assert inc["decision"]["reason"] == "no_model"
        stale_raw, stale = slack_delivery(form, secret=SLACK_SECRET,
                                          timestamp=int(time.time()) - 600)
        assert srv.http.post("/api/v1/webhooks/slack", content=stale_raw,
                             headers=stale).status_code == 401
        assert srv.http.post("/api/v1/webhooks/slack", content=raw + b"x",
                             headers=headers).status_code == 401
        empty_raw, empty = slack_delivery(slack_command(""), secret=SLACK_SECRET)
        usage = srv.http.post("/api/v1/webhooks/slack", content=empty_raw, headers=empty)
        assert usage.status_code == 200 and "usage: /heal" in usage.json()["text"]

    def test_incident_list_and_openapi(self, serve: Any) -> None:
        """The incident views answer; unknown keys are 404; the routes are documented."""
        srv = serve()
        assert srv.http.get("/api/v1/context/incidents").json()["count"] == 0
        assert srv.http.get("/api/v1/context/incidents/nope").status_code == 404
        assert srv.http.get("/api/v1/context/incidents?status=weird").status_code == 400
        paths = srv.http.get("/openapi.json").json()["paths"]
        assert "/api/v1/webhooks/sentry" in paths and "/api/v1/context/incidents" in paths
