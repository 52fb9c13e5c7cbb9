"""Each play alert the cluster shows goes the whole way through the play pipeline: an incident
in the ledger, the gate's decision, a remediation (the strategy its issue type calls for) or
an escalation seed file — and a recovery resolves it."""

from __future__ import annotations

from typing import Any

from healer import overview
from healer.play import progress
from healer.testing.kube import coderun, crash_loop, pod, ready, terminated, workflow
from healer.testing.kube.objects import rfc3339
from healer.testing.wait import until

LABELS = {"app": "coderun", "workflow": "play-task-4-abc", "agent": "rex", "task-id": "4"}


def _pod(rig: Any, name: str = "play-task-4-abc-rex", **kw: Any) -> dict[str, Any]:
    return rig.kube.objects.create("pods", pod(name, labels=kw.pop("labels", LABELS),
                                               started=rig.clock(), **kw))


async def _tracked(rig: Any, name: str, rv: str) -> None:
    await until(lambda: (t := rig.watcher.state.pods.get(("cto", name))) is not None
                and int(t.obj["metadata"]["resourceVersion"]) >= int(rv), timeout=10)


class TestPodFailure:
    async def test_a_crash_loop_is_remediated_then_escalated_then_resolved(self, rig: Any
                                                                           ) -> None:
        """A7: CrashLoopBackOff → one play incident, the gate admits it, the retry strategy
        runs the configured action (×3, it does not help), a person gets the seed file; the
        pod recovering resolves the incident."""
        _pod(rig)
        await until(lambda: rig.watcher.evaluations > 0 and rig.watcher.state.pods, timeout=10)
        assert rig.incidents() == []
        rig.kube.objects.patch("pods", "cto", "play-task-4-abc-rex", crash_loop())
        found = await until(lambda: rig.incidents("A7"), timeout=10)
        assert len(found) == 1
        await until(lambda: rig.incidents("A7")[0]["status"] == "escalated", timeout=20)
        incident = rig.incidents("A7")[0]
        assert incident["gate"]["reason"] == "accepted"
        assert incident["target"] == "pod/cto/play-task-4-abc-rex"
        assert [a.split()[0] for a in rig.actions()] == ["retry"] * 3
        assert "retry play-task-4-abc rex play-task-4-abc-rex A7" in rig.actions()
        seed = rig.escalations()[0].read_text()
        assert "play-task-4-abc" in seed and "A7" in seed
        status = overview.render(overview.overview(rig.play.settings, rig.play.store))
        assert "on pod/cto/play-task-4-abc-rex" in status

        rig.kube.objects.patch("pods", "cto", "play-task-4-abc-rex", ready(at=rig.clock()))
        await until(lambda: rig.watcher.state.pods[("cto", "play-task-4-abc-rex")]
                    .healthy_since is not None, timeout=10)
        rig.clock.advance(31)  # kube.recovered_after_s
        await until(lambda: rig.incidents("A7")[0]["status"] == "resolved", timeout=10)

    async def test_heal_again_on_a_sessionless_alert_remediates_anew(self, rig: Any) -> None:
        """A crash loop on a play with no session is escalated; a person presses "heal again"
        (the dashboard's action); the next play evaluation runs the retry strategy again —
        once, however often it evaluates — and the pod recovering resolves the incident."""
        from healer.api.dashboard import actions

        _pod(rig)
        await until(lambda: rig.watcher.state.pods, timeout=10)
        rig.kube.objects.patch("pods", "cto", "play-task-4-abc-rex", crash_loop())
        await until(lambda: rig.incidents("A7") and
                    rig.incidents("A7")[0]["status"] == "escalated", timeout=20)
        assert len(rig.actions()) == 3
        assert rig.play.evaluate_sessions() == 0 and rig.play.alert_sink.heal_again() == 0

        seed = rig.escalations()[0]
        back = actions.heal_again(rig.play.settings, rig.play.store, seed.name, by="test")
        assert back["status"] == "open"
        rig.play.evaluate_sessions()
        rig.play.evaluate_sessions()  # a second pass while it runs starts nothing more
        await until(lambda: len(rig.actions()) == 6 and
                    rig.incidents("A7")[0]["status"] == "escalated", timeout=20)
        await rig.play.wait_idle()
        assert len(rig.actions()) == 6
        assert (seed.parent / "archive" / seed.name).exists()

        rig.kube.objects.patch("pods", "cto", "play-task-4-abc-rex", ready(at=rig.clock()))
        await until(lambda: rig.watcher.state.pods[("cto", "play-task-4-abc-rex")]
                    .healthy_since is not None, timeout=10)
        rig.clock.advance(31)
        await until(lambda: rig.incidents("A7")[0]["status"] == "resolved", timeout=10)

    async def test_an_oom_kill_is_an_issue_of_the_active_session(self, make_rig: Any
                                                                  ) -> None:
        """A7 OOMKilled on a play with a session: the alert is a session issue naming the
        pod (and its dashboard link), its incident is the play kind's."""
        rig = await make_rig(dashboard_url="https://k8s.example.com/#/{kind}/{namespace}/{name}")
        rig.play.start_session({"play_id": "play-task-4-abc", "repository": "5dlabs/cto",
                                "cto_config": {"agents": {"rex": {}}}})
        created = _pod(rig)
        await _tracked(rig, "play-task-4-abc-rex", created["metadata"]["resourceVersion"])
        rig.kube.objects.patch("pods", "cto", "play-task-4-abc-rex",
                               terminated(reason="OOMKilled", exit_code=137, keep_ready=False))
        issue = await until(lambda: [i for i in rig.play.registry.get("play-task-4-abc")[
            "issues"] if i.get("code") == "A7"], timeout=10)
        assert issue[0]["issue_type"] == "agent_failure"
        assert issue[0]["target"] == "pod/cto/play-task-4-abc-rex"
        assert "OOMKilled" in issue[0]["description"]
        assert issue[0]["link"] == "https://k8s.example.com/#/pod/cto/play-task-4-abc-rex"
        assert rig.incidents("A7")[0]["links"]["dashboard"] == issue[0]["link"]
        assert rig.incidents("A7")[0]["target"] == "pod/cto/play-task-4-abc-rex"
        await until(lambda: rig.incidents("A7")[0]["status"] == "escalated", timeout=20)
        assert rig.escalations()
        await rig.watcher.stop()
        await rig.play.stop()


