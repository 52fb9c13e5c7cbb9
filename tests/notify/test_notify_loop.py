"""The end-to-end test of notifications: a real `healer loop` where one escalation of each kind
(a play whose agent lacks a tool, a `report_error`, a fleet peer that does not answer — every
agent one command that fails) reaches Slack (one message per incident, updated in place to
resolved), PagerDuty (trigger → resolve, one dedup_key), a webhook receiver that verifies the
Standard Webhooks signature and an SMTP inbox (STARTTLS + AUTH). A Discord receiver that is
down delays none of them, and its failure shows in `healer status --json` and /metrics."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from healer.config import load_settings
from healer.core import incidents as inc
from healer.core.store import open_store
from healer.demo.ports import free_port
from healer.testing.loop import LoopProcess, healer_env
from healer.testing.notify_receivers import PagerDutyEvents, SignedWebhook, SlackApi, SmtpInbox
from healer.testing.wait import wait_for

pytestmark = [pytest.mark.e2e]

TOKEN = "notify-loop-token-0123456789"
SLACK = "xoxb-2-notify-loop-test"
ROUTING = "R0123456789abcdef0123456789abcde"
SECRET = "whsec_" + base64.b64encode(b"the-notify-loop-secret-32-bytes!").decode()
AGENT = r"""
import json, os, sys
with open(sys.argv[1], "w") as fh:
    json.dump({"schema_version": 1, "kind": os.environ["HEALER_KIND"],
               "target": os.environ["HEALER_TARGET"], "run_id": os.environ["HEALER_RUN_ID"],
               "status": "failed", "summary": "the test agent cannot fix anything"}, fh)
