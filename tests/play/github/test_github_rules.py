"""The PR alerts as pure functions of a PR record: A1 hand-off order, A4 approval loop, A5
failure after approval."""

from __future__ import annotations

from typing import Any

from healer.config import load_settings
from healer.play.github import pulls
from healer.play.github.rules import Rules, judge

RULES = Rules.from_settings(load_settings(env={}).github)
REX, CLEO, CIPHER, TESS = ("5dlabs-rex[bot]", "5dlabs-cleo[bot]", "5dlabs-cipher[bot]",
                           "5dlabs-tess[bot]")


def pr(**over: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"repo": "5dlabs/cto", "number": 7, "state": "open", "merged": False,
                           "author": REX, "head_sha": "abc", "base_ref": "main",
                           "comments": [], "reviews": [], "checks": {}, "statuses": {},
                           "mergeable": True, "mergeable_state": "clean"}
    rec.update(over)
    return rec


def comments(*logins: str) -> list[dict[str, Any]]:
    return [{"id": i + 1, "login": login, "marker": "", "at": 100.0 + i}
            for i, login in enumerate(logins)]


def reviews(*states: str, login: str = CLEO) -> list[dict[str, Any]]:
    return [{"id": 50 + i, "login": login, "state": s, "at": 200.0 + i, "marker": ""}
            for i, s in enumerate(states)]


def codes(rec: dict[str, Any]) -> dict[str, Any]:
    return {f.code: f for f in judge(rec, RULES)}


class TestCommentOrder:
    def test_in_order_hand_off_is_quiet(self) -> None:
        """implementation → quality → security: nothing fires, rework back to an earlier
        stage neither."""
        assert codes(pr(comments=comments(REX, CLEO, CIPHER, REX, CLEO))) == {}

    def test_a_stage_jumping_ahead_fires_a1_naming_what_it_skipped(self) -> None:
        found = codes(pr(comments=comments(REX, TESS)))["A1"]
        assert found.agent == "tess" and found.severity == "warning"
        assert found.detail["skipped"] == ["quality", "security"]
        assert "tess (testing) handed off before quality, security" in found.summary

    def test_a1_clears_once_the_skipped_stages_spoke(self) -> None:
        assert codes(pr(comments=comments(REX, TESS, CLEO, CIPHER))) == {}

    def test_people_and_unknown_logins_take_no_part(self) -> None:
        assert codes(pr(comments=comments("octocat", REX, "someone[bot]", CLEO))) == {}

    def test_the_marker_names_the_agent_whoever_posted(self) -> None:
        """A comment posted by a shared account carries ``<!-- healer-agent: NAME -->``."""
        body = "Security review done.\n<!-- healer-agent: cipher -->"
        marked = pulls.comment({"id": 9, "user": {"login": "ci-bot"}, "body": body,
                                "created_at": "2026-12-01T10:00:00Z"})
        assert marked["marker"] == "cipher"
        found = codes(pr(comments=[*comments(REX), marked]))["A1"]
        assert found.agent == "cipher" and found.detail["skipped"] == ["quality"]

    def test_order_is_configurable(self) -> None:
        rules = Rules(("implementation", "testing"), {"rex": "implementation",
                                                      "tess": "testing"},
                      {REX.lower(): "rex", TESS.lower(): "tess"})
        assert judge(pr(comments=comments(REX, TESS)), rules) == []


class TestApprovalLoop:
    def test_two_turns_fire_a4_about_the_author(self) -> None:
        found = codes(pr(reviews=reviews("APPROVED", "CHANGES_REQUESTED", "APPROVED",
                                         "CHANGES_REQUESTED")))["A4"]
        assert found.agent == "rex" and found.detail["turns"] == 2

    def test_one_turn_is_not_a_loop(self) -> None:
        assert "A4" not in codes(pr(reviews=reviews("APPROVED", "CHANGES_REQUESTED",
                                                    "COMMENTED")))

    def test_approved_again_clears_it(self) -> None:
        assert "A4" not in codes(pr(reviews=reviews(
            "APPROVED", "CHANGES_REQUESTED", "APPROVED", "CHANGES_REQUESTED", "APPROVED")))

    def test_threshold_is_configurable(self) -> None:
        rules = Rules(RULES.handoff_order, RULES.agent_stages, RULES.bot_logins, 1)
        found = judge(pr(reviews=reviews("APPROVED", "CHANGES_REQUESTED")), rules)
        assert [f.code for f in found] == ["A4"]

    def test_webhook_review_states_are_lower_case(self) -> None:
        """The webhook says ``approved``; REST says ``APPROVED``: one shape in the record."""
        r = pulls.review({"id": 1, "user": {"login": CLEO}, "state": "changes_requested",
                          "submitted_at": "2026-12-01T10:00:00Z", "body": None})
        assert r["state"] == "CHANGES_REQUESTED"


