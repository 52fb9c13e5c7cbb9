"""The dashboard's Acknowledge and Silence buttons and its Silences page, through a real
`healer serve`: a silence added from the form marks what it covers, a critical escalation it
hides is shown on the front page, and expiring it clears both."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from healer.core.incidents import Ledger, Signal
from healer.core.store import FileStore
from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env

pytestmark = pytest.mark.e2e

TOKEN = "dash-silence-token-0123456789ab"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, Path]]:
    root = tmp_path_factory.mktemp("silence")
    env = healer_env(root / "state", root / "results", root / "fleet",
                     HEALER_EXECUTOR="command", HEALER__CONTEXT__ENABLED="false",
                     HEALER__API__TOKEN=TOKEN)
    s = ServeProcess(env, token=TOKEN)
    yield s, root / "state"
    s.close()


def _login(server: ServeProcess) -> httpx.Client:
    client = httpx.Client(base_url=server.url, timeout=10)
    r = client.post("/ui/login", data={"token": TOKEN, "next": "/"})
    assert r.status_code == 303, r.text
    return client


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found
    return found.group(1)


def test_silence_page_front_page_warning_ack_and_expire(
        served: tuple[ServeProcess, Path]) -> None:
    server, state = served
    book = Ledger(FileStore(state))
    sig = Signal(kind="play", key="pod-dead-x", source="play", severity="critical",
                 summary="pod dead in play-task-4")
    book.receive(sig)
    book.escalated(sig.id, seed_file="f.md", reason="three attempts failed")
    with closing(_login(server)) as client:
        assert 'id="hidden-critical"' not in client.get("/").text
        page = client.get("/ui/silences").text
        r = client.post("/ui/silences", data={
            "csrf": _csrf(page), "matchers": "kind=play\nkey=~pod-dead-.*", "duration": "1h",
            "by": "erin", "comment": "node drain"})
        assert r.status_code == 303 and r.headers["location"] == "/ui/silences?done=added"
        listed = client.get("/ui/silences").text
        sid = re.search(r'<tr id="(s-[0-9a-f]{12})"', listed).group(1)  # type: ignore[union-attr]
        assert "kind=play, key=~pod-dead-.*" in listed and "node drain" in listed
        assert book.require(sig.id)["silenced_by"] == sid
        front = client.get("/").text
        assert 'id="hidden-critical"' in front and sig.id in front and sid in front

        bad = client.post("/ui/silences", data={"csrf": _csrf(page), "matchers": "colour=red"})
        assert bad.status_code == 400 and "unknown matcher name" in bad.text

        detail = client.get(f"/ui/incidents/{sig.id}").text
        assert 'id="ack"' in detail and "Silenced by" in detail
        r = client.post(f"/ui/incidents/{sig.id}/ack", data={"csrf": _csrf(detail),
                                                             "by": "erin"})
        assert r.status_code == 303 and r.headers["location"].endswith("done=acknowledged")
        ack = book.require(sig.id)["acknowledged"]
        assert ack["via"] == "dashboard" and ack["by"].startswith("erin (dashboard session ")

        r = client.post(f"/ui/silences/{sid}/expire", data={"csrf": _csrf(listed)})
        assert r.status_code == 303
        assert "silenced_by" not in book.require(sig.id)
        assert 'id="hidden-critical"' not in client.get("/").text

        detail = client.get(f"/ui/incidents/{sig.id}").text
        r = client.post(f"/ui/incidents/{sig.id}/silence", data={"csrf": _csrf(detail)})
        assert r.status_code == 303 and r.headers["location"].endswith("done=silenced")
        assert book.require(sig.id)["silenced_by"].startswith("s-")
