"""Healing runs end to end: real git clones, a scripted agent process, the local forge."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from selfheal_helpers import TRACEBACK, wait_status

from healer.core.store import FileStore
from healer.selfheal import attempts as st
from healer.selfheal.dispatch import Dispatcher, reap_worktrees
from healer.selfheal.service import SelfHealService
from healer.testing.git import git

pytestmark = pytest.mark.e2e


def bug_report(repo: Path) -> dict[str, str]:
    return {"error_type": "KeyError", "error_message": "'user_id'",
            "traceback": TRACEBACK.format(root=repo), "tool_name": "lookup_user",
            "context": "Looking up a row that came from the import job; rows from the legacy "
                       "export have no user_id column."}


async def heal(service: Any, repo: Path) -> dict[str, Any]:
    """Report the bug and run its healing attempt in this process, to the end."""
    out = service.report(bug_report(repo))
    assert out["accepted"], out
    return await Dispatcher(service.settings, service.store).run(out["attempt_id"])


def prs(settings: Any) -> list[Path]:
    return sorted((settings.state_path / "forge" / "prs").glob("*.json"))


class TestOutcomes:
    async def test_fixable_bug_becomes_a_pr_record(self, service: Any, repo: Path) -> None:
        """The agent's commit in the worktree becomes a local PR: branch, record and diff."""
        att = await heal(service("fix"), repo)
        assert att["status"] == "pr_open", att.get("reason")
        fp12 = att["fingerprint"][:12]
        records = prs(service("fix").settings)
        assert len(records) == 1
        pr = json.loads(records[0].read_text())
        assert pr["title"] == f"fix(healing): KeyError in src/app/tools.py:lookup [{fp12}]"
        assert pr["labels"] == ["self-healing", "automated"]
        assert pr["head"] == att["branch"] and pr["base"] == "main"
        assert pr["state"] == "open" and pr["number"] == att["pr_number"] == 1
        assert pr["draft"] is True and pr["head"].startswith("healer/")
        diff = Path(pr["diff_file"]).read_text()
        assert '-    return row["user_id"]' in diff and '+    return row.get("user_id")' in diff
        assert "fix: tolerate rows without user_id" in pr["body"]
        assert att["fingerprint"] in pr["body"]
        # The fix lives on the branch; main is untouched until someone merges.
        assert "row.get" in git(repo, "show", f"{att['branch']}:src/app/tools.py")
        assert "row.get" not in git(repo, "show", "main:src/app/tools.py")
        assert Path(att["worktree"]).is_dir()

    async def test_unfixable(self, service: Any, repo: Path) -> None:
        """An UNFIXABLE file ends the attempt as unfixable, its text kept; no PR."""
        svc = service("unfixable")
        att = await heal(svc, repo)
        assert att["status"] == "unfixable"
        assert "upstream payments API returns HTTP 503" in att["unfixable_reason"]
        assert prs(svc.settings) == []

    async def test_secret_in_the_diff_blocks_the_pr(self, service: Any, repo: Path) -> None:
        """A diff with a key and an e-mail → anonymization_failed; nothing is published."""
        svc = service("leak")
        att = await heal(svc, repo)
        assert att["status"] == "anonymization_failed"
        assert {"API-KEY", "EMAIL"} <= set(att["findings"])
        assert "sk-ant" not in json.dumps(att) and "jane.doe" not in json.dumps(att)
        assert prs(svc.settings) == []
        assert not (svc.settings.state_path / "forge").exists()

    async def test_agent_that_hangs_times_out(self, service: Any, repo: Path) -> None:
        """Over the time limit the attempt is timeout and the agent process is gone."""
        svc = service("hang", timeout_s=2)
        started = time.monotonic()
        att = await heal(svc, repo)
        assert att["status"] == "timeout"
        assert time.monotonic() - started < 30
        hang_script = str(Path(svc.settings.executor.commands["healing-agent"][1]))
        assert not [p for p in Path("/proc").glob("[0-9]*") if _cmdline_has(p, hang_script)]

    async def test_no_commits_is_failed(self, service: Any, repo: Path) -> None:
        """An agent that changes nothing leaves a failed attempt with the reason."""
        att = await heal(service("nothing"), repo)
        assert att["status"] == "failed"
        assert "made no commits" in att["reason"]

    async def test_agent_reports_are_not_healed(self, service: Any, repo: Path) -> None:
        """A report made from inside the healing run (its sandbox) is refused (no
        recursion)."""
        att = await heal(service("recurse"), repo)
        inner = json.loads(Path(att["worktree"], "probe.json").read_text())
        assert inner["accepted"] is False and inner["reason"] == "recursion"


