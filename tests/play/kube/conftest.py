"""A fake API server, a play service and a Kubernetes watcher on it, with a clock the tests
move (thresholds are the defaults shrunk or the clock jumps past them; nothing sleeps)."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from healer.config import load_settings
from healer.core import incidents as inc
from healer.core.store import FileStore
from healer.play.alerts import AlertSink
from healer.play.kube.watcher import KubeWatcher
from healer.play.service import PlayService
from healer.testing.kube import FakeKube


class Clock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@dataclass
class Rig:
    kube: FakeKube
    play: PlayService
    watcher: KubeWatcher
    clock: Clock
    calls: Path
    fleet: Path
    tmp: Path

    @property
    def ledger(self) -> inc.Ledger:
        return self.play.remediator.ledger

    def incidents(self, code: str = "") -> list[dict[str, Any]]:
        return [i for i in self.ledger.list(kind="play", limit=100).items
                if not code or (i.get("detail") or {}).get("code") == code]

    def actions(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def escalations(self) -> list[Path]:
        human = self.fleet / "human"
        return sorted(human.glob("*.md")) if human.exists() else []


def kube_settings(tmp: Path, kubeconfig: Path, **kube: Any) -> Any:
    script = tmp / "action.py"
    calls = tmp / "calls"
    script.write_text("import sys\nopen(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) + "
                      "'\\n')\n")
    action = [sys.executable, str(script), str(calls)]
    return load_settings(env={"HEALER_EXECUTOR": "playbook"}, overrides={
        "state_dir": str(tmp / "state"), "results_dir": str(tmp / "results"),
        "fleet_dir": str(tmp / "fleet"),
        "agents": {"sandbox_write_paths": [str(tmp)]},  # where the action notes its calls
        "play": {"reevaluate_after_s": 0.05, "actions": {
            "restart": [*action, "restart", "{play_id}", "{agent}", "{pod}", "{code}"],
            "retry": [*action, "retry", "{play_id}", "{agent}", "{pod}", "{code}"]}},
        "kube": {"enabled": True, "kubeconfig": str(kubeconfig), "namespace": "cto",
                 "evaluate_interval_s": 0.1, "recovered_after_s": 30, "follow_logs": False,
                 "backoff_max_s": 0.5, **kube}})


@pytest.fixture
def make_rig(tmp_path: Path) -> Any:
    rigs: list[Rig] = []

    async def make(**kube: Any) -> Rig:
        clock = Clock()
        fake = FakeKube(clock=clock, bookmark_every_s=0.5)
        fake.start()
        cfg = fake.write_kubeconfig(tmp_path / "kubeconfig", token="")
        settings = kube_settings(tmp_path, cfg, **kube)
        store = FileStore(tmp_path / "state")
        play = PlayService(settings, store, clock=clock)
        watcher = KubeWatcher(settings, store, AlertSink.for_play(play), clock=clock)
        await watcher.start()
        rig = Rig(fake, play, watcher, clock, tmp_path / "calls", tmp_path / "fleet", tmp_path)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.kube.stop()


@pytest.fixture
async def rig(make_rig: Any) -> AsyncIterator[Rig]:
    r = await make_rig()
    yield r
    await r.watcher.stop()
    await r.play.stop()
