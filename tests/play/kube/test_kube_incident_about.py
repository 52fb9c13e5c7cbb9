"""A watcher's play incident says which alert and which object it is about, through the real
server and CLI: a pod in CrashLoopBackOff is A7 on that pod, a CodeRun stuck in one phase is
A9 on that CodeRun — in ``GET /api/v1/incidents`` (list and detail), ``healer status <id>``
(text and ``--json``) and the dashboard."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from healer.core.schemas import validator
from healer.testing.api import ServeProcess
from healer.testing.kube import coderun, crash_loop, pod
from healer.testing.loop import healer_env
from healer.testing.wait import until

pytestmark = [pytest.mark.e2e]

LABELS = {"app": "coderun", "workflow": "play-task-4-abc", "agent": "rex", "task-id": "4"}


def _surfaces(rig: Any, code: str) -> tuple[dict[str, Any], dict[str, Any], str, str]:
    """The incident of ``code`` as the list, the detail, `healer status <id> --json` and the
    dashboard page show it (a server and CLI on the rig's state)."""
    env = healer_env(rig.tmp / "state", rig.tmp / "results", rig.tmp / "fleet",
                     HEALER__CONTEXT__ENABLED="false")
    server = ServeProcess(env)
    try:
        listed = server.http.get("/api/v1/incidents", params={"kind": "play"}).json()
        [item] = [i for i in listed["incidents"] if (i.get("about") or {}).get("code") == code]
        detail = server.http.get(f"/api/v1/incidents/{item['id']}").json()["incident"]
        page = server.http.get(f"/ui/incidents/{item['id']}").text
    finally:
        server.close()
    shown = subprocess.run([sys.executable, "-m", "healer", "status", item["id"], "--json"],
                           env=env, text=True, capture_output=True, timeout=60)
    assert shown.returncode in (0, 1), shown.stderr  # 1: escalated meanwhile
    assert json.loads(shown.stdout)["incident"]["about"] == item["about"]
    text = subprocess.run([sys.executable, "-m", "healer", "status", item["id"]],
                          env=env, text=True, capture_output=True, timeout=60)
    for view in (item, detail):
        validator("incident").validate(view)
    return item, detail, text.stdout, page


async def test_a_crash_looping_pod_is_a7_on_that_pod(rig: Any) -> None:
    rig.kube.objects.create("pods", pod("play-task-4-abc-rex", labels=LABELS,
                                        started=rig.clock()))
    await until(lambda: rig.watcher.state.pods, timeout=10)
    rig.kube.objects.patch("pods", "cto", "play-task-4-abc-rex", crash_loop())
    await until(lambda: rig.incidents("A7"), timeout=10)
    item, detail, text, page = _surfaces(rig, "A7")
    want = {"code": "A7", "play_id": "play-task-4-abc", "agent": "rex", "object_kind": "pod",
            "object": "play-task-4-abc-rex", "namespace": "cto"}
    assert item["about"] == want and detail["about"] == want
    assert "about: code A7, object kind pod, object play-task-4-abc-rex, namespace cto" in text
    assert "play-task-4-abc-rex" in page and "A7" in page


async def test_a_stuck_coderun_is_a9_on_that_coderun(rig: Any) -> None:
    rig.kube.objects.create("coderuns", coderun(
        "coderun-rex-4", labels={"workflow": "play-task-4-abc"}, created=rig.clock()))
    await until(lambda: rig.watcher.state.coderuns, timeout=10)
    rig.clock.advance(601)  # kube.stuck_after_s
    await until(lambda: rig.incidents("A9"), timeout=10)
    item, detail, text, page = _surfaces(rig, "A9")
    assert item["about"]["code"] == "A9" and detail["about"]["object_kind"] == "coderun"
    assert detail["about"]["object"] == "coderun-rex-4"
    assert "code A9, object kind coderun, object coderun-rex-4" in text
    assert "coderun-rex-4" in page