class TestAfterThePR:
    async def test_merge_is_noticed_on_refresh(self, service: Any, repo: Path) -> None:
        """Once the branch is merged into main, refresh() records pr_merged."""
        svc = service("fix")
        att = await heal(svc, repo)
        assert svc.refresh() == []  # still open
        git(repo, "merge", "--quiet", "--no-ff", "-m", "merge fix", att["branch"])
        changed = svc.refresh()
        assert [a["status"] for a in changed] == ["pr_merged"]
        assert svc.status(att["fingerprint"])["attempts"][0]["status"] == "pr_merged"

    async def test_closed_pr_is_failed(self, service: Any, repo: Path) -> None:
        """A PR closed without merging ends the attempt as failed."""
        svc = service("fix")
        await heal(svc, repo)
        record = prs(svc.settings)[0]
        data = json.loads(record.read_text())
        record.write_text(json.dumps({**data, "state": "closed"}))
        assert [a["status"] for a in svc.refresh()] == ["failed"]

    async def test_worktrees_are_reaped_after_the_ttl(self, service: Any, repo: Path) -> None:
        """After worktree_ttl_s the worktree goes; a PR's branch stays, others' go."""
        svc = service("fix")
        fixed = await heal(svc, repo)
        nothing = service("nothing", cooldown_s=0)
        await Dispatcher(nothing.settings, nothing.store).run(
            nothing.report({**bug_report(repo), "call_site": "src/app/other.py:f"})["attempt_id"])
        assert reap_worktrees(svc.settings, svc.store, now=time.time()) == []
        reaped = reap_worktrees(svc.settings, svc.store, now=time.time() + 86400 + 1)
        assert len(reaped) == 2
        branches = git(repo, "branch", "--list", "healer/*")
        assert fixed["branch"] in branches and branches.count("healer/") == 1
        assert not Path(fixed["worktree"]).exists()
        assert "heal-" not in git(repo, "worktree", "list")

    async def test_a_clone_on_another_replica_is_left_to_it(self, service: Any, repo: Path
                                                           ) -> None:
        """Replicas share the store, not disks: an attempt run by another node keeps its
        clone until that node reaps it; this node's own are reaped."""
        svc = service("fix")
        fixed = await heal(svc, repo)
        owner = svc.attempts.require(fixed["attempt_id"]).get("owner") or {}
        svc.attempts.update(fixed["attempt_id"], owner={**owner, "node": "another-node"})
        assert reap_worktrees(svc.settings, svc.store, now=time.time() + 86400 + 1) == []
        assert Path(fixed["worktree"]).exists()
        svc.attempts.update(fixed["attempt_id"], owner={**owner, "node": svc.settings.node})
        reaped = reap_worktrees(svc.settings, svc.store, now=time.time() + 86400 + 1)
        assert reaped == [fixed["attempt_id"]] and not Path(fixed["worktree"]).exists()


