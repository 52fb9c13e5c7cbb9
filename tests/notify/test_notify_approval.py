"""An approval that waits is put before a person in Slack, and Slack's Approve starts it.

Through a real `healer loop` (API on 127.0.0.1, no token: the report is anonymous input) and
a receiver that speaks Slack's Web API: the anonymous report waits for a person
(``awaiting_approval``); within a reconciler pass Slack gets one message with Approve / Deny.
A click on Approve, signed the way Slack signs it, starts the healing agent (a real command
that holds until the test lets it go), and the same message is updated in place
(``chat.update``, same ``ts``) to "investigating", then — the agent fails — to the escalation
with Acknowledge / Silence 1h.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from healer.core.audit import Audit
from healer.demo.ports import free_port
from healer.testing.loop import LoopProcess, healer_env
from healer.testing.notify_receivers import SlackApi
from healer.testing.wait import wait_for
from healer.testing.webhooks import slack_delivery

pytestmark = [pytest.mark.e2e]

SLACK = "xoxb-2-notify-approval-test"
SIGNING = "notify-approval-signing-secret"
# Holds until the test creates the release file (a deadline, not a sleep), then fails.
AGENT = r"""
import json, os, sys, time
release, deadline = sys.argv[2], time.monotonic() + 120
while not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.05)
with open(sys.argv[1], "w") as fh:
    json.dump({"schema_version": 1, "kind": os.environ["HEALER_KIND"],
               "target": os.environ["HEALER_TARGET"], "run_id": os.environ["HEALER_RUN_ID"],
               "status": "failed", "summary": "the test agent cannot fix anything"}, fh)
"""


def git_repo(repo: Path) -> Path:
    (repo / "src" / "app").mkdir(parents=True)
    (repo / "src" / "app" / "mod0.py").write_text("def handler():\n    return {}\n")
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "x"]):
        subprocess.run(["git", *argv], cwd=repo, check=True)
    return repo


def click(action: str, iid: str) -> tuple[bytes, dict[str, str]]:
    """A block_actions interaction for one of the message's buttons, signed as Slack signs."""
    payload = {"type": "block_actions", "user": {"id": "U2CERLKJA", "username": "roadrunner"},
               "actions": [{"action_id": action, "value": iid, "type": "button"}],
               "trigger_id": f"t{time.monotonic_ns()}"}
    return slack_delivery({"payload": json.dumps(payload)}, secret=SIGNING)


def buttons(body: dict[str, Any]) -> list[str]:
    return [e["action_id"] for b in body["blocks"] if b["type"] == "actions"
            for e in b["elements"]]


def test_slack_approve_starts_the_waiting_attempt_and_the_message_follows(
        tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    gate = tmp_path / "gate"  # the agent's sandbox may read and write here
    gate.mkdir()
    release = gate / "release"
    repo = git_repo(tmp_path / "repo")
    port = free_port()
    with SlackApi(SLACK) as slack:
        env = healer_env(
            tmp_path / "state", tmp_path / "results", tmp_path / "fleet",
            HEALER__API__ENABLED="true", HEALER_PORT=str(port), HEALER_EXECUTOR="command",
            HEALER__EXECUTOR__COMMANDS=json.dumps(
                {"*": [sys.executable, str(script), "{result_file}", str(release)]}),
            HEALER__AGENTS__SANDBOX_WRITE_PATHS=json.dumps([str(gate)]),
            HEALER__NOTIFY__INTERVAL_S="0.2",
            HEALER__NOTIFY__ROUTES=json.dumps([{"targets": ["slack"]}]),
            HEALER_SLACK_BOT_TOKEN=SLACK, HEALER__NOTIFY__SLACK__CHANNEL="C0HEALER",
            HEALER__NOTIFY__SLACK__API_URL=slack.url + "/api", HEALER_SLACK_SECRET=SIGNING)
        with LoopProcess(env, cwd=repo) as loop:
            api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
            r = api.post("/api/v1/errors", json={  # no token: anonymous input
                "error_type": "KeyError", "error_message": "'field_0'",
                "call_site": "src/app/mod0.py:handler"})
            assert r.status_code == 200 and r.json()["reason"] == "awaiting_approval", r.text
            iid = f"code-{r.json()['fingerprint']}"

            def posted() -> list[dict[str, Any]]:
                return [c for c in slack.calls if c["method"] == "chat.postMessage"
                        and any(f"`{iid}`" in f["text"] for b in c["body"]["blocks"]
                                for f in b.get("fields", []))]

            try:
                (first,) = wait_for(posted, timeout=30)
            except AssertionError:
                raise AssertionError(f"no Slack message\n{loop.log()[-3000:]}") from None
            assert "waiting for a person's approval" in first["body"]["text"]
            assert buttons(first["body"]) == ["healer_approve", "healer_deny"]
            ts = next(t for t, m in slack.messages.items() if m is first["body"])

            def updates() -> list[str]:
                return [c["body"]["text"] for c in slack.calls
                        if c["method"] == "chat.update" and c["body"]["ts"] == ts]

            body, headers = click("healer_approve", iid)
            r = api.post("/api/v1/slack/interactions", content=body, headers=headers)
            assert r.status_code == 200, r.text
            assert r.json()["ok"] and r.json()["decision"] == "accepted", r.json()
            wait_for(lambda: any("healer is investigating" in t for t in updates()), timeout=30)
            assert buttons(slack.messages[ts]) == []

            release.write_text("go\n")
            try:
                wait_for(lambda: any("ESCALATED" in t for t in updates()), timeout=120)
            except AssertionError:
                raise AssertionError(f"updates {updates()}\n{loop.log()[-3000:]}") from None
            assert buttons(slack.messages[ts]) == ["healer_ack", "healer_silence_1h"]
            assert len(posted()) == 1  # one message, updated in place
            loop.stop()
    [approved] = [e for e in Audit(tmp_path / "state").read(iid, limit=100)
                  if e["event"] == "approved"]
    assert (approved["by"], approved["via"]) == ("roadrunner (slack U2CERLKJA)", "slack")
