"""After the merge: a merged fix whose error comes back once its release is seen reopens the
same incident, gets ONE draft revert PR whose diff undoes the fix (real git, the real local
forge, or the fake GitHub), and a person is told once; before the release is seen, nothing.

The fix itself is made here the way a healing run leaves it (a commit in a clone of its own,
published through the forge, the attempt moved to ``pr_open``), so these tests hold whatever
the attempt flow does before the PR; the merge is a real ``git merge`` seen by the real watch.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from healer.api.app import ApiContext, create_app
from healer.code.aftermerge import REVERTS_DUE, AfterMerge, revert_branch, runs_fix
from healer.config import load_settings
from healer.context.sentry import from_sentry
from healer.context.service import ContextService
from healer.core.audit import Audit
from healer.core.incidents import Ledger
from healer.core.publish.forge import GitHubForge, LocalForge, PullRequest
from healer.core.store import FileStore
from healer.selfheal import attempts as st
from healer.selfheal.service import SelfHealService
from healer.testing.fake_github import FakeGitHub
from healer.testing.git import git
from healer.testing.wait import until
from healer.testing.webhooks import sentry_event_alert

BUGGY = "def average(total, count):\n    return total / count\n"
FIXED = "def average(total, count):\n    return total / count if count else 0.0\n"
REPORT = {"error_type": "ZeroDivisionError", "error_message": "division by zero",
          "call_site": "app/payment.py:average"}




@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "shop"
    (r / "app").mkdir(parents=True)
    (r / "app" / "payment.py").write_text(BUGGY)
    git(tmp_path, "init", "-q", "-b", "main", str(r))
    git(r, "config", "user.email", "dev@example.com")
    git(r, "config", "user.name", "Dev")
    git(r, "add", ".")
    git(r, "commit", "-qm", "initial")
    return r


def settings_for(tmp_path: Path, repo: Path, *extra: str) -> Any:
    for d in ("state", "results", "fleet"):
        (tmp_path / d).mkdir(exist_ok=True)
    return load_settings(env={}, overrides=[
        f"state_dir={tmp_path / 'state'}", f"results_dir={tmp_path / 'results'}",
        f"fleet_dir={tmp_path / 'fleet'}", f"cto_config={tmp_path / 'none.json'}",
        f"fleet.config={tmp_path / 'none.json'}", f"selfheal.repo={repo}",
        f"context.dir={tmp_path / 'no-context'}", "node_id=testnode", *extra])


def publish_fix(settings: Any, store: Any, repo: Path, aid: str, tmp_path: Path) -> dict[str, Any]:
    """What a healing run leaves: the fix committed in a clone, a PR through the local forge,
    the attempt ``pr_open`` with the contract's fields."""
    att = st.Attempts(store)
    clone = tmp_path / f"clone-{aid}"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    branch = f"healer/fix-{aid[-8:]}"
    git(clone, "checkout", "-qb", branch)
    (clone / "app" / "payment.py").write_text(FIXED)
    git(clone, "-c", "user.name=healer", "-c", "user.email=healer@localhost", "commit",
        "-qam", "fix: no division by zero in average")
    head, base_sha = git(clone, "rev-parse", "HEAD").strip(), git(repo, "rev-parse",
                                                                   "main").strip()
    ref = LocalForge(settings.state_path / "forge", repo).open_pr(PullRequest(
        title="fix(healing): ZeroDivisionError", body="the fix", head=branch, base="main",
        head_sha=head, base_sha=base_sha, diff=git(clone, "diff", base_sha, head),
        source=str(clone)))
    att.transition(aid, st.INVESTIGATING, expect=st.DISPATCH_PENDING)
    att.update(aid, branch=branch, base="main", base_sha=base_sha, repo=str(repo))
    return att.transition(aid, st.PR_OPEN, expect=st.INVESTIGATING, pr_url=ref.url,
                          pr_number=ref.number, head_sha=head)


def prs(settings: Any) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in
            sorted((settings.state_path / "forge" / "prs").glob("*.json"))]


def seeds(tmp_path: Path) -> list[str]:
    return [p.read_text() for p in sorted((tmp_path / "fleet" / "human").glob("*.md"))]


def events(settings: Any, iid: str) -> list[str]:
    return [e["event"] for e in Audit(settings.state_path).read(iid)]


