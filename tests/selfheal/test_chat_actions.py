"""People acting where they already are: Slack's signed buttons, `healer ack`, silences.

Through the real parts: the real HTTP server (uvicorn on 127.0.0.1) with the guard in front,
requests signed exactly as Slack signs them (checked against Slack's documented example), the
real ``healer`` CLI in its own process, and the self-healing service whose launches are
recorded — so "started" means an attempt was created and launched, "nothing happened" means
no attempt, no verdict, the incident as it was.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from selfheal_helpers import serve
from test_approval import audit, cli, report

from healer.context.ingest import verify_slack
from healer.core.audit import Audit
from healer.core.incidents import Ledger
from healer.core.silences import Silences
from healer.core.store import FileStore
from healer.selfheal.service import SelfHealService
from healer.testing.wait import until

pytestmark = pytest.mark.e2e
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # the signing secret of Slack's own example
PATH = "/api/v1/slack/interactions"


def test_slacks_documented_signing_example_verifies() -> None:
    """api.slack.com, "Verifying requests from Slack": this body, timestamp and secret give
    exactly this signature; one changed byte, or the same request later, does not verify."""
    body = (b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&"
            b"channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&"
            b"command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2F"
            b"commands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id="
            b"398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
    sig = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    kw = {"now": 1531420618.0, "max_age_s": 300.0}
    assert verify_slack(SECRET, "1531420618", body, sig, **kw) == ""
    assert verify_slack(SECRET, "1531420618", body + b"x", sig, **kw) == "signature mismatch"
    assert "replay" in verify_slack(SECRET, "1531420618", body, sig,
                                    now=1531420618.0 + 301, max_age_s=300.0)


def click(action: str, iid: str, *, ts: float | None = None, secret: str = SECRET,
          user: str = "U2CERLKJA", name: str = "roadrunner") -> tuple[bytes, dict[str, str]]:
    """A block_actions interaction for one button, signed the way Slack signs it."""
    payload = {"type": "block_actions", "user": {"id": user, "username": name},
               "actions": [{"action_id": action, "value": iid, "type": "button"}],
               "trigger_id": f"t{time.monotonic_ns()}"}
    body = urlencode({"payload": json.dumps(payload)}).encode()
    stamp = str(int(time.time() if ts is None else ts))
    digest = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body,
                      hashlib.sha256).hexdigest()
    return body, {"Content-Type": "application/x-www-form-urlencoded",
                  "X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


def service(make_settings: Any, launched: list[str]) -> SelfHealService:
    settings = make_settings("fix")
    settings.webhooks.slack_signing_secret = SECRET
    return SelfHealService(settings, FileStore(settings.state_path), env={},
                           launcher=launched.append)


async def test_approve_from_a_signed_slack_button_starts_the_waiting_attempt(
        make_settings: Any, repo: Path) -> None:
    launched: list[str] = []
    svc = service(make_settings, launched)
    async with serve(svc, anonymous=True) as c:
        fp = (await c.post("/api/v1/errors", json=report(repo))).json()["fingerprint"]
        iid = f"code-{fp}"
        assert Ledger(svc.store).require(iid)["gate"]["reason"] == "awaiting_approval"
        assert launched == []
        body, headers = click("healer_approve", iid)
        r = await c.post(PATH, content=body, headers=headers)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["ok"] and out["decision"] == "accepted", out
        assert launched == [out["attempt_id"]]
        again = await c.post(PATH, content=body, headers=headers)  # the same click, replayed
        assert again.status_code == 401 and "replayed" in again.json()["error"]
    assert launched == [out["attempt_id"]]
    [rec] = audit(svc.settings, iid, "approved")
    assert (rec["by"], rec["via"]) == ("roadrunner (slack U2CERLKJA)", "slack")
    [act] = audit(svc.settings, iid, "slack_action")
    assert (act["user_id"], act["user_name"], act["action"]) == \
        ("U2CERLKJA", "roadrunner", "healer_approve")


async def test_a_forged_or_stale_signature_does_nothing(make_settings: Any,
                                                        repo: Path) -> None:
    """A wrong secret, an old timestamp, a changed body, no signature, no secret configured:
    401 with the reason and an audit entry, no verdict, no attempt. The token exemption is
    this one path: its neighbours still need the bearer token."""
    launched: list[str] = []
    svc = service(make_settings, launched)
    async with serve(svc, anonymous=True) as c:
        fp = (await c.post("/api/v1/errors", json=report(repo))).json()["fingerprint"]
        iid = f"code-{fp}"
        forged = click("healer_approve", iid, secret="not-the-secret")
        stale = click("healer_approve", iid, ts=time.time() - 301)
        body, headers = click("healer_approve", iid)
        tampered = (body.replace(b"U2CERLKJA", b"U0MALLORY"), headers)
        unsigned = (body, {"Content-Type": "application/x-www-form-urlencoded"})
        for (b, h), why in ((forged, "signature mismatch"), (stale, "replay window"),
                            (tampered, "signature mismatch"), (unsigned, "missing")):
            r = await c.post(PATH, content=b, headers=h)
            assert r.status_code == 401 and why in r.json()["error"], r.text
    svc.settings.webhooks.slack_signing_secret = ""
    async with serve(svc) as c:  # now with an API token, which Slack never sends
        r = await c.post(PATH, content=body, headers=headers)
        assert r.status_code == 401 and "no Slack signing secret" in r.json()["error"]
        for neighbour in (PATH + "/x", "/api/v1/slack/interactionsx"):
            r = await c.post(neighbour, content=body, headers={**headers,
                                                               "Authorization": ""})
            assert r.status_code == 401 and "bearer" in r.json()["error"], neighbour
    assert launched == [] and audit(svc.settings, iid, "approved") == []
    inc = Ledger(svc.store).require(iid)
    assert (inc["status"], inc["gate"]["reason"]) == ("open", "awaiting_approval")
    rejected = [e for e in Audit(svc.settings.state_path).read(limit=1000)
                if e["event"] == "slack_rejected"]
    assert len(rejected) == 5 and {e["reason"] for e in rejected} >= {"signature mismatch"}


async def test_ack_through_slack_the_api_and_the_cli(make_settings: Any, repo: Path) -> None:
    launched: list[str] = []
    svc = service(make_settings, launched)
    ids = []
    async with serve(svc) as c:
        for word in ("'alpha'", "'beta'", "'gamma'"):
            r = await c.post("/api/v1/errors", json=report(repo, word))
            ids.append(f"code-{r.json()['fingerprint']}")
        body, headers = click("healer_ack", ids[0], name="wile")
        r = await c.post(PATH, content=body, headers=headers)
        assert r.status_code == 200 and r.json()["ok"], r.text
        api = await c.post(f"/api/v1/incidents/{ids[1]}/ack", json={"by": "dana"})
        assert api.status_code == 200, api.text
        assert api.json()["incident"]["acknowledged"]["by"] == "dana (api token)"
        twice = await c.post(f"/api/v1/incidents/{ids[1]}/ack")
        assert twice.status_code == 409 and "already, by dana" in twice.json()["error"]
        missing = await c.post("/api/v1/incidents/code-nope/ack")
        assert missing.status_code == 404
    out = cli(svc.settings, "ack", ids[2], "--by", "alice")
    assert out.returncode == 0 and f"{ids[2]}: acknowledged by alice" in out.stdout, out.stderr
    again = cli(svc.settings, "ack", ids[2])
    assert again.returncode == 2 and "acknowledged already, by alice" in again.stderr
    book = Ledger(svc.store)
    assert [book.require(i)["acknowledged"]["via"] for i in ids] == ["slack", "api", "cli"]
    assert book.require(ids[0])["acknowledged"]["by"] == "wile (slack U2CERLKJA)"
    assert [e["by"] for e in audit(svc.settings, ids[2], "acknowledged")] == ["alice"]


async def test_a_silence_stops_the_next_matching_signals_agent_and_expires_on_time(
        make_settings: Any, repo: Path) -> None:
    """A silence made over the API (3 s): the matching report is recorded and counted but
    starts nothing, its incident `silenced_by`; a report it does not match starts at once.
    When the silence ends the mark is cleared and the next report starts its agent."""
    launched: list[str] = []
    svc = service(make_settings, launched)
    async with serve(svc) as c:
        r = await c.post("/api/v1/silences", json={
            "matchers": ["kind=code", {"name": "summary", "op": "=~", "value": "KeyError.*"}],
            "duration": "3s", "by": "ops", "comment": "deploying"})
        assert r.status_code == 201, r.text
        sid = r.json()["silence"]["id"]
        bad = await c.post("/api/v1/silences", json={"matchers": ["colour=red"]})
        assert bad.status_code == 400 and "unknown matcher name" in bad.json()["error"]
        hushed = (await c.post("/api/v1/errors", json=report(repo))).json()
        assert hushed["reason"] == "silenced" and sid in hushed["message"], hushed
        other = await c.post("/api/v1/errors", json={"error_type": "ValueError",
                                                     "error_message": "bad"})
        assert other.json()["accepted"], other.text
        assert len(launched) == 1
        iid = f"code-{hushed['fingerprint']}"
        inc = (await c.get(f"/api/v1/incidents/{iid}")).json()["incident"]
        assert (inc["silenced_by"], inc["count"], inc["gate"]["reason"]) == (sid, 1, "silenced")
        listed = (await c.get("/api/v1/silences")).json()["silences"]
        assert [(s["id"], s["state"], s["author"]) for s in listed] == \
            [(sid, "active", "ops (api token)")]

        await until(lambda: not Silences(svc.store).list(), 10)
        assert cli(svc.settings, "silence", "list").stdout.strip() == "no silences"
        assert "silenced_by" not in Ledger(svc.store).require(iid)  # the list reconciled it
        after = (await c.post("/api/v1/errors", json=report(repo))).json()
        assert after["accepted"], after
        assert len(launched) == 2


async def test_silence_from_slack_and_the_cli_and_expire(make_settings: Any,
                                                        repo: Path) -> None:
    launched: list[str] = []
    svc = service(make_settings, launched)
    async with serve(svc) as c:
        fp = (await c.post("/api/v1/errors", json=report(repo))).json()["fingerprint"]
        iid = f"code-{fp}"
        body, headers = click("healer_silence_1h", iid)
        r = await c.post(PATH, content=body, headers=headers)
        assert r.status_code == 200 and r.json()["ok"], r.text
        sid = r.json()["silence"]
        assert Ledger(svc.store).require(iid)["silenced_by"] == sid
        [s] = Silences(svc.store).list()
        assert round(s["ends_at"] - s["starts_at"]) == 3600
        assert s["matchers_text"] == f"kind=code, key={fp}"
        assert s["author"] == "roadrunner (slack U2CERLKJA)"
        gone = await c.delete(f"/api/v1/silences/{sid}")
        assert gone.status_code == 200 and gone.json()["silence"]["state"] == "expired"
    assert "silenced_by" not in Ledger(svc.store).require(iid)

    made = cli(svc.settings, "silence", "add", "node=peer-b", "--duration", "1h", "--by", "al",
               "--json")
    assert made.returncode == 0, made.stderr
    new = json.loads(made.stdout)["id"]
    assert cli(svc.settings, "silence", "expire", new).returncode == 0
    listed = json.loads(cli(svc.settings, "silence", "list", "--expired", "--json").stdout)
    assert {s["id"]: s["state"] for s in listed["silences"]} == {sid: "expired",
                                                                 new: "expired"}
    for bad, why in ((["add", "kind=~("], "not a regular expression"),
                     (["add", "kind=code", "--duration", "soon"], "not a duration"),
                     (["expire", "s-000000000000"], "no silence s-000000000000")):
        out = cli(svc.settings, "silence", *bad)
        assert out.returncode == 2 and why in out.stderr and "Traceback" not in out.stderr

