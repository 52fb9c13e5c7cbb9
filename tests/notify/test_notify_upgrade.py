"""An upgrade loses no notification: a real ``healer loop`` started on a state dir where an
older healer left its outbox as files (``<state>/notify/outbox/``, ``notify/failed/``) moves
them into the store at start, sends the pending one once, shows the given-up one in
``healer status``, and leaves no file behind."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from healer.core.notify.base import Notice
from healer.testing.loop import LoopProcess, healer_env
from healer.testing.notify_receivers import SignedWebhook
from healer.testing.wait import wait_for

pytestmark = [pytest.mark.e2e]

SECRET = "whsec_" + base64.b64encode(b"the-notify-upgrade-secret-32byte").decode()


def old_file(path: Path, target: str, incident: str, **fields: object) -> None:
    """A delivery as the file outbox wrote it."""
    notice = Notice(incident=incident, kind="code", state="escalated", severity="critical",
                    title=f"{incident} needs a person", at=1.0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"target": target, "notice": notice.as_dict(), **fields}))


def test_the_loop_sends_what_an_older_healers_outbox_files_held(tmp_path: Path) -> None:
    state = tmp_path / "state"
    old_file(state / "notify" / "outbox" / "webhook--code-pending.json", "webhook",
             "code-pending", tries=1, next_at=0.0, last_error="HTTP 503")
    old_file(state / "notify" / "failed" / "webhook--code-gave-up.json", "webhook",
             "code-gave-up", tries=8, last_error="HTTP 400", failed_at=5.0)
    with SignedWebhook(SECRET) as hook:
        env = healer_env(state, tmp_path / "results", tmp_path / "fleet",
                         HEALER__NOTIFY__INTERVAL_S="0.2",
                         HEALER_NOTIFY_WEBHOOK_URL=hook.url + "/in",
                         HEALER_NOTIFY_WEBHOOK_SECRET=SECRET)

        def status() -> dict[str, Any]:
            out = subprocess.run([sys.executable, "-m", "healer", "status", "--json"],
                                 env=env, capture_output=True, text=True, timeout=60)
            return dict(json.loads(out.stdout)["overview"]["notify"])

        with LoopProcess(env) as loop:
            try:  # sent, and out of the outbox: no later pass can send it again
                wait_for(lambda: hook.verified and status()["queue"] == 0, timeout=60)
            except AssertionError:
                raise AssertionError(loop.log()[-3000:]) from None
            view = status()
            loop.stop()
    assert [v["body"]["data"]["incident"] for v in hook.verified] == ["code-pending"]
    assert [(f["incident"], f["error"]) for f in view["failed"]] == [("code-gave-up",
                                                                      "HTTP 400")]
    assert not (state / "notify").exists()