class TestReportError:
    @pytest.fixture
    def merged(self, tmp_path: Path, repo: Path) -> tuple[SelfHealService, str]:
        """A report_error fix, merged with ``git merge`` and seen merged by ``refresh``."""
        settings = settings_for(tmp_path, repo)
        svc = SelfHealService(settings, FileStore(settings.state_path), launcher=[].append,
                              env={}, runner=_Available())
        first = svc.report(REPORT)
        assert first["accepted"], first
        att = publish_fix(settings, svc.store, repo, first["attempt_id"], tmp_path)
        git(repo, "merge", "-q", "--ff-only", att["branch"])
        (moved,) = svc.refresh()
        assert moved["status"] == st.PR_MERGED
        return svc, first["attempt_id"]

    async def test_the_error_after_the_merge_reopens_and_proposes_one_draft_revert(
            self, merged: tuple[SelfHealService, str], repo: Path, tmp_path: Path) -> None:
        svc, aid = merged
        iid = svc.attempts.require(aid)["incident_id"]
        again = svc.report(REPORT)
        assert again["accepted"] is False and again["reason"] == "fix_regressed", again
        assert again["attempt_id"] == aid  # no new healing run
        await svc.drain(60)

        incident = Ledger(svc.store).get(iid)
        assert incident is not None and incident["reopened"] == 1  # the same incident
        assert "regression" in [h.get("event") for h in incident["history"]]
        fix, revert = prs(svc.settings)
        assert revert["head"] == revert_branch(aid) and revert["draft"] is True
        assert revert["state"] == "open" and revert["reverts_pr"] == fix["url"]
        assert "came back 1 time(s) after the merge" in revert["body"]
        assert fix["url"] in revert["body"]
        # The diff undoes the fix: the revert branch holds the code from before it.
        assert git(repo, "show", f"{revert_branch(aid)}:app/payment.py") == BUGGY
        assert "-    return total / count if count else 0.0" in Path(
            revert["diff_file"]).read_text()
        assert git(repo, "rev-parse", "main") == git(repo, "rev-parse", fix["head_sha"])
        assert (repo / "app" / "payment.py").read_text() == FIXED  # nothing merged by healer
        (seed,) = seeds(tmp_path)
        assert "Fix did not hold" in seed and revert["url"] in seed and "draft" in seed.lower()
        assert incident["status"] == "escalated"
        trail = events(svc.settings, iid)
        assert trail.count("fix_regressed") == 1 and trail.count("revert_proposed") == 1

    async def test_a_second_recurrence_makes_no_second_pr_and_no_second_escalation(
            self, merged: tuple[SelfHealService, str], tmp_path: Path) -> None:
        svc, aid = merged
        svc.report(REPORT)
        await svc.drain(60)
        again = svc.report(REPORT)
        await svc.drain(60)
        assert again["reason"] == "fix_regressed"
        assert len(prs(svc.settings)) == 2 and len(seeds(tmp_path)) == 1
        revert = svc.attempts.require(aid)["revert"]
        assert revert["recurrences"] == 2 and revert["state"] == "proposed"
        # A revert marked due again (a crash) finds its PR in the forge instead of a new one.
        svc.store.update(st.ATTEMPTS, aid, lambda cur: {**cur, "revert": {
            **cur["revert"], "state": "due"}})
        svc.store.add_member(REVERTS_DUE, aid)
        (done,) = await svc.aftermerge.propose_due()
        assert done.state == "proposed" and done.pr_number == 2
        assert len(prs(svc.settings)) == 2 and len(seeds(tmp_path)) == 1

    async def test_before_the_merge_is_seen_there_is_no_revert(
            self, tmp_path: Path, repo: Path) -> None:
        settings = settings_for(tmp_path, repo)
        svc = SelfHealService(settings, FileStore(settings.state_path), launcher=[].append,
                              env={}, runner=_Available())
        aid = svc.report(REPORT)["attempt_id"]
        publish_fix(settings, svc.store, repo, aid, tmp_path)
        again = svc.report(REPORT)  # the PR is open, not merged: the report joins it
        assert again["reason"] == "already_investigating"
        assert len(prs(settings)) == 1 and "revert" not in svc.attempts.require(aid)


    async def test_over_the_real_http_route(self, merged: tuple[SelfHealService, str],
                                            tmp_path: Path) -> None:
        """``POST /api/v1/errors`` (token) answers ``fix_regressed``; the revert follows."""
        svc, aid = merged
        svc.settings.api.token = "t0ken-for-the-test"
        app = create_app(ApiContext(settings=svc.settings, store=svc.store,
                                    services={"selfheal": svc}))
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                               log_level="warning", lifespan="off"))
        task = asyncio.create_task(server.serve())
        try:
            await until(lambda: server.started, 10)
            port = server.servers[0].sockets[0].getsockname()[1]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                         headers={"Authorization": "Bearer t0ken-for-the-test"}
                                         ) as c:
                got = await c.post("/api/v1/errors", json=REPORT)
            assert got.status_code == 200 and got.json()["reason"] == "fix_regressed"
            await svc.drain(60)
        finally:
            server.should_exit = True
            await task
        assert [p["draft"] for p in prs(svc.settings)] == [True, True]
        assert svc.attempts.require(aid)["revert"]["state"] == "proposed"
        assert len(seeds(tmp_path)) == 1


