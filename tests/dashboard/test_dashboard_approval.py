"""The dashboard's approve and deny buttons, through a real `healer serve` (no browser needed):
only a logged-in session with its CSRF token decides, and the audit names that session."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import closing

import httpx
import pytest

from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env

pytestmark = pytest.mark.e2e

TOKEN = "dash-approval-token-0123456789ab"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def _waiting(server: ServeProcess, n: int) -> str:
    """A report that waits for a person (code.approval: always); its incident id."""
    r = server.http.post("/api/v1/errors", json={
        "error_type": "KeyError", "error_message": f"'k{'x' * n}'",
        "call_site": f"src/app/m{n}.py:f"})
    assert r.json()["reason"] == "awaiting_approval", r.text
    return f"code-{r.json()['fingerprint']}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("approve")
    # `command` with no command: after an approval the gate still says no_model.
    env = healer_env(root / "state", root / "results", root / "fleet",
                     HEALER_EXECUTOR="command", HEALER__CONTEXT__ENABLED="false",
                     HEALER__API__TOKEN=TOKEN, HEALER__CODE__APPROVAL="always")
    s = ServeProcess(env, token=TOKEN)
    yield s
    s.close()


def _login(server: ServeProcess, target: str) -> httpx.Client:
    client = httpx.Client(base_url=server.url, timeout=10)
    r = client.post("/ui/login", data={"token": TOKEN, "next": target})
    assert r.status_code == 303, r.text
    return client


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found
    return found.group(1)


def test_a_logged_in_person_approves_and_the_audit_names_the_session(
        server: ServeProcess) -> None:
    iid = _waiting(server, 1)
    page = f"/ui/incidents/{iid}"
    with closing(_login(server, page)) as client:
        html = client.get(page).text
        assert "Waiting for a person&#39;s approval" in html or "Waiting for a person's" in html
        assert 'id="approve"' in html and 'id="deny"' in html
        refused = client.post(f"{page}/approve", data={"by": "eve"})  # no CSRF token
        assert refused.status_code == 403
        r = client.post(f"{page}/approve", data={"csrf": _csrf(html), "by": "erin",
                                                 "comment": "seen it"})
        assert r.status_code == 303 and r.headers["location"] == f"{page}?done=approved"
        assert "Approved" in client.get(r.headers["location"]).text
    data = server.http.get(f"/api/v1/incidents/{iid}").json()
    [rec] = [e for e in data["audit"] if e["event"] == "approved"]
    assert rec["via"] == "dashboard" and rec["comment"] == "seen it"
    assert re.fullmatch(r"erin \(dashboard session [0-9a-f]{8}\)", rec["by"]), rec["by"]
    # The approval admitted it through the one gate; the other gates still apply.
    assert data["incident"]["gate"]["reason"] == "no_model"


def test_a_bearer_reader_or_a_stranger_cannot_decide(server: ServeProcess) -> None:
    iid = _waiting(server, 2)
    url = f"/ui/incidents/{iid}/deny"
    with closing(httpx.Client(base_url=server.url, timeout=10)) as stranger:
        assert stranger.post(url, data={"csrf": "x"}).status_code == 403
    with closing(httpx.Client(base_url=server.url, timeout=10, headers=BEARER)) as reader:
        assert reader.post(url, data={"csrf": "x"}).status_code == 403  # pages only
    assert server.http.get(f"/api/v1/incidents/{iid}").json()["incident"]["status"] == "open"


def test_deny_resolves(server: ServeProcess) -> None:
    iid = _waiting(server, 3)
    page = f"/ui/incidents/{iid}"
    with closing(_login(server, page)) as client:
        r = client.post(f"{page}/deny", data={"csrf": _csrf(client.get(page).text)})
        assert r.status_code == 303 and r.headers["location"].endswith("done=denied")
    inc = server.http.get(f"/api/v1/incidents/{iid}").json()["incident"]
    assert inc["status"] == "resolved" and inc["resolved_by"].startswith("run denied by "
                                                                         "dashboard session")
