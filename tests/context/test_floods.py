"""Floods through the public Sentry DSN: bounded, counted, and unable to silence trusted reports.

The real sentry-sdk in its own process sends word-varied errors (each a new fingerprint) to a
real `healer serve`; the DSN key is public, so everything it sends is anonymous.
"""

from __future__ import annotations

import json
import re
import string
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from healer.testing.api import ServeProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
pytest.importorskip("sentry_sdk", reason="the test extra installs sentry-sdk")

KEY = "c0ffee00c0ffee00c0ffee00c0ffee00"
TOKEN = "flood-test-api-token-0123456789"
JUNK = '''def boom(word):
    raise ValueError(f"unknown coupon {word}")
'''
SDK = """
import sys
import sentry_sdk

sys.path.insert(0, {shop!r})
from app.junk import boom

sentry_sdk.init(dsn={dsn!r}, shutdown_timeout=10, default_integrations=False)
for i, word in enumerate({words!r}):
    try:
        boom(word)
    except ValueError as exc:
        sentry_sdk.capture_exception(exc)
    if i % 20 == 19:
        sentry_sdk.flush(10)  # the SDK's own queue holds 100 events
sentry_sdk.flush(10)
"""


def word(n: int) -> str:
    """Letters only: digits would be normalised out of the fingerprint."""
    out = ""
    while True:
        n, r = divmod(n, 26)
        out += string.ascii_lowercase[r]
        if not n:
            return out + "x"


def send(shop: Path, server: ServeProcess, words: list[str]) -> None:
    dsn = re.sub(r"^http://", f"http://{KEY}@", server.url.rstrip("/")) + "/3"
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SDK).format(
        shop=str(shop), dsn=dsn, words=words)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def metric(server: ServeProcess, name: str, **labels: str) -> float:
    total = 0.0
    for line in server.http.get("/metrics").text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line
                                              for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def code_incidents(server: ServeProcess) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = server.http.get(
        "/api/v1/incidents", params={"kind": "code", "limit": 500}).json()["incidents"]
    return found


@pytest.fixture
def shop(project: Path) -> Path:
    (project / "app" / "junk.py").write_text(JUNK)  # in the repository: healable
    return project


def test_a_word_varied_flood_opens_at_most_the_limit_and_counts_the_rest(
        serve_env: Any, shop: Path) -> None:
    """200 word-varied events through the DSN with the defaults but for a limit of 5 new
    incidents an hour: 5 incidents, all anonymous and waiting for a person (no agent ran),
    every other accepted event counted as dropped — and the SDK got protocol answers."""
    s = ServeProcess(serve_env(HEALER_SENTRY_KEY=KEY, HEALER__CODE__NEW_INCIDENTS_PER_HOUR="5"))
    try:
        send(shop, s, [word(i) for i in range(200)])

        def settled() -> Any:
            accepted = metric(s, "healer_webhooks_total", source="sentry_sdk",
                              result="accepted")
            dropped = metric(s, "healer_incidents_dropped_total", reason="new_incident_limit")
            found = code_incidents(s)
            return (accepted, dropped, found) if accepted and \
                dropped + len(found) >= accepted else None

        accepted, dropped, found = s.wait_for(settled, timeout=90)
        assert len(found) == 5, [i["summary"] for i in found]
        assert dropped == accepted - 5
        assert accepted >= 100  # the ingest's burst; past it the SDK was told 429 and held back
        assert {(i["trust"], i["status"], i["gate"]["reason"]) for i in found} == \
            {("anonymous", "open", "awaiting_approval")}
        assert all(i.get("attempts", 0) == 0 for i in found)
        assert "healer_incidents_dropped_total" in s.http.get("/metrics").text
    finally:
        s.close()


def test_anonymous_junk_that_fails_cannot_stop_a_trusted_report(
        serve_env: Any, shop: Path, tmp_path: Path) -> None:
    """With code.approval `never` (anonymous input runs agents by itself) and a breaker of
    two: two junk events run and fail, the third meets the breaker — of the anonymous lane.
    A report with the API token right after is accepted and started, not `circuit_breaker`."""
    from context_helpers import agent_command, plan

    nothing = plan(tmp_path / "agent", {"edits": [], "commit": None, "status": "fixed",
                                        "summary": "changed nothing"})
    commands = {"living-context-healer": agent_command(nothing),
                "healing-agent": [sys.executable, "-c", "pass"]}
    env = serve_env(HEALER_SENTRY_KEY=KEY, HEALER_TOKEN=TOKEN, HEALER__CODE__APPROVAL="never",
                    HEALER__SELFHEAL__BREAKER_WINDOW="2", HEALER__CONTEXT__MAX_ITERATIONS="1",
                    HEALER__EXECUTOR__DEFAULT="command",
                    HEALER__EXECUTOR__COMMANDS=json.dumps(commands))
    s = ServeProcess(env, token=TOKEN)
    try:
        send(shop, s, [word(1), word(2)])

        def both_failed() -> Any:
            found = code_incidents(s)
            return len(found) == 2 and all(i["status"] == "escalated" for i in found) and found

        found = s.wait_for(both_failed, timeout=120)
        assert {i["trust"] for i in found} == {"anonymous"}
        send(shop, s, [word(3)])

        def tripped() -> Any:
            third = [i for i in code_incidents(s) if word(3) in i["summary"]]
            return third and third[0].get("gate") and third[0]

        third = s.wait_for(tripped, timeout=60)
        assert third["gate"]["reason"] == "circuit_breaker", third["gate"]
        assert "anonymous" in third["gate"]["message"]

        r = s.http.post("/api/v1/errors", json={
            "error_type": "ZeroDivisionError", "error_message": "division by zero",
            "traceback": f'Traceback (most recent call last):\n  File "{shop}/app/payment.py",'
                         ' line 6, in average\n    return total / count\n'
                         'ZeroDivisionError: division by zero\n'})
        assert r.status_code == 202, r.text
        assert r.json()["accepted"] is True and r.json()["attempt_id"]
    finally:
        s.close()