class TestBackground:
    def test_detached_worker_runs_the_attempt(self, make_settings: Any, repo: Path) -> None:
        """report() returns at once; a detached worker process takes the attempt to pr_open."""
        settings = make_settings("fix")
        svc = SelfHealService(settings, FileStore(settings.state_path), env={})
        out = svc.report(bug_report(repo))
        assert svc.attempts.require(out["attempt_id"])["status"] in ("dispatch_pending",
                                                                     "investigating")
        final = wait_status(lambda: svc.attempts.get(out["attempt_id"]),
                            {"pr_open", "failed", "timeout"})
        assert final["status"] == "pr_open", final.get("reason")
        assert final["worker"]["pid"] != os.getpid()

    async def test_task_worker_in_process(self, make_settings: Any, repo: Path) -> None:
        """With selfheal.worker task the run is an asyncio task of the calling process."""
        settings = make_settings("fix", worker="task")
        svc = SelfHealService(settings, FileStore(settings.state_path), env={})
        out = svc.report(bug_report(repo))
        await svc.drain(60)
        final = svc.attempts.require(out["attempt_id"])
        assert final["status"] == "pr_open" and final["worker"]["pid"] == os.getpid()

    def test_killed_worker_is_settled_by_recovery(self, make_settings: Any,
                                                  repo: Path) -> None:
        """kill -9 of the worker mid-run: recovery fails the attempt and frees its slot."""
        settings = make_settings("hang", timeout_s=20)
        svc = SelfHealService(settings, FileStore(settings.state_path), env={})
        # Later reports only record their launch: no more hanging agents.
        quiet = SelfHealService(settings, FileStore(settings.state_path), env={},
                                launcher=lambda _a: None)
        out = svc.report(bug_report(repo))
        try:
            att = wait_status(lambda: svc.attempts.get(out["attempt_id"]), {"investigating"})
            os.kill(att["worker"]["pid"], 9)
            wait_gone(att["worker"]["pid"])
            assert quiet.report({**bug_report(repo), "call_site": "src/x.py:a"})["accepted"]
            assert quiet.report({**bug_report(repo), "call_site": "src/x.py:b"})["reason"] == \
                "concurrency_cap"
            settled = svc.recover()
            assert (out["attempt_id"], "failed") in [(a["attempt_id"], a["status"])
                                                     for a in settled]
            assert quiet.report({**bug_report(repo), "call_site": "src/x.py:b"})["accepted"]
        finally:
            _kill_hangers(settings)


def _cmdline_has(proc_dir: Path, needle: str) -> bool:
    try:
        return needle in (proc_dir / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def wait_gone(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _kill_hangers(settings: Any) -> None:
    """The hanging agent outlived its killed worker (it has its own session): end it."""
    script = settings.executor.commands["healing-agent"][1]
    for p in Path("/proc").glob("[0-9]*"):
        if _cmdline_has(p, script):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(p.name), 9)


class TestRecovery:
    def test_recovery_rules(self, service: Any) -> None:
        """Dead investigating → failed (timeout past its deadline); old pending → failed."""
        svc = service(max_concurrent=3)
        store = svc.store
        a, b, c = (svc.report({"error_type": "KeyError", "error_message": "x",
                               "call_site": f"src/{n}.py:f"}) for n in "abc")
        dead = {"host": "elsewhere", "pid": 1, "start": 0}
        svc.attempts.transition(a["attempt_id"], st.INVESTIGATING, worker=dead,
                                deadline=time.time() + 600)
        svc.attempts.transition(b["attempt_id"], st.INVESTIGATING, worker=dead,
                                deadline=time.time() - 1)
        data = store.get(st.ATTEMPTS, c["attempt_id"]).data  # type: ignore[union-attr]
        store.put(st.ATTEMPTS, c["attempt_id"], {**data, "created_at": time.time() - 3600})
        svc.recover()
        assert svc.attempts.require(a["attempt_id"])["status"] == "failed"
        assert svc.attempts.require(b["attempt_id"])["status"] == "timeout"
        assert svc.attempts.require(c["attempt_id"])["status"] == "failed"
        assert svc.attempts.admission()["active"] == {}

    def test_live_worker_is_left_alone(self, service: Any) -> None:
        """An attempt whose worker runs (this process) within its deadline is untouched."""
        from healer.selfheal.attempts import worker_identity

        svc = service()
        a = svc.report({"error_type": "KeyError", "error_message": "x"})
        svc.attempts.transition(a["attempt_id"], st.INVESTIGATING, worker=worker_identity(),
                                deadline=time.time() + 600)
        assert svc.recover() == []
        assert svc.attempts.require(a["attempt_id"])["status"] == "investigating"

    def test_illegal_transitions_are_refused(self, service: Any) -> None:
        """The state machine refuses jumps it does not allow (failed → pr_open …)."""
        svc = service()
        a = svc.report({"error_type": "KeyError", "error_message": "x"})["attempt_id"]
        with pytest.raises(st.TransitionError):
            svc.attempts.transition(a, st.PR_OPEN)
        svc.attempts.transition(a, st.FAILED)
        with pytest.raises(st.TransitionError):
            svc.attempts.transition(a, st.INVESTIGATING)
