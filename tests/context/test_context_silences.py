"""A person's silence on the living-context road, through a real `healer serve`.

Signed Sentry webhook deliveries to the real HTTP server, a silence made over the API: the
matching alert is recorded and counted but starts no agent, its incident carries
``silenced_by``; once the silence ends, the next alert for the same issue starts the healing
agent (the scripted one) through the one gate.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from context_helpers import BUGGY, GOOD_FIX, SECRET, edit, plan

from healer.testing.api import ServeProcess
from healer.testing.webhooks import sentry_delivery, sentry_event_alert

pytestmark = [pytest.mark.e2e]
TOKEN = "context-silences-token-0123456789"


@pytest.fixture
def server(serve_env: Any, tmp_path: Path) -> Iterator[ServeProcess]:
    env = serve_env(plan=plan(tmp_path / "agent", edit(BUGGY, GOOD_FIX)), HEALER_TOKEN=TOKEN)
    srv = ServeProcess(env, token=TOKEN)
    try:
        yield srv
    finally:
        srv.close()


def alert(srv: ServeProcess) -> dict[str, Any]:
    """One signed event_alert about app/payment.py (a fresh event id: never a replay)."""
    raw, headers = sentry_delivery(sentry_event_alert(line=6), secret=SECRET)
    r = srv.http.post("/api/v1/webhooks/sentry", content=raw, headers=headers)
    assert r.status_code == 202, r.text
    (receipt,) = r.json()["incidents"]
    return dict(receipt)


def test_a_silence_stops_the_next_sentry_alerts_agent_and_expires_on_time(
        server: ServeProcess) -> None:
    srv = server
    r = srv.http.post("/api/v1/silences", json={
        "matchers": ["kind=code", "source=sentry",
                     {"name": "summary", "op": "=~", "value": "ZeroDivisionError.*"}],
        "duration": "4s", "by": "ops", "comment": "payments deploy"})
    assert r.status_code == 201, r.text
    sid = r.json()["silence"]["id"]

    first = alert(srv)
    assert (first["key"], first["action"], first["decision"]) == \
        ("sentry-4242", "opened", "silenced"), first
    assert not first.get("heal") and sid in first["message"]
    again = alert(srv)
    assert (again["action"], again["decision"]) == ("duplicate", "silenced") and \
        not again.get("heal"), again
    inc = srv.http.get("/api/v1/context/incidents/sentry-4242").json()["incident"]
    assert (inc["status"], inc["silenced_by"], inc["decision"]["reason"]) == \
        ("open", sid, "silenced")
    assert inc["occurrences"] == 2 and inc["rejections"] == {"silenced": 2}
    assert inc["attempts"] == []  # no agent: not even an attempt record

    srv.wait_for(lambda: srv.http.get("/api/v1/silences").json()["count"] == 0, timeout=15)
    after = alert(srv)
    assert after["heal"] is True and after["decision"] == "accepted", after
    inc = srv.http.get("/api/v1/context/incidents/sentry-4242").json()["incident"]
    assert "silenced_by" not in inc and inc["attempts"] == [after["attempt_id"]]
    assert inc["occurrences"] == 3