class TestFailureAfterApproval:
    def test_failing_check_on_an_approved_pr_fires_a5(self) -> None:
        found = codes(pr(reviews=reviews("APPROVED"), checks={
            "build": {"status": "completed", "conclusion": "failure", "url": "u"}}))["A5"]
        assert found.severity == "critical" and found.issue_type == "build_failure"
        assert found.agent == "rex" and found.detail["failing"][0]["name"] == "build"

    def test_failing_tests_are_a_test_failure(self) -> None:
        found = codes(pr(reviews=reviews("APPROVED"), statuses={
            "ci/unit-tests": {"state": "error", "url": ""}}))["A5"]
        assert found.issue_type == "test_failure"

    def test_merge_conflict_fires_a5(self) -> None:
        found = codes(pr(reviews=reviews("APPROVED"), mergeable=False,
                         mergeable_state="dirty"))["A5"]
        assert found.detail["conflict"] and "merge conflict with main" in found.summary

    def test_without_approval_a_red_check_is_not_a5(self) -> None:
        assert codes(pr(checks={"build": {"status": "completed", "conclusion": "failure"}})) \
            == {}

    def test_a_withdrawn_approval_does_not_count(self) -> None:
        red = {"build": {"status": "completed", "conclusion": "failure"}}
        assert codes(pr(reviews=reviews("APPROVED", "DISMISSED"), checks=red)) == {}
        assert codes(pr(reviews=reviews("APPROVED", "CHANGES_REQUESTED"), checks=red)) == {}

    def test_running_cancelled_and_green_checks_are_not_failures(self) -> None:
        assert codes(pr(reviews=reviews("APPROVED"), checks={
            "a": {"status": "in_progress", "conclusion": ""},
            "b": {"status": "completed", "conclusion": "cancelled"},
            "c": {"status": "completed", "conclusion": "success"}},
            statuses={"d": {"state": "pending"}})) == {}

    def test_merged_or_closed_prs_fire_nothing(self) -> None:
        red = {"build": {"status": "completed", "conclusion": "failure"}}
        assert codes(pr(reviews=reviews("APPROVED"), checks=red, merged=True)) == {}
        assert codes(pr(reviews=reviews("APPROVED"), checks=red, state="closed")) == {}


class TestRecord:
    def test_items_are_bounded_and_deletions_seen_on_a_complete_page(self) -> None:
        old = [{"id": i, "at": float(i)} for i in range(5)]
        assert [i["id"] for i in pulls.merge_items(old, [{"id": 9, "at": 9.0}], "id", 3)] \
            == [3, 4, 9]
        assert pulls.merge_items(old, [{"id": 1, "at": 1.0}], "id", 10, complete=True) == [
            {"id": 1, "at": 1.0}]

    def test_a_new_head_forgets_the_old_checks(self) -> None:
        rec = pr(checks={"build": {}}, statuses={"ci": {}}, etags={"check-runs": "x",
                                                                    "pull": "y"})
        pulls.set_head(rec, "../../etc/passwd")  # not a commit id: nothing changes
        assert rec["checks"] == {"build": {}} and rec["head_sha"] == "abc"
        pulls.set_head(rec, "d" * 40)
        assert rec["checks"] == {} and rec["statuses"] == {} and rec["etags"] == {"pull": "y"}

    def test_pr_keys_refuse_unsafe_names(self) -> None:
        import pytest

        from healer.errors import UnsafeNameError

        assert pulls.pr_key("5dlabs/cto", 7) == "5dlabs.cto.7"
        for bad in ("../etc/passwd", "a/b/c", "a/..", "-x/y", "a b/c"):
            with pytest.raises(UnsafeNameError):
                pulls.pr_key(bad, 1)
