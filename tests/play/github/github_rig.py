"""The pieces of the GitHub watcher tests: a fake GitHub, a play service with its alert sink,
the watcher and the poller, all in this process (the clock of the rate limit injectable)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from healer.config import load_settings
from healer.core.incidents import Ledger
from healer.core.store import FileStore
from healer.play.alerts import AlertSink
from healer.play.github.client import GitHubClient
from healer.play.github.poller import Poller
from healer.play.github.watcher import GitHubWatcher
from healer.play.service import PlayService
from healer.testing.fake_github import FakeGitHub

TOKEN = "ghp_watcherTestToken0123456789abcdefABCD"
PLAY = "play-task-4-abc12"
REPO = "5dlabs/cto"
REX, CLEO, CIPHER, TESS = ("5dlabs-rex[bot]", "5dlabs-cleo[bot]", "5dlabs-cipher[bot]",
                           "5dlabs-tess[bot]")
SESSION = {"play_id": PLAY, "repository": REPO, "cto_config": {"agents": {
    "rex": {"tools": {"remote": []}}}},
    "tasks": [{"id": 4, "title": "api", "dependencies": [], "priority": 1}]}


class Clock:
    """The time the fake GitHub and the client agree on (moved by hand, never slept)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class Rig:
    def __init__(self, tmp_path: Path, fake: FakeGitHub, clock: Clock, **github: Any):
        self.tmp = tmp_path
        self.calls = tmp_path / "actions.log"
        script = tmp_path / "action.py"
        script.write_text("import sys\nopen(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) "
                          "+ '\\n')\n")
        action = [sys.executable, str(script), str(self.calls)]
        self.settings = load_settings(env={"HEALER_EXECUTOR": "playbook"}, overrides={
            "state_dir": str(tmp_path / "state"), "results_dir": str(tmp_path / "results"),
            "fleet_dir": str(tmp_path / "fleet"),
            "agents": {"sandbox_write_paths": [str(tmp_path)]},  # the action's call log
            "github": {"token": TOKEN, "api_url": fake.url, **github},
            "play": {"reevaluate_after_s": 0, "max_iterations": 1,
                     "actions": {"fix_code": [*action, "fix_code", "{code}", "{target}",
                                              "{agent}"]}}})
        self.store = FileStore(self.settings.state_path)
        self.play = PlayService(self.settings, self.store)
        self.sink = AlertSink.for_play(self.play)  # binds the test's running loop
        self.watcher = GitHubWatcher(self.settings, self.store, sink=lambda: self.sink)
        gh = self.settings.github
        self.client = GitHubClient(api_url=fake.url, token=TOKEN, clock=clock,
                                   min_remaining=gh.min_remaining,
                                   backoff_s=gh.secondary_backoff_s,
                                   backoff_cap_s=gh.secondary_backoff_cap_s)
        self.poller = Poller(self.watcher, self.client)
        self.ledger = Ledger(self.store)

    def start(self, session: dict[str, Any] | None = None) -> None:
        self.play.start_session(session or SESSION)

    def incident(self, code: str) -> dict[str, Any] | None:
        for rec in self.store.list("incidents"):
            if rec.data.get("kind") == "play" and (rec.data.get("detail") or {}).get(
                    "code") == code:
                return self.ledger.get(rec.key)
        return None

    def issue(self, code: str) -> dict[str, Any] | None:
        session = self.play.registry.get(PLAY) or {}
        found = [i for i in session.get("issues", []) if i.get("code") == code]
        return found[-1] if found else None

    def actions(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    async def close(self) -> None:
        await self.play.wait_idle(30)
        await self.play.stop()
        await self.client.close()