"""


def test_one_escalation_of_each_kind_reaches_every_target(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    fleet_config = tmp_path / "multifleet.json"
    fleet_config.write_text(json.dumps({"chief": {"nodeId": "testnode", "host": "127.0.0.1"},
                                        "nodes": {"testnode": {"host": "127.0.0.1",
                                                               "port": free_port(),
                                                               "role": "chief"},
                                                  "p0": {"host": "127.0.0.20",
                                                         "port": free_port(), "user": "nobody",
                                                         "role": "worker"}}}))
    repo = tmp_path / "repo"
    (repo / "src" / "app").mkdir(parents=True)
    (repo / "src" / "app" / "mod0.py").write_text("def handler():\n    return {}\n")
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "x"]):
        subprocess.run(["git", *argv], cwd=repo, check=True)
    port = free_port()
    with SlackApi(SLACK) as slack, PagerDutyEvents(ROUTING) as pd, \
            SignedWebhook(SECRET) as hook, \
            SmtpInbox(tmp_path, user="healer", password="loop-test-pw") as smtp:
        env = healer_env(
            tmp_path / "state", tmp_path / "results", tmp_path / "fleet",
            HEALER_FLEET_CONFIG=str(fleet_config), HEALER__API__ENABLED="true",
            HEALER_FLEET_SECRET="notify-loop-test-fleet-secret", HEALER_PORT=str(port),
            HEALER_TOKEN=TOKEN, HEALER_EXECUTOR="command",
            HEALER__EXECUTOR__COMMANDS=json.dumps(
                {"*": [sys.executable, str(script), "{result_file}"]}),
            HEALER__PLAY__REEVALUATE_AFTER_S="0.1", HEALER__PLAY__MAX_ITERATIONS="1",
            HEALER__FLEET__HEAL_INTERVAL_S="1", HEALER__FLEET__WATCHDOG_START_S="600",
            HEALER__FLEET__MAX_HEAL_ATTEMPTS="1", HEALER__FLEET__HEAL_WAIT_S="1",
            HEALER__FLEET__AGENT_TIMEOUT_S="30",
            HEALER__NOTIFY__INTERVAL_S="0.2", HEALER__NOTIFY__BACKOFF_S="0.5",
            HEALER__NOTIFY__MAX_ATTEMPTS="2",
            HEALER__NOTIFY__ROUTES=json.dumps([{"targets": [
                "slack", "pagerduty", "webhook", "email", "discord"]}]),
            HEALER_SLACK_BOT_TOKEN=SLACK, HEALER__NOTIFY__SLACK__CHANNEL="C0HEALER",
            HEALER__NOTIFY__SLACK__API_URL=slack.url + "/api",
            HEALER_PAGERDUTY_ROUTING_KEY=ROUTING,
            HEALER__NOTIFY__PAGERDUTY__URL=pd.url + "/v2/enqueue",
            HEALER_NOTIFY_WEBHOOK_URL=hook.url + "/healer", HEALER_NOTIFY_WEBHOOK_SECRET=SECRET,
            HEALER_SMTP_HOST="127.0.0.1", HEALER__NOTIFY__EMAIL__PORT=str(smtp.port),
            HEALER__NOTIFY__EMAIL__CA_FILE=str(smtp.cert), HEALER_SMTP_USER="healer",
            HEALER_SMTP_PASSWORD="loop-test-pw",
            HEALER__NOTIFY__EMAIL__TO='["oncall@example.com"]',
            # Discord is down: nothing listens on this port.
            HEALER_DISCORD_WEBHOOK=f"http://127.0.0.1:{free_port()}/api/webhooks/1/down")
        with LoopProcess(env, cwd=repo) as loop:
            api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                               headers={"Authorization": f"Bearer {TOKEN}"})
            r = api.post("/api/v1/session/start", json={
                "play_id": "play-notify-0", "repository": "5dlabs/cto",
                "cto_config": {"agents": {"rex": {"tools": {"remote": ["brave_search"]}}}}})
            assert r.status_code == 200, r.text
            r = api.post("/api/v1/session/play-notify-0/logs", json={"agent": "rex", "lines": [
                "ERROR Tool inventory MISMATCH for rex: missing: brave_search"]})
            assert r.status_code == 200, r.text
            r = api.post("/api/v1/errors", json={
                "error_type": "KeyError", "error_message": "'field_0'",
                "call_site": "src/app/mod0.py:handler"})
            assert r.status_code in (200, 202), r.text

            def triggered() -> set[str]:
                return {e["dedup_key"].split("-", 1)[0] for e in pd.events
                        if e["event_action"] == "trigger"}

            try:
                wait_for(lambda: triggered() >= {"code", "play", "fleet"}, timeout=240)
            except AssertionError:
                raise AssertionError(f"triggers {triggered()}\n{loop.log()[-3000:]}") from None
            escalated = {e["dedup_key"] for e in pd.events if e["event_action"] == "trigger"}
            wait_for(lambda: {m["X-Healer-Incident"] for m in smtp.messages} >= escalated,
                     timeout=60)
            wait_for(lambda: {v["body"]["data"]["incident"] for v in hook.verified
                              if v["body"]["type"] == "incident.escalated"} >= escalated,
                     timeout=60)
            # A person resolves the code incident: Slack's message and PagerDuty follow.
            code = next(i for i in escalated if i.startswith("code-"))
            settings = load_settings(env=env)
            inc.Ledger(open_store(settings)).resolve(code, by="test")
            wait_for(lambda: any(e["event_action"] == "resolve" and e["dedup_key"] == code
                                 for e in pd.events), timeout=60)

            def slack_of(iid: str) -> list[dict[str, Any]]:
                return [m for m in slack.messages.values() if any(
                    f"`{iid}`" in f["text"] for b in m["blocks"] for f in b.get("fields", []))]

            wait_for(lambda: [m for m in slack_of(code) if "resolved" in m["text"]], timeout=60)

            # The down Discord gave up after its bounded tries; visible in status and metrics.
            def status() -> dict[str, Any]:
                out = subprocess.run([sys.executable, "-m", "healer", "status", "--json"],
                                     env=env, cwd=repo, capture_output=True, text=True,
                                     timeout=60)
                return dict(json.loads(out.stdout)["overview"]["notify"])

            wait_for(lambda: status()["targets"]["discord"]["failures"] >= 3, timeout=60)
            view = status()
            metrics = api.get("/metrics").text
            loop.stop()
    assert len(slack_of(code)) == 1  # one message, updated in place
    posts = [c for c in slack.calls if c["method"] == "chat.postMessage"]
    assert len(posts) == len({c["body"]["blocks"][1]["fields"][2]["text"] for c in posts})
    assert [e["event_action"] for e in pd.events if e["dedup_key"] == code] == [
        "trigger", "resolve"]
    assert hook.refused == 0
    assert view["targets"]["slack"]["sent"] >= 4 and view["targets"]["discord"]["sent"] == 0
    assert "ConnectError" in view["targets"]["discord"]["last_error"]["detail"]
    assert 'healer_notify_failures_total{target="discord"}' in metrics
    assert 'healer_notify_sent_total{target="pagerduty"}' in metrics
    assert "healer_notify_queue_depth" in metrics
    assert "loop-test-pw" not in loop.log() and SLACK not in loop.log()
