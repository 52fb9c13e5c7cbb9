"""The loop reads the agents' pod logs itself (the seed's ``kubectl logs -l app=coderun -f``):
with ``kube.follow_logs`` and ``kube.detect_logs`` the lines of a play's agent pod go through
the play's log detection — the same issues and pre-flight checklist as lines an agent posts
to ``/api/v1/session/{id}/logs``."""

from __future__ import annotations

from typing import Any

from healer.testing.kube import pod
from healer.testing.wait import until

PLAY = "play-task-4-abc"
LABELS = {"app": "coderun", "workflow": PLAY, "agent": "rex", "task-id": "4"}


def _issues(rig: Any) -> list[dict[str, Any]]:
    return list((rig.play.registry.get(PLAY) or {}).get("issues") or [])


async def test_a_pre_flight_failure_in_a_pod_log_is_an_issue_of_its_session(make_rig: Any
                                                                            ) -> None:
    rig = await make_rig(follow_logs=True)
    try:
        rig.play.start_session({"play_id": PLAY, "repository": "5dlabs/cto",
                                "cto_config": {"agents": {"rex": {}}}})
        rig.kube.objects.create("pods", pod(f"{PLAY}-rex", labels=LABELS, started=rig.clock()))
        rig.kube.objects.create("pods", pod("play-task-9-x-blaze", labels={
            **LABELS, "workflow": "play-task-9-x", "agent": "blaze"}, started=rig.clock()))
        await until(lambda: rig.watcher.logs is not None and rig.watcher.logs.streams == 2,
                    timeout=10)
        rig.kube.objects.log("cto", f"{PLAY}-rex", "agent", "INFO agent rex starting")
        rig.kube.objects.log("cto", f"{PLAY}-rex", "agent",
                             "ERROR Tool inventory MISMATCH: declared tools missing: "
                             "github_create_pull_request")
        # A play without a session: its lines are not judged (nothing to check them against).
        rig.kube.objects.log("cto", "play-task-9-x-blaze", "agent",
                             "ERROR Tool inventory MISMATCH: declared tools missing: x")
        found = await until(lambda: [i for i in _issues(rig)
                                     if i["issue_type"] == "tool_mismatch"], timeout=10)
        assert found[0]["agent"] == "rex"
        assert "github_create_pull_request" in found[0]["description"]
        assert rig.watcher.feed is not None
        await until(lambda: rig.watcher.feed.skipped == 1, timeout=10)
        status = rig.watcher.status()
        assert status["log_lines_judged"] == 2 and status["log_lines_sessionless"] == 1
        assert rig.play.registry.get("play-task-9-x") is None
    finally:
        await rig.watcher.stop()
        await rig.play.stop()


async def test_detect_logs_off_leaves_detection_to_the_agents_own_reports(make_rig: Any
                                                                           ) -> None:
    rig = await make_rig(follow_logs=True, detect_logs=False)
    try:
        rig.play.start_session({"play_id": PLAY, "repository": "5dlabs/cto",
                                "cto_config": {"agents": {"rex": {}}}})
        rig.kube.objects.create("pods", pod(f"{PLAY}-rex", labels=LABELS, started=rig.clock()))
        await until(lambda: rig.watcher.logs is not None and rig.watcher.logs.streams == 1,
                    timeout=10)
        rig.kube.objects.log("cto", f"{PLAY}-rex", "agent",
                             "ERROR Tool inventory MISMATCH: declared tools missing: y")
        # The line still counts as the play's progress (A3) ...
        from healer.play import progress

        await until(lambda: (progress.last(rig.play.store, PLAY) or 0) > 0, timeout=10)
        # ... but is judged by nobody here.
        assert rig.watcher.feed is None
        assert _issues(rig) == []
    finally:
        await rig.watcher.stop()
        await rig.play.stop()