class TestSilentFailure:
    async def test_a_non_zero_exit_while_ready_is_a2(self, rig: Any) -> None:
        """A2: the agent container exited 1 but the pod still says Ready."""
        created = _pod(rig, containers=("agent", "sidecar"))
        await _tracked(rig, "play-task-4-abc-rex", created["metadata"]["resourceVersion"])
        rig.kube.objects.patch("pods", "cto", "play-task-4-abc-rex",
                               terminated("agent", exit_code=1))
        found = await until(lambda: rig.incidents("A2"), timeout=10)
        assert found[0]["severity"] == "critical"
        assert "exited 1" in found[0]["summary"]
        assert not rig.incidents("A7")


class TestStuck:
    async def test_a_coderun_stuck_in_one_phase_is_restarted(self, rig: Any) -> None:
        """A9: a CodeRun Running with no phase change past kube.stuck_after_s → stuck →
        the restart strategy; healer's own remediation CodeRuns are left alone."""
        rig.kube.objects.create("coderuns", coderun(
            "coderun-rex-4", labels={"workflow": "play-task-4-abc"}, created=rig.clock()))
        rig.kube.objects.create("coderuns", coderun(
            "healer-remediation-4", labels={"workflow": "play-task-9-x"}, created=rig.clock()))
        await until(lambda: len(rig.watcher.state.coderuns) == 2, timeout=10)
        rig.clock.advance(601)
        found = await until(lambda: rig.incidents("A9"), timeout=10)
        assert len(found) == 1 and found[0]["target"] == "coderun/cto/coderun-rex-4"
        await until(lambda: any(a.startswith("restart play-task-4-abc rex") for a in
                                rig.actions()), timeout=10)
        rig.kube.objects.patch("coderuns", "cto", "coderun-rex-4",
                               {"status": {"phase": "Succeeded"}})
        await until(lambda: rig.incidents("A9")[0]["status"] == "resolved", timeout=10)

    async def test_a_step_past_its_stage_timeout_is_a8(self, rig: Any) -> None:
        """A8: a Workflow node of the testing stage running past 30 minutes."""
        start = rig.clock()
        rig.kube.objects.create("workflows", workflow("play-task-4-abc", nodes={
            "n1": {"displayName": "testing-rex", "templateName": "testing", "type": "Pod",
                   "phase": "Running", "startedAt": rfc3339(start)}}, created=start))
        await until(lambda: rig.watcher.state.workflows, timeout=10)
        rig.clock.advance(29 * 60)
        await until(lambda: rig.watcher.evaluations > 3, timeout=10)
        assert not rig.incidents("A8")
        rig.clock.advance(2 * 60)
        found = await until(lambda: rig.incidents("A8"), timeout=10)
        assert "testing" in found[0]["summary"]
        assert found[0]["target"].startswith("workflow/cto/play-task-4-abc")

    async def test_no_progress_for_15_minutes_is_a3_and_progress_clears_it(self, rig: Any
                                                                           ) -> None:
        """A3: a play whose pod runs but that made no commit, comment or log line."""
        _pod(rig)
        await until(lambda: rig.watcher.state.pods, timeout=10)
        rig.clock.advance(16 * 60)
        found = await until(lambda: rig.incidents("A3"), timeout=10)
        assert found[0]["target"] == "play/cto/play-task-4-abc"
        progress.note(rig.play.store, "play-task-4-abc", "commit:5dlabs/cto@abc", rig.clock())
        await until(lambda: rig.incidents("A3")[0]["status"] == "resolved", timeout=10)

    async def test_a3_on_a_play_of_two_agents_restarts_each_of_them(self, rig: Any) -> None:
        """A3 on a play with two running agents: one alert an agent, so each restart action
        names the agent it restarts (a play-wide alert had no agent to restart and could only
        escalate); progress of the play clears both."""
        _pod(rig)
        _pod(rig, "play-task-4-abc-blaze", labels={**LABELS, "agent": "blaze"})
        await until(lambda: len(rig.watcher.state.pods) == 2, timeout=10)
        rig.clock.advance(16 * 60)
        found = await until(lambda: len(rig.incidents("A3")) == 2 and rig.incidents("A3"),
                            timeout=10)
        assert sorted(i["detail"]["agent"] for i in found) == ["blaze", "rex"]
        await until(lambda: {a.split()[2] for a in rig.actions()
                             if a.startswith("restart play-task-4-abc")} == {"blaze", "rex"},
                    timeout=20)
        progress.note(rig.play.store, "play-task-4-abc", "commit:5dlabs/cto@abc", rig.clock())
        await until(lambda: [i["status"] for i in rig.incidents("A3")] == ["resolved"] * 2,
                    timeout=10)
