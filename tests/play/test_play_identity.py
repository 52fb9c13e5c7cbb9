"""A play issue has a stable identity: batches of the same error are one issue, ids never
repeat, and a restarted play keeps its earlier runs."""

from __future__ import annotations

from typing import Any

START = {"play_id": "play-ident-1", "repository": "5dlabs/cto",
         "cto_config": {"agents": {"rex": {"tools": {"remote": []}}}}}
LINE = "2026-11-29T10:05:00Z ERROR upstream: connection refused (10.0.0.9:5432)"


def logs(s: Any, *lines: str) -> dict[str, Any]:
    r = s.http.post("/api/v1/session/play-ident-1/logs", json={"agent": "rex",
                                                                "lines": list(lines)})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def session(s: Any) -> dict[str, Any]:
    return s.http.get("/api/v1/session/play-ident-1").json()["session"]  # type: ignore[no-any-return]


class TestIssueIdentity:
    def test_one_error_in_batches_of_one_and_two_lines_is_one_issue(self, serve: Any) -> None:
        """The description says how many lines; the identity does not depend on it."""
        s = serve()
        assert s.http.post("/api/v1/session/start", json=START).status_code == 200
        first = logs(s, LINE)["issues"]
        second = logs(s, LINE, LINE)["issues"]
        assert len(first) == len(second) == 1
        assert first[0]["id"] == second[0]["id"]
        issues = [i for i in session(s)["issues"] if i.get("code") == first[0]["code"]]
        assert len(issues) == 1
        assert issues[0]["count"] == 3  # every line counted
        assert issues[0]["detected_at"] <= issues[0]["last_seen"]
        assert "2 line(s)" in issues[0]["description"]  # the latest batch's words
        # The incident of every kind's list is the same one, counting the same lines.
        found = s.http.get("/api/v1/incidents", params={"kind": "play"}).json()["incidents"]
        [inc] = [i for i in found if i["key"].startswith("play-ident-1.rex")]
        assert inc["count"] == 3 and inc["first_seen"] <= inc["last_seen"]

    def test_ids_never_repeat_across_restarts(self, serve: Any) -> None:
        """A finished play started again is a new run: earlier runs and their issues stay
        readable, and the new run's issue ids go on counting."""
        s = serve()
        assert s.http.post("/api/v1/session/start", json=START).status_code == 200
        before = logs(s, LINE)["issues"][0]
        assert s.http.post("/api/v1/session/play-ident-1/finish",
                           json={"status": "failed"}).status_code == 200
        assert s.http.post("/api/v1/session/start", json=START).status_code == 200
        after = logs(s, LINE)["issues"][0]
        assert after["id"] != before["id"]
        data = session(s)
        assert data["status"] == "active" and data["restarts"] == 1
        (earlier,) = data["previous_runs"]
        assert earlier["status"] == "failed"
        assert [i["id"] for i in earlier["issues"]] == [before["id"]]
