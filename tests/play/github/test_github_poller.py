"""Polling GitHub for a play's PRs: A1, A4 and A5 end to end through the play pipeline,
conditional requests (304s on a quiet pass) and rate limits (wait for the reset, no
hammering)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from github_rig import CIPHER, CLEO, PLAY, REPO, REX, TESS, TOKEN, Clock, Rig

from healer.play import progress
from healer.play.github import pulls
from healer.testing.fake_github import FakeGitHub
from healer.testing.wait import until


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fake(clock: Clock) -> Iterator[FakeGitHub]:
    with FakeGitHub(TOKEN, clock=clock) as gh:
        yield gh


@pytest.fixture
async def rig(tmp_path: Path, fake: FakeGitHub, clock: Clock, dirs: Any) -> AsyncIterator[Rig]:
    r = Rig(dirs.root, fake, clock)  # the dirs `healer status` (the cli fixture) reads
    r.start()
    yield r
    await r.close()


def gets(fake: FakeGitHub, since: int = 0) -> list[dict[str, object]]:
    return [e for e in fake.log[since:] if e["method"] == "GET"]


class TestMatching:
    async def test_only_the_plays_prs_are_read(self, rig: Rig, fake: FakeGitHub) -> None:
        """A PR whose branch names the play's task is the play's; task-42 is not task-4, and
        another repository is never asked."""
        mine = fake.add_pull(REPO, "feature/task-4-api", REX)
        fake.add_pull(REPO, "feature/task-42-other", REX)
        fake.add_pull("someone/else", "feature/task-4-api", REX)
        report = await rig.poller.poll_once()
        assert report.prs == 1 and not report.errors
        assert [r["number"] for r in rig.watcher.book.records()] == [mine["number"]]
        assert not any("someone" in str(e["path"]) for e in fake.log)

    async def test_a_label_naming_the_play_matches_too(self, rig: Rig,
                                                       fake: FakeGitHub) -> None:
        fake.add_pull(REPO, "wip", REX, labels=[PLAY])
        assert (await rig.poller.poll_once()).prs == 1


class TestAlerts:
    async def test_a5_ci_failure_after_approval_remediates_then_resolves(
            self, rig: Rig, fake: FakeGitHub, cli: Any) -> None:
        """Approved, then the build fails: an A5 issue on the session with the PR's link, a
        play incident, the fix_code action run for the PR; green again → resolved."""
        pr = fake.add_pull(REPO, "feature/task-4-api", REX)
        n = pr["number"]
        sha = fake.add_commit(n)
        fake.add_review(n, CLEO, "APPROVED")
        fake.set_check(sha, "build", "failure")
        await rig.poller.poll_once()
        issue = rig.issue("A5")
        assert issue and issue["issue_type"] == "build_failure"
        assert issue["link"] == pr["html_url"] and issue["target"] == f"pr/{REPO}/{n}"
        inc = rig.incident("A5")
        assert inc is not None and inc["links"]["pr"] == pr["html_url"]
        await until(lambda: rig.actions(), 30)
        assert rig.actions()[0] == f"fix_code A5 pr/{REPO}/{n} rex"
        status = cli("status")  # another process reads the same records
        assert pr["html_url"] in status.out and "github: 1 PR(s) watched, 1 alert(s)" in \
            status.out, status.out
        fake.set_check(sha, "build", "success")
        await rig.poller.poll_once()
        await until(lambda: (rig.incident("A5") or {}).get("status") == "resolved", 30)
        assert (rig.issue("A5") or {}).get("resolved")

    async def test_a5_merge_conflict_after_approval(self, rig: Rig, fake: FakeGitHub) -> None:
        pr = fake.add_pull(REPO, "feature/task-4-api", REX)
        fake.add_review(pr["number"], CLEO, "APPROVED")
        pr.update(mergeable=False, mergeable_state="dirty")
        await rig.poller.poll_once()
        assert "merge conflict" in (rig.issue("A5") or {}).get("description", "")
        pr.update(mergeable=True, mergeable_state="clean")
        await rig.poller.poll_once()
        await until(lambda: (rig.incident("A5") or {}).get("status") == "resolved", 30)

    async def test_a4_approval_loop_escalates_to_a_person(self, rig: Rig, fake: FakeGitHub,
                                                          tmp_path: Path) -> None:
        """Approved and sent back twice: A4; no action for its strategy (retry) is
        configured, so after play.max_iterations the incident is escalated with a seed file
        in .fleet-messages/human/ naming HEAL-A4."""
        n = fake.add_pull(REPO, "feature/task-4-api", REX)["number"]
        for state in ("APPROVED", "CHANGES_REQUESTED", "APPROVED", "CHANGES_REQUESTED"):
            fake.add_review(n, CLEO, state)
        await rig.poller.poll_once()
        await until(lambda: (rig.incident("A4") or {}).get("status") == "escalated", 30)
        seeds = list((tmp_path / "fleet" / "human").glob("*.md"))
        assert seeds and "HEAL-A4" in seeds[0].read_text()
        assert rig.issue("A4")["agent"] == "rex"  # type: ignore[index]

    async def test_a1_out_of_order_hand_off_fires_and_clears(self, rig: Rig,
                                                             fake: FakeGitHub) -> None:
        n = fake.add_pull(REPO, "feature/task-4-api", REX)["number"]
        fake.add_comment(n, REX, "Implementation done, over to quality.")
        fake.add_comment(n, TESS, "Tests pass.")
        await rig.poller.poll_once()
        issue = rig.issue("A1")
        assert issue and issue["agent"] == "tess" and "quality, security" in \
            issue["description"]
        fake.add_comment(n, CLEO, "Quality OK.")
        fake.add_comment(n, CIPHER, "No findings. <!-- healer-agent: cipher -->")
        await rig.poller.poll_once()
        await until(lambda: (rig.incident("A1") or {}).get("status") == "resolved", 30)

    async def test_a_thread_longer_than_a_page_is_read_at_its_newest(
            self, rig: Rig, fake: FakeGitHub) -> None:
        """GitHub lists comments oldest first, 100 a page: on a PR with 150 the hand-offs are
        on page 2, found through the Link header's last page; as the thread grows past
        another page the poller follows it to the newest comments."""
        n = fake.add_pull(REPO, "feature/task-4-api", REX)["number"]
        for k in range(140):
            fake.add_comment(n, "octocat", f"a person's note {k}")
        fake.add_comment(n, REX, "Implementation done, over to quality.")
        fake.add_comment(n, TESS, "Tests pass.")
        for k in range(8):
            fake.add_comment(n, "octocat", f"later note {k}")
        await rig.poller.poll_once()
        issue = rig.issue("A1")
        assert issue and issue["agent"] == "tess"
        pages = {parse_qs(str(e["query"])).get("page", ["1"])[0] for e in gets(fake)
                 if str(e["path"]).endswith("/comments")}
        assert pages == {"1", "2"}
        for k in range(55):  # page 2 fills up; page 3 begins
            fake.add_comment(n, "octocat", f"more {k}")
        fake.add_comment(n, CLEO, "Quality OK.")
        fake.add_comment(n, CIPHER, "No findings. <!-- healer-agent: cipher -->")
        await rig.poller.poll_once()
        await until(lambda: (rig.incident("A1") or {}).get("status") == "resolved", 30)
        kept = rig.watcher.book.get(pulls.pr_key(REPO, n)) or {}
        assert kept.get("pages", {}).get("comments") == {"page": 3, "full": False}

    async def test_merged_pr_clears_its_alerts(self, rig: Rig, fake: FakeGitHub) -> None:
        pr = fake.add_pull(REPO, "feature/task-4-api", REX)
        sha = fake.add_commit(pr["number"])
        fake.add_review(pr["number"], CLEO, "APPROVED")
        fake.set_status(sha, "ci/jenkins", "failure")
        await rig.poller.poll_once()
        assert rig.issue("A5")
        pr.update(state="closed", merged=True)
        report = await rig.poller.poll_once()
        assert report.released == 1 and rig.watcher.book.tracked() == []
        await until(lambda: (rig.incident("A5") or {}).get("status") == "resolved", 30)


class TestProgress:
    async def test_commits_and_comments_are_the_plays_progress(self, rig: Rig,
                                                               fake: FakeGitHub,
                                                               clock: Clock) -> None:
        n = fake.add_pull(REPO, "feature/task-4-api", REX)["number"]
        assert progress.last(rig.store, PLAY) is None
        fake.add_commit(n)
        await rig.poller.poll_once()
        first = progress.last(rig.store, PLAY)
        assert first is not None
        clock.now += 30
        fake.add_comment(n, CLEO, "looked at it")
        await rig.poller.poll_once()
        assert (progress.last(rig.store, PLAY) or 0) > first


class TestConditionalRequests:
    async def test_a_quiet_second_pass_is_all_304s(self, rig: Rig, fake: FakeGitHub) -> None:
        """Every URL is asked with the ETag of its last answer; nothing changed → 304,
        which the rate limit does not count."""
        pr = fake.add_pull(REPO, "feature/task-4-api", REX)
        fake.set_check(fake.add_commit(pr["number"]), "build", "success")
        first = await rig.poller.poll_once()
        assert first.requests == 7 and first.not_modified == 0
        remaining = fake.remaining
        mark = len(fake.log)
        second = await rig.poller.poll_once()
        log = gets(fake, mark)
        assert second.requests == 7 and second.not_modified == 7
        assert {e["status"] for e in log} == {304} and all(e["if_none_match"] for e in log)
        assert fake.remaining == remaining
        fake.add_comment(pr["number"], CLEO, "new")
        mark = len(fake.log)
        await rig.poller.poll_once()
        changed = {str(e["path"]).rsplit("/", 1)[-1] for e in gets(fake, mark)
                   if e["status"] == 200}
        assert "comments" in changed and "check-runs" not in changed


class TestRateLimits:
    async def test_exhaustion_waits_for_the_reset(self, rig: Rig, fake: FakeGitHub,
                                                  clock: Clock) -> None:
        """403 with X-RateLimit-Remaining: 0 → nothing is sent until X-RateLimit-Reset."""
        fake.add_pull(REPO, "feature/task-4-api", REX)
        fake.exhaust(clock.now + 600)
        report = await rig.poller.poll_once()
        assert report.waiting_until == int(clock.now + 600) and report.requests == 1
        mark = len(fake.log)
        clock.now += 300
        held = await rig.poller.poll_once()
        assert held.requests == 0 and len(fake.log) == mark  # not one request while held
        clock.now += 301
        resumed = await rig.poller.poll_once()
        assert resumed.prs == 1 and not resumed.waiting_until

    async def test_low_budget_pauses_before_it_runs_out(self, rig: Rig, fake: FakeGitHub,
                                                        clock: Clock) -> None:
        """Below github.min_remaining the poller stops, leaving the forge its share."""
        fake.add_pull(REPO, "feature/task-4-api", REX)
        fake.remaining = 102
        report = await rig.poller.poll_once()
        assert report.waiting_until and fake.remaining >= 99
        assert (await rig.poller.poll_once()).requests == 0

    async def test_secondary_limit_honours_retry_after(self, rig: Rig, fake: FakeGitHub,
                                                       clock: Clock) -> None:
        fake.add_pull(REPO, "feature/task-4-api", REX)
        fake.secondary_limit(retry_after=120)
        report = await rig.poller.poll_once()
        assert report.waiting_until == pytest.approx(clock.now + 120)
        clock.now += 60
        assert (await rig.poller.poll_once()).requests == 0
        clock.now += 61
        assert (await rig.poller.poll_once()).prs == 1

    async def test_secondary_limit_without_retry_after_backs_off_doubling(
            self, rig: Rig, fake: FakeGitHub, clock: Clock) -> None:
        """No Retry-After: at least a minute (github.secondary_backoff_s), doubling."""
        fake.add_pull(REPO, "feature/task-4-api", REX)
        fake.secondary_limit(times=2)
        first = await rig.poller.poll_once()
        assert first.waiting_until == pytest.approx(clock.now + 60)
        clock.now += 61
        second = await rig.poller.poll_once()
        assert second.waiting_until == pytest.approx(clock.now + 120)
        clock.now += 121
        assert (await rig.poller.poll_once()).prs == 1

    async def test_the_token_is_in_no_record_or_message(self, rig: Rig, fake: FakeGitHub,
                                                        tmp_path: Path) -> None:
        pr = fake.add_pull(REPO, "feature/task-4-api", REX)
        fake.add_review(pr["number"], CLEO, "APPROVED")
        pr.update(mergeable=False, mergeable_state="dirty")
        fake.exhaust(fake.clock() + 10)
        report = await rig.poller.poll_once()
        assert TOKEN not in repr(report) and TOKEN not in repr(rig.client)
        fake.reset_at = 0
        await rig.poller.poll_once()
        for path in (tmp_path / "state").rglob("*"):
            if path.is_file():
                assert TOKEN.encode() not in path.read_bytes(), path
