"""A code incident says what it is about, on every surface an operator reads.

Sentry sends the same ``ZeroDivisionError`` in ``apply_discount`` three times from one release
and once from the next: the incident (``GET /api/v1/incidents``, ``/api/v1/incidents/{id}``,
``healer status <id>`` as text and ``--json``, the dashboard) names the culprit
``file:function`` and line, the exception type, the latest release and environment, and per
release when it was first and last seen and how often. What the sender wrote is scrubbed and
cut before it is kept there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from context_helpers import SECRET

from healer.core.schemas import validator
from healer.testing.api import ServeProcess
from healer.testing.webhooks import sentry_delivery, sentry_event_alert

pytestmark = [pytest.mark.e2e]

# Not a file of the shop: the incident is recorded only (no agent starts in this test).
CULPRIT = "shop/discounts.py:apply_discount"
EVENT = {"error_type": "ZeroDivisionError", "message": "division by zero",
         "file": "shop/discounts.py", "function": "apply_discount", "line": 41,
         "issue_id": "7777", "environment": "production"}


@pytest.fixture
def env(serve_env: Any) -> dict[str, str]:
    return dict(serve_env())


@pytest.fixture
def server(env: dict[str, str]) -> Iterator[ServeProcess]:
    s = ServeProcess(env)
    yield s
    s.close()


def send(server: ServeProcess, **kw: Any) -> None:
    raw, headers = sentry_delivery(sentry_event_alert(**{**EVENT, **kw}), secret=SECRET)
    r = server.http.post("/api/v1/webhooks/sentry", content=raw, headers=headers)
    assert r.status_code == 202, r.text


def status(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "healer", "status", *args], env=env,
                          text=True, capture_output=True, timeout=60)


def test_a_sentry_incident_names_its_culprit_and_releases(server: ServeProcess,
                                                          env: dict[str, str]) -> None:
    for _ in range(3):
        send(server, release="shop@2.0.1")
    send(server, release="shop@2.0.2", environment="staging")

    listed = server.http.get("/api/v1/incidents", params={"kind": "code"}).json()
    [inc] = [i for i in listed["incidents"] if i["id"] == "code-sentry-7777"]
    about = inc["about"]
    assert about["culprit"] == CULPRIT and about["line"] == 41
    assert about["error_type"] == "ZeroDivisionError"
    assert about["release"] == "shop@2.0.2" and about["environment"] == "staging"
    old, new = about["releases"]["shop@2.0.1"], about["releases"]["shop@2.0.2"]
    assert old["count"] == 3 and new["count"] == 1 and inc["count"] == 4
    assert old["first"] <= old["last"] <= new["first"] == new["last"]
    validator("incident").validate(inc)

    one = server.http.get("/api/v1/incidents/code-sentry-7777").json()["incident"]
    assert one["about"] == about
    validator("incident").validate(one)

    shown = status(env, "code-sentry-7777", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["incident"]["about"] == about
    text = status(env, "code-sentry-7777")
    assert text.returncode == 0, text.stderr
    assert f"culprit {CULPRIT}, line 41, error type ZeroDivisionError" in text.stdout
    assert "release shop@2.0.2, environment staging" in text.stdout
    assert "shop@2.0.1 (first " in text.stdout and "count 3)" in text.stdout
    overview = status(env)
    assert f"culprit {CULPRIT}" in overview.stdout

    page = server.http.get("/ui/incidents")
    assert page.status_code == 200 and CULPRIT in page.text
    detail = server.http.get("/ui/incidents/code-sentry-7777")
    assert detail.status_code == 200 and 'id="about"' in detail.text
    assert CULPRIT in detail.text and "shop@2.0.1" in detail.text and "×3" in detail.text


def test_what_the_sender_wrote_is_scrubbed_and_cut(server: ServeProcess,
                                                   env: dict[str, str]) -> None:
    token = "ghp_" + "a1B2c3D4e5" * 4
    send(server, release=f"shop@3 {token}", environment="prod\x1b[31m\nred",
         function="f" * 5000, issue_id="8888")
    one = server.http.get("/api/v1/incidents/code-sentry-8888").json()["incident"]
    about = one["about"]
    assert token not in json.dumps(one)
    assert about["release"] == "shop@3 [REDACTED-API-KEY]"
    assert "\x1b" not in about["environment"] and "\n" not in about["environment"]
    assert len(about["culprit"]) == 200
    validator("incident").validate(one)


def test_an_unknown_incident_is_a_usage_error(server: ServeProcess,
                                              env: dict[str, str]) -> None:
    got = status(env, "code-nothing-here")
    assert got.returncode == 2 and "no incident 'code-nothing-here'" in got.stderr
    assert "Traceback" not in got.stderr
