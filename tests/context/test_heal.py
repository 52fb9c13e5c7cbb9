"""The heal loop: agent in a worktree, verified by the runner, then a PR or an escalation."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from context_helpers import (
    BUGGY,
    FLOAT_FIX,
    GOOD_FIX,
    PAYMENT,
    REPRO,
    REPRO_FILE,
    edit,
    git,
    plan,
)

from healer.context.ingest import from_alertmanager
from healer.context.layers import Layers
from healer.context.sentry import from_sentry
from healer.selfheal.attempts import Attempts
from healer.testing.webhooks import sentry_event_alert, sentry_issue

pytestmark = [pytest.mark.e2e]


def sentry_signal(root: Path, **kw: Any) -> Any:
    return from_sentry("event_alert", sentry_event_alert(line=6, **kw), root)[0]


def attempt_content(n: int) -> dict[str, Any]:
    """A bad fix that differs per iteration (float: INV-001 stays broken)."""
    return {"edits": [{"file": "app/payment.py",
                       "content": PAYMENT.replace(BUGGY, FLOAT_FIX) + f"# attempt {n}\n"},
                      {"file": REPRO_FILE, "content": REPRO}],
            "commit": f"fix: attempt {n}", "summary": f"attempt {n}"}


def audit_events(svc: Any, key: str) -> list[str]:
    return [e["event"] for e in svc.book.audit.read(key)]


class TestVerifiedFix:
    async def test_passes_on_iteration_2(self, service_for: Any, project: Path,
                                         context_dir: Path, tmp_path: Path) -> None:
        """Iteration 1 uses float (INV-001) and is rejected; iteration 2 is told why, fixes it
        properly, passes, and a PR record, a memory entry and the audit trail follow."""
        p = plan(tmp_path / "agent", edit(BUGGY, FLOAT_FIX), edit(FLOAT_FIX, GOOD_FIX))
        svc = service_for(plan=p)
        (receipt,) = await svc.ingest([sentry_signal(project)])
        assert receipt.action == "opened" and receipt.heal, receipt
        await svc.drain(120)

        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "fixed", inc.get("escalation")
        assert inc["fix"]["iterations"] == 2
        prompt1 = (tmp_path / "agent" / "prompt-1.md").read_text()
        prompt2 = (tmp_path / "agent" / "prompt-2.md").read_text()
        assert "## Self-Healing Context" in prompt1 and "[CRITICAL] INV-001" in prompt1
        assert "Iteration 1 was rejected" not in prompt1
        assert "## Iteration 1 was rejected" in prompt2
        assert "critical invariant INV-001 violated" in prompt2

        pr = json.loads((svc.settings.state_path / "forge" / "prs" / "1.json").read_text())
        assert pr["title"].startswith("fix(healing): ZeroDivisionError in app/payment.py [")
        assert "Verdict: PASSED" in pr["body"] and "living-context" in pr["labels"]
        assert GOOD_FIX.strip() in Path(pr["diff_file"]).read_text()
        assert git(project, "show", f"{pr['head']}:app/payment.py").count(GOOD_FIX.strip()) == 1
        assert BUGGY in (project / "app" / "payment.py").read_text()  # main is untouched

        att = Attempts(svc.store).require(inc["attempt_id"])
        assert att["status"] == "pr_open" and att["tool_name"] == "living-context:sentry"
        memory = Layers.load(context_dir).incidents[-1]
        assert memory.success is True and memory.healing_iterations == 2
        assert memory.id == f"INC-{inc['attempt_id']}"
        events = audit_events(svc, "sentry-4242")
        assert events[:4] == ["opened", "gate", "attempt_started", "heal_started"]
        assert events.count("verdict") == 2 and "pr_opened" in events and "memory" in events

    async def test_uncommitted_tracked_changes_are_committed_for_the_agent(
            self, service_for: Any, project: Path, tmp_path: Path) -> None:
        """An agent that edits but forgets to commit still gets its fix verified and
        published (as a commit healer made for it)."""
        svc = service_for(plan=plan(tmp_path / "agent", edit(BUGGY, GOOD_FIX, commit=None)))
        await svc.ingest([sentry_signal(project)])
        await svc.drain(120)
        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "fixed" and inc["fix"]["iterations"] == 1
        log = git(project, "log", "--format=%s", inc["fix"]["branch"])
        assert "healer: changes the healing agent left uncommitted (iteration 1)" in log


class TestEscalation:
    async def test_rejected_iterations_end_in_escalation(
            self, service_for: Any, project: Path, context_dir: Path, tmp_path: Path,
            dirs: Any) -> None:
        """Fixes that all break INV-001 (``code.max_iterations`` = 3): three verdicts, then a
        human escalation with the last verification's reasons, no PR, a failed attempt, and
        a memory entry naming the anti-pattern."""
        p = plan(tmp_path / "agent", *[attempt_content(n) for n in range(1, 4)])
        svc = service_for(plan=p)
        await svc.ingest([sentry_signal(project)])
        await svc.drain(180)

        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "escalated"
        assert "no fix passed verification in 3 iteration(s)" in inc["escalation"]["reason"]
        seeds = list((dirs.fleet / "human").glob("*.md"))
        assert len(seeds) == 1
        seed = seeds[0].read_text()
        assert "Self-healing: ZeroDivisionError" in seed and "incident: sentry-4242" in seed
        assert "The last verification's reasons" in seed
        assert "critical invariant INV-001 violated" in seed
        assert "healer context render --incident sentry-4242" in seed
        assert not (svc.settings.state_path / "forge" / "prs").exists()
        att = Attempts(svc.store).require(inc["attempt_id"])
        assert att["status"] == "failed" and att["source"] == "sentry"
        assert [it["verdict"] for it in att["iterations"]] == ["rejected"] * 3
        assert att["verification"]["passed"] is False and att["reproduction"]["reproduced"]
        memory = Layers.load(context_dir).incidents[-1]
        assert memory.success is False and memory.healing_iterations == 3
        assert "INV-001" in memory.anti_pattern
        assert audit_events(svc, "sentry-4242").count("verdict") == 3

    async def test_the_agent_saying_unfixable_escalates_at_once(
            self, service_for: Any, project: Path, tmp_path: Path) -> None:
        """No more iterations when the agent reports unfixable: one try, then a person."""
        p = plan(tmp_path / "agent", {"edits": [], "status": "unfixable",
                                      "summary": "the payment provider returns zero counts"})
        svc = service_for(plan=p)
        await svc.ingest([sentry_signal(project)])
        await svc.drain(60)
        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "escalated"
        assert "the agent reported unfixable" in inc["escalation"]["reason"]
        assert audit_events(svc, "sentry-4242").count("iteration_started") == 1

    async def test_broken_layers_escalate_with_the_reason(
            self, service_for: Any, project: Path, context_dir: Path, tmp_path: Path) -> None:
        """A layer file broken after the alert came in: the run escalates saying which."""
        svc = service_for(plan=plan(tmp_path / "agent", edit(BUGGY, GOOD_FIX)))
        (context_dir / "invariants.yaml").write_text("- id: nope\n")
        await svc.ingest([sentry_signal(project)])
        await svc.drain(60)
        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "escalated"
        assert "invariants.yaml" in inc["escalation"]["reason"]


class TestIntakeAndGate:
    async def test_duplicates_replays_and_joined_fingerprints(self, service_for: Any,
                                                              project: Path) -> None:
        """The same issue again is a duplicate; an issue-created for the same error under
        another key joins the attempt already investigating that fingerprint."""
        svc = service_for("executor.default=playbook", "context.heal_without_file=true")
        svc.healer.available = lambda: True  # admit, but nothing needs to run here
        svc.healer.heal = _no_heal
        first = svc.submit([sentry_signal(project)])[0]
        again = svc.submit([sentry_signal(project)])[0]
        assert (first.action, first.decision) == ("opened", "accepted")
        assert again.action == "duplicate" and svc.book.get("sentry-4242")["occurrences"] == 2
        other = sentry_signal(project, issue_id="999")
        joined = svc.submit([other])[0]
        assert joined.decision == "already_investigating"
        assert joined.attempt_id == first.attempt_id

    async def test_secrets_and_personal_data_are_scrubbed_at_intake(
            self, service_for: Any, project: Path) -> None:
        """An error text carrying an e-mail, an API key and an address is stored (and later
        shown to the agent) with those replaced by markers."""
        svc = service_for("executor.default=playbook")
        secret = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"
        svc.submit([sentry_signal(project, message=f"failed for bob@acme-corp.com key {secret} "
                                                   "from 10.2.3.4")])
        stored = json.dumps(svc.book.get("sentry-4242"))
        assert "bob@acme-corp.com" not in stored and secret not in stored
        assert "10.2.3.4" not in stored
        assert "[REDACTED-EMAIL]" in stored and "[REDACTED-API-KEY]" in stored

    async def test_gate_reasons_are_recorded(self, service_for: Any, project: Path) -> None:
        """Info severity, no file, and no runnable agent each keep the incident open with the
        reason; nothing is dispatched. The same alert again goes through the gate again."""
        svc = service_for("executor.default=playbook")  # no playbook: no model
        low = svc.submit([sentry_signal(project, level="info")])[0]
        assert low.decision == "below_threshold" and not low.heal
        (nofile,) = from_sentry("metric_alert", {"action": "critical", "data": {
            "description_title": "Too many errors", "metric_alert": {"id": "1"}}})
        assert svc.submit([nofile])[0].decision == "no_file"
        nomodel = svc.submit([sentry_signal(project, issue_id="77")])[0]
        assert nomodel.decision == "no_model"
        assert svc.book.get("sentry-77")["decision"]["reason"] == "no_model"
        assert svc.book.get("sentry-77")["status"] == "open"
        svc.healer.available = lambda: True  # a model comes back; the alert fires again
        svc._model = (0.0, False)
        again = svc.submit([sentry_signal(project, issue_id="77")])[0]
        assert (again.action, again.decision) == ("duplicate", "accepted")
        assert svc.book.get("sentry-77")["status"] == "healing"

    async def test_resolved_closes_what_it_opened(self, service_for: Any,
                                                  project: Path) -> None:
        """Sentry's issue resolved closes the incident; an unknown key's resolution is
        ignored; firing again reopens it."""
        svc = service_for("executor.default=playbook")
        svc.submit([sentry_signal(project)])
        (res,) = svc.submit(from_sentry("issue", sentry_issue("resolved")))
        assert res.action == "resolved" and svc.book.get("sentry-4242")["status"] == "resolved"
        (unknown,) = svc.submit(from_sentry("issue", sentry_issue("resolved", issue_id="5")))
        assert unknown.action == "ignored" and svc.book.get("sentry-5") is None
        again = svc.submit([sentry_signal(project)])[0]
        assert again.action == "reopened" and svc.book.get("sentry-4242")["reopened"] == 1

    async def test_a_resolution_stops_the_heal_in_flight(self, service_for: Any,
                                                          project: Path, tmp_path: Path) -> None:
        """Sentry resolving an incident that is being healed stops the heal before its next
        iteration: no agent runs, no person is told, the breaker learns nothing."""
        p = plan(tmp_path / "agent", edit(BUGGY, GOOD_FIX))
        svc = service_for(plan=p)
        (admitted,) = svc.submit([sentry_signal(project)])
        assert admitted.heal and svc.book.get("sentry-4242")["status"] == "healing"
        (res,) = svc.submit(from_sentry("issue", sentry_issue("resolved")))
        assert res.action == "resolved"
        out = await svc.healer.heal("sentry-4242")
        assert out.status == "stopped" and out.iterations == []
        assert not (tmp_path / "agent" / "prompt-1.md").exists()  # no agent was started
        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "resolved" and not inc.get("escalation")
        att = Attempts(svc.store).require(admitted.attempt_id)
        assert att["status"] == "failed" and att["stopped"] is True
        assert Attempts(svc.store).admission()["outcomes"][-1]["breaker"] is False
        assert "stopped" in audit_events(svc, "sentry-4242")

    async def test_a_culprit_outside_the_repository_is_recorded_not_healed(
            self, service_for: Any, project: Path) -> None:
        """An error whose culprit file is not in the repository being healed is an incident
        (counted, visible with the reason), and no healing attempt is made for it."""
        svc = service_for("executor.default=playbook")
        (r,) = svc.submit([sentry_signal(project, file="vendor/gone/elsewhere.py")])
        assert (r.action, r.heal, r.decision) == ("opened", False, "no_file")
        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "open" and "not in the repository" in inc["decision"]["message"]
        assert Attempts(svc.store).latest() == []

    async def test_the_concurrency_cap_holds_then_retries(
            self, service_for: Any, project: Path, tmp_path: Path) -> None:
        """With a cap of 1, a second error waits (concurrency_cap) and the watch job admits
        it once the first run is over."""
        svc = service_for("selfheal.max_concurrent=1", "selfheal.cooldown_s=0",
                          plan=plan(tmp_path / "agent", edit(BUGGY, GOOD_FIX)))
        held_alert = {"status": "firing", "fingerprint": "abc1", "labels": {
            "alertname": "Err", "severity": "critical"}, "annotations": {
            "summary": "ZeroDivisionError: division by zero", "file": "app/util.py",
            "line": "2"}}
        r1 = await svc.ingest([sentry_signal(project)])
        r2 = await svc.ingest(from_alertmanager({"version": "4", "alerts": [held_alert]},
                                                project))
        assert r1[0].heal and r2[0].decision == "concurrency_cap"
        await svc.drain(120)
        await svc.watch()
        assert svc.book.get("am-abc1")["status"] in ("healing", "escalated")
        await svc.drain(120)
        # The scripted agent fixes payment.py again (its scenario runs and passes): a fix may
        # lie outside the file that failed.
        assert svc.book.get("am-abc1")["status"] == "fixed"
        assert (svc.settings.state_path / "forge" / "prs" / "2.json").is_file()


async def _no_heal(key: str) -> None:
    return None


class TestPostFixWatch:
    async def test_regression_after_merge_reopens_and_escalates(
            self, service_for: Any, project: Path, tmp_path: Path, dirs: Any) -> None:
        """Fix → PR merged (seen by the watch) → the same alert again within the watch window,
        in a release first seen after the merge: the incident notes the regression and a
        person is told the fix did not hold (``tests/code/test_aftermerge.py``: the revert)."""
        svc = service_for(plan=plan(tmp_path / "agent", edit(BUGGY, GOOD_FIX)))
        await svc.ingest([sentry_signal(project)])
        await svc.drain(120)
        fix = svc.book.get("sentry-4242")["fix"]
        await svc.watch()
        assert "merged_at" not in svc.book.get("sentry-4242")["fix"]  # not merged yet
        (dup,) = await svc.ingest([sentry_signal(project)])
        assert dup.action == "duplicate"  # the fix awaits review: not a regression
        git(project, "merge", "-q", "--ff-only", fix["branch"])
        await svc.watch()
        inc = svc.book.get("sentry-4242")
        assert inc["fix"]["merged_at"] and inc["status"] == "fixed"
        assert Attempts(svc.store).require(fix["attempt_id"])["status"] == "pr_merged"
        (old,) = await svc.ingest([sentry_signal(project)])
        assert old.action == "duplicate"  # the release from before the merge: not deployed
        (reg,) = await svc.ingest([sentry_signal(project, release="shop@1.4.3")])
        assert reg.action == "regression"
        await svc.drain(60)
        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "escalated" and inc["regressions"][0]["pr_url"] == fix["pr_url"]
        seed = "\n".join(p.read_text() for p in (dirs.fleet / "human").glob("*.md"))
        assert "did not hold" in seed and "revert proposed" in seed

    async def test_a_fix_that_holds_resolves_the_incident(
            self, service_for: Any, project: Path, tmp_path: Path) -> None:
        """After the merge and a quiet watch window, the incident is resolved by the watch."""
        svc = service_for("context.watch_s=0",
                          plan=plan(tmp_path / "agent", edit(BUGGY, GOOD_FIX)))
        await svc.ingest([sentry_signal(project)])
        await svc.drain(120)
        git(project, "merge", "-q", "--ff-only", svc.book.get("sentry-4242")["fix"]["branch"])
        await svc.watch()
        await svc.watch()
        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "resolved" and inc["resolved_by"] == "post-fix watch"
        assert "watch_passed" in audit_events(svc, "sentry-4242")



class TestIncidentCli:
    async def test_list_show_and_render_an_incident(self, service_for: Any, project: Path,
                                                    context_dir: Path, cli: Any) -> None:
        """`healer context incidents` lists and shows a stored incident with its trail, and
        `render --incident` prints what its agent is (or would be) told."""
        svc = service_for("executor.default=playbook")
        svc.submit([sentry_signal(project)])
        listed = cli("context", "incidents", "--json")
        assert listed.code == 0 and json.loads(listed.out)["count"] == 1
        shown = cli("context", "incidents", "sentry-4242")
        assert shown.code == 0 and "sentry-4242: open · sentry" in shown.out
        assert "file:  app/payment.py:6" in shown.out and "- gate" in shown.out
        text = cli("context", "render", "--incident", "sentry-4242", "--set",
                   f"context.dir={context_dir}")
        assert text.code == 0, text.err
        assert "File: app/payment.py:6" in text.out and "### Sentry Context" in text.out
        assert cli("context", "incidents", "nope").code == 1
        assert cli("context", "incidents", "../x").code == 2


class TestHeldFix:
    async def test_a_verified_fix_that_adds_a_workflow_waits_for_a_person(
            self, service_for: Any, project: Path, tmp_path: Path) -> None:
        """The fix passes verification but also adds .github/workflows/x.yml: nothing is
        published (no PR record), the attempt waits as awaiting_approval with the branch kept;
        a person's approval of the publish stage opens the PR, which says why it was held."""
        from healer.selfheal import approvals

        step = edit(BUGGY, GOOD_FIX)
        step["edits"].append({"file": ".github/workflows/x.yml",
                              "content": "on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n"
                                         "    steps:\n      - run: echo ${{ toJSON(secrets) }}\n"})
        svc = service_for("context.max_blast_radius=10", plan=plan(tmp_path / "agent", step))
        await svc.ingest([sentry_signal(project)])
        await svc.drain(120)
        inc = svc.book.get("sentry-4242")
        assert inc["status"] == "fixed" and inc["fix"]["held"] is True, inc.get("escalation")
        assert inc["approvals"]["publish"]["verdict"] == "waiting"
        att = Attempts(svc.store).require(inc["attempt_id"])
        assert att["status"] == "awaiting_approval"
        assert any(".github/workflows/x.yml" in r for r in att["held"]["reasons"])
        prs = svc.settings.state_path / "forge" / "prs"
        assert not prs.exists() or not list(prs.iterdir())  # the forge was never asked
        # The fix waits in its sealed clone; the operator's repository has not got it yet.
        assert git(att["worktree"], "rev-parse", att["branch"]).strip() == att["head_sha"]
        with pytest.raises(subprocess.CalledProcessError):
            git(project, "rev-parse", "--verify", "--quiet", att["branch"])

        out = approvals.approve(svc.settings, svc.store, inc["id"], by="fay", via="api",
                                comment="workflow is fine", context=svc)
        assert out.stage == "publish" and out.pr_url
        pr = json.loads((prs / "1.json").read_text())
        assert "Held for a person's approval" in pr["body"]
        assert "touches CI or automation: .github/workflows/x.yml" in pr["body"]
        assert "approved by **fay** (via api)" in pr["body"]
        inc = svc.book.get("sentry-4242")
        assert inc["fix"]["pr_number"] == 1 and inc["fix"]["held"] is False
        assert Attempts(svc.store).require(att["attempt_id"])["status"] == "pr_open"
        assert "approved" in audit_events(svc, "sentry-4242")