class TestSentryReleases:
    async def test_only_an_event_in_a_release_after_the_merge_reverts(
            self, tmp_path: Path, repo: Path) -> None:
        """Old release after the merge: counted (the fix is not deployed). New release: the
        incident reopens, one draft revert PR, one escalation; more events: nothing new."""
        settings = settings_for(tmp_path, repo)
        svc = ContextService(settings, FileStore(settings.state_path), root=repo)

        def event(release: str) -> Any:
            return from_sentry("event_alert", sentry_event_alert(
                line=2, file="app/payment.py", release=release), repo)

        (opened,) = svc.submit(event("shop@1.4.2"))
        key = opened.key
        inc = svc.book.get(key)
        aid = "20240101T000000-0a0b0c0d"
        svc.book.attempts.create(aid, {
            "fingerprint": inc["fingerprint"], "error_type": inc["error_type"],
            "call_site": inc["call_site"], "incident": key, "incident_id": inc["id"]})
        att = publish_fix(settings, svc.store, repo, aid, tmp_path)
        svc.book.update(key, event="fixed", status="fixed", fix={
            "pr_url": att["pr_url"], "pr_number": att["pr_number"], "attempt_id": aid,
            "branch": att["branch"]})
        git(repo, "merge", "-q", "--ff-only", att["branch"])
        await svc.watch()
        assert svc.book.attempts.require(aid)["status"] == st.PR_MERGED

        (old,) = await svc.ingest(event("shop@1.4.2"))
        await svc.drain(60)
        assert old.action == "duplicate" and len(prs(settings)) == 1 and not seeds(tmp_path)

        (reg,) = await svc.ingest(event("shop@1.4.3"))
        await svc.drain(60)
        assert reg.action == "regression"
        inc = svc.book.get(key)
        assert inc["status"] == "escalated" and inc["reopened"] == 1
        _fix, revert = prs(settings)
        assert revert["draft"] is True and revert["head"] == revert_branch(aid)
        assert "after release `shop@1.4.3`" in revert["body"]
        assert git(repo, "show", f"{revert_branch(aid)}:app/payment.py") == BUGGY
        (seed,) = seeds(tmp_path)
        assert revert["url"] in seed

        (more,) = await svc.ingest(event("shop@1.4.3"))
        await svc.drain(60)
        assert more.action == "duplicate" and len(prs(settings)) == 2
        assert len(seeds(tmp_path)) == 1
        trail = events(settings, inc["id"])
        assert trail.count("fix_regressed") == 1 and trail.count("revert_proposed") == 1


class TestRules:
    @pytest.mark.parametrize(("release", "releases", "runs"), [
        ("shop@2", {"shop@1": {"first": 10.0}}, True),  # first seen after the merge
        ("shop@1", {"shop@1": {"first": 10.0}}, False),  # seen before: old code
        ("shop@1", {"shop@1": {"first": 120.0}}, True),
        ("", {}, True),  # no release anywhere (report_error): the merge is the release
        ("", {"shop@1": {"first": 10.0}}, False),  # releases known, this event says none
    ])
    def test_which_occurrence_runs_the_fix(self, release: str, releases: dict[str, Any],
                                           runs: bool) -> None:
        assert runs_fix(release, releases, merged=100.0) is runs

    def test_the_revert_branch_is_healers_own_and_a_safe_name(self) -> None:
        assert revert_branch("20240101T000000-0a0b0c0d") == \
            "healer/revert-20240101T000000-0a0b0c0d"
        with pytest.raises(ValueError, match="attempt id"):
            revert_branch("../main")

    def test_a_recurrence_after_the_watch_is_not_a_regression(
            self, tmp_path: Path, repo: Path) -> None:
        settings = settings_for(tmp_path, repo, "context.watch_s=60")
        store = FileStore(settings.state_path)
        att = st.Attempts(store, clock=lambda: 1000.0)
        att.create("a-1", {"fingerprint": "f" * 64})
        for to in (st.INVESTIGATING, st.PR_OPEN, st.PR_MERGED):
            att.transition("a-1", to)
        watch = AfterMerge(settings, store)
        assert watch.recurrence("f" * 64, at=1030.0) is not None
        assert watch.recurrence("f" * 64, at=1100.0) is None


def test_the_github_forge_opens_the_revert_as_a_draft_and_finds_it(
        tmp_path: Path, repo: Path) -> None:
    """``draft`` reaches GitHub as ``"draft": true``; ``find_pr`` finds the branch's PR."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    branch = revert_branch("20240101T000000-0a0b0c0d")
    git(repo, "branch", branch)
    sha = git(repo, "rev-parse", branch).strip()
    with FakeGitHub() as gh:
        forge = GitHubForge(api_url=gh.url, repo="acme/shop", token=gh.token,
                            local_repo=repo, push_url=str(bare))
        assert forge.find_pr(branch) is None
        ref = forge.open_pr(PullRequest(title="revert(healing): x", body="why", head=branch,
                                        base="main", head_sha=sha, base_sha=sha, diff="",
                                        draft=True))
        assert gh.pulls[ref.number]["draft"] is True
        found = forge.find_pr(branch)
        assert found is not None and found.number == ref.number


class _Available:
    """A runner whose model check says yes (the runs themselves are not started here)."""

    def available(self) -> bool:
        return True
