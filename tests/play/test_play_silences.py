"""A person's silence on play remediation, through a real `healer serve`.

Two plays lose a tool of their agent. A silence of ``play=play-task-4-abc`` (made over the
API) keeps that play's issue recorded and counted, its incident ``silenced_by``, and starts
no agent (neither the evaluation nor the remediation); the other play is remediated as
always. The agent is a real command that records each run.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_play_api import start_body
from test_play_containment import command_agent, git_repo, runs

from healer.testing.api import ServeProcess

pytestmark = pytest.mark.e2e
TOKEN = "play-silences-token-0123456789"
SILENT, OTHER = "play-task-4-abc", "play-task-5-xyz"


def lose_a_tool(s: ServeProcess, play_id: str) -> None:
    """A critical tool mismatch: rex reports an inventory without brave_search."""
    r = s.http.post("/api/v1/session/start", json=start_body(play_id))
    assert r.status_code == 200, r.text
    r = s.http.post(f"/api/v1/session/{play_id}/inventory", json={
        "agent": "rex", "tools": ["github_create_pull_request", "read_file", "write_file"]})
    assert r.status_code == 200, r.text


def play_incident(s: ServeProcess, play_id: str) -> dict[str, Any] | None:
    found = s.http.get("/api/v1/incidents", params={"kind": "play", "limit": 50}).json()
    return next((i for i in found["incidents"] if i["summary"].startswith(play_id)), None)


def test_a_silenced_play_starts_no_agent_and_another_play_is_remediated(dirs: Any) -> None:
    env, log = command_agent(dirs)
    s = ServeProcess({**dirs.env, "HEALER__PLAY__REEVALUATE_AFTER_S": "0.05",
                      "HEALER_TOKEN": TOKEN, **env}, token=TOKEN,
                     cwd=git_repo(dirs.root / "checkout"))
    try:
        r = s.http.post("/api/v1/silences", json={
            "matchers": [f"play={SILENT}", "kind=play"], "duration": "1h", "by": "ops",
            "comment": "migrating the tools server"})
        assert r.status_code == 201, r.text
        sid = r.json()["silence"]["id"]
        lose_a_tool(s, SILENT)
        inc = s.wait_for(lambda: (i := play_incident(s, SILENT)) and
                         i.get("silenced_by") and i, timeout=30)
        assert (inc["status"], inc["silenced_by"], inc["gate"]["reason"]) == \
            ("open", sid, "silenced")
        assert inc["attempts"] == 0

        lose_a_tool(s, OTHER)
        s.wait_for(lambda: s.http.get(f"/api/v1/session/{OTHER}").json()["session"][
            "issues"][0].get("resolved"), timeout=60)
        assert [run["agent"] for run in runs(log)] == ["evaluation-agent", "remediation-agent"]
        assert "silenced_by" not in (play_incident(s, OTHER) or {"silenced_by": "missing"})
        issue = s.http.get(f"/api/v1/session/{SILENT}").json()["session"]["issues"][0]
        assert not issue.get("remediation_spawned") and not issue.get("resolved")
        assert play_incident(s, SILENT)["silenced_by"] == sid  # type: ignore[index]
    finally:
        s.close()
