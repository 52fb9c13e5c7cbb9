"""The interface other watchers use: AlertSink from any thread, progress coalescing, and the
loop starting the kube service only when asked."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from healer.config import load_settings
from healer.core.store import FileStore
from healer.play import progress
from healer.play.alerts import AlertSink, PlayAlert, firing
from healer.play.service import PlayService
from healer.testing.wait import until


def _play(tmp_path: Path) -> PlayService:
    settings = load_settings(env={"HEALER_EXECUTOR": "playbook"}, overrides={
        "state_dir": str(tmp_path / "state"), "results_dir": str(tmp_path / "results"),
        "fleet_dir": str(tmp_path / "fleet"), "play": {"reevaluate_after_s": 0.01}})
    return PlayService(settings, FileStore(tmp_path / "state"))


ALERT = PlayAlert(code="A5", play_id="play-task-9-x", agent="cleo", target="pr/o/r#12",
                  severity="warning", summary="CI failed after approval",
                  issue_type="build_failure", link="https://github.com/o/r/pull/12")


class TestAlertSink:
    async def test_fire_from_a_thread_is_idempotent_and_clear_resolves(self, tmp_path: Path
                                                                       ) -> None:
        """Fired three times from a worker thread: one incident counted three times, one
        remediation (on the loop the sink is bound to); clear resolves it."""
        play = _play(tmp_path)
        sink = AlertSink.for_play(play)
        worker = threading.Thread(target=lambda: [sink.fire(ALERT) for _ in range(3)])
        worker.start()
        await asyncio.to_thread(worker.join)
        ledger = play.remediator.ledger
        # (Listed whatever its status: with no session to heal, the remediation may have
        # escalated it already — it is not active then.)
        found = await until(lambda: [i for i in ledger.list(kind="play").items
                                     if i.get("target") == "pr/o/r#12"], timeout=10)
        assert len(ledger.list(kind="play").items) == 1
        assert found[0]["count"] == 3
        await until(lambda: ledger.list(kind="play").items[0]["attempts"] >= 1, timeout=10)
        assert firing(play.store, "play-task-9-x")[0]["count"] == 3
        sink.clear("A5", "play-task-9-x", "cleo", "pr/o/r#12")
        assert ledger.list(kind="play").items[0]["status"] == "resolved"
        assert firing(play.store) == []
        await play.wait_idle(10)
        await play.stop()

    def test_bad_alerts_are_refused(self, tmp_path: Path) -> None:
        import pytest

        from healer.errors import UsageError

        sink = AlertSink.for_play(_play(tmp_path))
        for bad in ({"code": "B1"}, {"play_id": "../etc"}, {"issue_type": "nope"},
                    {"severity": "high"}):
            with pytest.raises(UsageError):
                sink.fire(PlayAlert(**{**ALERT.__dict__, **bad}))


class TestProgress:
    def test_notes_are_coalesced_but_last_is_always_current(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path / "state")
        progress.note(store, "p-1", "log:pod/cto/a/agent", 100.0)
        progress.note(store, "p-1", "commit:o/r@abc", 150.0)  # within COALESCE_S: memory only
        assert progress.last(store, "p-1") == 150.0
        assert store.get(progress.KIND, "p-1").data["at"] == 100.0
        progress.flush(store)
        assert store.get(progress.KIND, "p-1").data["at"] == 150.0
        assert progress.sources(store, "p-1") == {"log": 100.0, "commit": 150.0}
        assert progress.last(store, "p-2") is None


class TestLoopService:
    def test_the_kube_service_starts_only_when_enabled(self, tmp_path: Path) -> None:
        from healer.loop import build

        def services(**kube: Any) -> list[str]:
            settings = load_settings(env={}, overrides={
                "state_dir": str(tmp_path / "state"), "results_dir": str(tmp_path / "r"),
                "fleet_dir": str(tmp_path / "f"), "api": {"port": 0}, "kube": kube})
            healer = build(settings)
            names = [s.name for s in healer.services]
            healer.store.close()
            return names

        assert "kube" not in services()
        assert "kube" in services(enabled=True)


class TestPrune:
    async def test_cleared_alerts_are_forgotten_after_a_week_unless_their_play_runs(
            self, tmp_path: Path) -> None:
        from healer.play.alerts import KIND

        now = [1_800_000_000.0]
        settings = load_settings(env={"HEALER_EXECUTOR": "playbook"}, overrides={
            "state_dir": str(tmp_path / "state"), "results_dir": str(tmp_path / "results"),
            "fleet_dir": str(tmp_path / "fleet"), "play": {"reevaluate_after_s": 0.01}})
        play = PlayService(settings, FileStore(tmp_path / "state"), clock=lambda: now[0])
        play.start_session({"play_id": "play-task-1-live", "repository": "o/r",
                            "cto_config": {"agents": {"cleo": {}}}})
        sink = AlertSink.for_play(play)
        gone = ALERT
        kept = PlayAlert(**{**ALERT.__dict__, "play_id": "play-task-1-live"})
        firing_still = PlayAlert(**{**ALERT.__dict__, "code": "A4"})
        for a in (gone, kept, firing_still):
            sink.fire(a)
        for a in (gone, kept):
            sink.clear(a.code, a.play_id, a.agent, a.target)
        await play.wait_idle(10)
        now[0] += 6 * 86400
        assert play.prune_alerts() == 0
        now[0] += 2 * 86400
        assert play.prune_alerts() == 1
        left = {(r.data["play_id"], r.data["code"]) for r in play.store.list(KIND)}
        assert left == {("play-task-1-live", "A5"), ("play-task-9-x", "A4")}
        await play.stop()
