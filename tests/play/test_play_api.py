"""The play healer through real HTTP: the seed's endpoints, pre-flight, remediation, escalation."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from healer.core import seeds
from healer.testing.receivers import WebhookReceiver

pytestmark = pytest.mark.e2e


def start_body(play_id: str = "play-task-4-abc", **over: Any) -> dict[str, Any]:
    body = {
        "play_id": play_id,
        "repository": "5dlabs/cto",
        "service": "cto",
        "namespace": "cto",
        "cto_config": {"agents": {
            "rex": {"cli": "claude", "model": "opus", "tools": {
                "remote": ["brave_search", "github_create_pull_request"],
                "localServers": {"filesystem": {"enabled": True,
                                                "tools": ["read_file", "write_file"]}}}},
            "cleo": {"tools": {"remote": ["github_get_issue"]}},
        }},
        "tasks": [{"id": 1, "title": "Implement API", "agent_hint": "rex", "dependencies": [],
                   "priority": 1}],
    }
    body.update(over)
    return body


class TestSeedEndpoints:
    def test_health(self, serve) -> None:  # type: ignore[no-untyped-def]
        """GET /health answers the original shape."""
        s = serve()
        r = s.http.get("/health")
        assert r.status_code == 200
        body = r.json()
        assert body["status"] == "healthy" and body["service"] == "healer" and body["version"]

    def test_session_lifecycle(self, serve) -> None:  # type: ignore[no-untyped-def]
        """start → get → lists → 409 on a second start → finish → gone from active."""
        s = serve()
        r = s.http.post("/api/v1/session/start", json=start_body())
        assert r.status_code == 200
        assert r.json()["status"] == "ok" and r.json()["session_id"] == "play-task-4-abc"
        assert "message" in r.json()

        assert s.http.post("/api/v1/session/start", json=start_body()).status_code == 409

        session = s.http.get("/api/v1/session/play-task-4-abc").json()["session"]
        assert session["status"] == "active"
        assert session["expected_tools"]["rex"]["all"] == [
            "brave_search", "github_create_pull_request", "read_file", "write_file"]
        assert session["issues"] == [] and session["started_at"] and session["last_updated"]

        for path in ("/api/v1/sessions", "/api/v1/sessions/active"):
            listed = s.http.get(path).json()
            assert listed["status"] == "ok" and listed["count"] == 1
            assert listed["sessions"] == [{
                "play_id": "play-task-4-abc", "repository": "5dlabs/cto", "status": "active",
                "task_count": 1, "issue_count": 0, "started_at": session["started_at"]}]

        r = s.http.post("/api/v1/session/play-task-4-abc/finish",
                        json={"status": "completed"})
        assert r.status_code == 200 and r.json()["session"]["status"] == "completed"
        assert s.http.get("/api/v1/sessions/active").json()["count"] == 0
        assert s.http.get("/api/v1/sessions").json()["count"] == 1
        # A finished play may start again.
        assert s.http.post("/api/v1/session/start", json=start_body()).status_code == 200

    def test_unknown_play(self, serve) -> None:  # type: ignore[no-untyped-def]
        s = serve()
        assert s.http.get("/api/v1/session/nope").status_code == 404
        assert s.http.post("/api/v1/session/nope/finish").status_code == 404


class TestBadInput:
    @pytest.mark.parametrize(
        ("body", "fragment"),
        [
            (start_body(play_id="../../etc/passwd"), "play_id"),
            (start_body(play_id="a b"), "play_id"),
            (start_body(play_id=""), "play_id"),
            ({"play_id": "p1"}, "repository"),
            (start_body(tasks="all of them"), "tasks"),
            (start_body(cto_config={"agents": {"rex": {"tools": {"remote": "brave"}}}}),
             "remote"),
            (start_body(cto_config={"agents": {"../x": {}}}), "agents"),
            ([1, 2, 3], "expected object"),
        ],
    )
    def test_invalid_bodies(self, serve, body: Any, fragment: str) -> None:  # type: ignore[no-untyped-def]
        """Bodies that fail the schema get 400 with the reason and change nothing."""
        s = serve()
        r = s.http.post("/api/v1/session/start", json=body)
        assert r.status_code == 400, r.text
        assert r.json()["status"] == "error" and fragment in r.json()["error"]
        assert s.http.get("/api/v1/sessions").json()["count"] == 0

    def test_not_json(self, serve) -> None:  # type: ignore[no-untyped-def]
        s = serve()
        r = s.http.post("/api/v1/session/start", content=b"{not json",
                        headers={"content-type": "application/json"})
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
        r = s.http.post("/api/v1/session/start", content=b"x=1",
                        headers={"content-type": "application/x-www-form-urlencoded"})
        assert r.status_code == 415

    def test_huge_body(self, serve) -> None:  # type: ignore[no-untyped-def]
        """A body over the limit is refused with 413 before it is parsed."""
        s = serve(HEALER__API__MAX_BODY_BYTES="4096")
        r = s.http.post("/api/v1/session/start",
                        json=start_body(repository="x" * 10_000))
        assert r.status_code == 413 and "larger than 4096" in r.json()["error"]

    def test_traversal_in_path(self, serve) -> None:  # type: ignore[no-untyped-def]
        s = serve()
        for pid in ("..", "...x", "a%00b", "%2e%2e"):
            r = s.http.get(f"/api/v1/session/{pid}")
            assert r.status_code in (400, 404), (pid, r.status_code)
            assert r.status_code != 500

    def test_bad_query(self, serve) -> None:  # type: ignore[no-untyped-def]
        s = serve()
        assert s.http.get("/api/v1/sessions?limit=abc").status_code == 400
        assert s.http.get("/api/v1/sessions?status=weird").status_code == 400


class TestAuth:
    def test_token_on_every_route(self, serve) -> None:  # type: ignore[no-untyped-def]
        """With a token set, POSTs and reads need it; /health stays open for probes."""
        s = serve(HEALER_TOKEN="s3cret-token")
        assert s.http.post("/api/v1/session/start", json=start_body()).status_code == 401
        r = s.http.post("/api/v1/session/start", json=start_body(),
                        headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        r = s.http.post("/api/v1/session/start", json=start_body(),
                        headers={"Authorization": "Bearer s3cret-token"})
        assert r.status_code == 200
        assert s.http.get("/api/v1/sessions/active").status_code == 401
        assert s.http.get("/api/v1/sessions/active", headers={
            "Authorization": "BEARER s3cret-token"}).status_code == 200
        assert s.http.get("/health").status_code == 200


class TestPreflight:
    def test_mismatch_in_logs_within_window(self, serve) -> None:  # type: ignore[no-untyped-def]
        """A 'Tool inventory MISMATCH … missing: brave_search' line within 60 s of the agent's
        start records a tool_mismatch issue naming brave_search and starts a remediation."""
        s = serve()
        s.http.post("/api/v1/session/start", json=start_body())
        r = s.http.post("/api/v1/session/play-task-4-abc/logs", json={"agent": "rex", "lines": [
            "2026-11-29T10:00:00Z INFO rex starting, loading cto-config",
            "2026-11-29T10:00:12Z ERROR Tool inventory MISMATCH for rex: missing: brave_search",
        ]})
        assert r.status_code == 200
        issues = r.json()["issues"]
        assert [i["issue_type"] for i in issues] == ["tool_mismatch"]
        assert issues[0]["missing_tools"] == ["brave_search"]
        assert "brave_search" in issues[0]["description"]
        session = s.wait_for(lambda: (d := s.http.get(
            "/api/v1/session/play-task-4-abc").json()["session"])["issues"][0].get(
            "remediation_spawned") and d)
        assert session["issues"][0]["remediation"] == "play-task-4-abc.rex.tool_mismatch"
        assert session["agents"]["rex"]["checklist"]["remote_tools_accessible"]["ok"] is False

    def test_mismatch_after_window_not_preflight(self, serve) -> None:  # type: ignore[no-untyped-def]
        """The same line two minutes after the agent started is not a pre-flight failure."""
        s = serve()
        s.http.post("/api/v1/session/start", json=start_body())
        r = s.http.post("/api/v1/session/play-task-4-abc/logs", json={"agent": "rex", "lines": [
            "2026-11-29T10:00:00Z INFO rex starting",
            "2026-11-29T10:02:00Z ERROR Tool inventory MISMATCH for rex: missing: brave_search",
        ]})
        assert r.status_code == 200
        assert r.json()["issues"] == []
        assert not [a for a in r.json()["alerts"] if a["code"] == "A10"]

    def test_each_agent_has_its_own_window(self, serve) -> None:  # type: ignore[no-untyped-def]
        """cleo starts ten minutes after rex: cleo's failure in its first minute is a
        pre-flight failure, rex's at the same moment is not."""
        s = serve()
        s.http.post("/api/v1/session/start", json=start_body())
        post = s.http.post
        assert post("/api/v1/session/play-task-4-abc/logs", json={"agent": "rex", "lines": [
            "2026-11-29T10:00:00Z INFO rex starting"]}).json()["issues"] == []
        r = post("/api/v1/session/play-task-4-abc/logs", json={"agent": "cleo", "lines": [
            "2026-11-29T10:10:00Z INFO cleo starting",
            "2026-11-29T10:10:20Z ERROR Tool inventory MISMATCH for cleo: missing: x"]})
        assert [(i["agent"], i["issue_type"]) for i in r.json()["issues"]] == [
            ("cleo", "tool_mismatch")]
        r = post("/api/v1/session/play-task-4-abc/logs", json={"agent": "rex", "lines": [
            "2026-11-29T10:10:20Z ERROR Tool inventory MISMATCH for rex: missing: y"]})
        assert r.json()["issues"] == []

    def test_inventory_names_missing_tools(self, serve) -> None:  # type: ignore[no-untyped-def]
        """An agent's own inventory report is compared with its declared tools, exactly."""
        s = serve()
        s.http.post("/api/v1/session/start", json=start_body())
        r = s.http.post("/api/v1/session/play-task-4-abc/inventory", json={
            "agent": "rex", "tools": ["github_create_pull_request", "read_file"],
            "servers": {"filesystem": "ready"}, "cto_config_loaded": True})
        body = r.json()
        assert r.status_code == 200
        assert body["missing_tools"] == ["brave_search", "write_file"]
        assert set(body["failed"]) == {"remote_tools_accessible", "local_servers_initialized"}
        assert body["checklist"]["cto_config_loaded"]["ok"] is True
        assert [i["issue_type"] for i in body["issues"]] == ["tool_mismatch"]

    def test_complete_inventory_passes(self, serve) -> None:  # type: ignore[no-untyped-def]
        s = serve()
        s.http.post("/api/v1/session/start", json=start_body())
        r = s.http.post("/api/v1/session/play-task-4-abc/inventory", json={
            "agent": "cleo", "tools": ["github_get_issue"]})
        assert r.json()["failed"] == [] and r.json()["issues"] == []

    def test_undeclared_agent(self, serve) -> None:  # type: ignore[no-untyped-def]
        s = serve()
        s.http.post("/api/v1/session/start", json=start_body())
        r = s.http.post("/api/v1/session/play-task-4-abc/inventory",
                        json={"agent": "ghost", "tools": []})
        assert r.json()["failed"] == ["agent_type_identified"]
        assert r.json()["issues"][0]["issue_type"] == "pre_flight_failure"


class TestEscalation:
    def test_three_failed_remediations_escalate(self, serve, dirs) -> None:  # type: ignore[no-untyped-def]
        """Three failed remediations → a human seed file, a Discord post and a forge issue."""
        fail = dirs.root / "fail.py"
        fail.write_text("import sys; print('cannot reach the cluster', file=sys.stderr); "
                        "sys.exit(1)\n")
        actions = json.dumps({"fix_config": [sys.executable, str(fail), "{play_id}", "{agent}"]})
        with WebhookReceiver() as discord:
            s = serve(HEALER_DISCORD_WEBHOOK=f"{discord.url}/api/webhooks/1/abc",
                      HEALER__PLAY__ACTIONS=actions)
            s.http.post("/api/v1/session/start", json=start_body())
            s.http.post("/api/v1/session/play-task-4-abc/inventory",
                        json={"agent": "rex", "tools": ["github_create_pull_request",
                                                        "read_file", "write_file"]})
            human = dirs.fleet / "human"
            files = s.wait_for(lambda: list(human.glob("*.md")) if human.exists() else [])
            s.wait_for(lambda: discord.posts)
        seed = seeds.read(files[0])
        assert seed.type == "escalation" and seed.severity == "critical"
        assert "brave_search" in seed.body
        assert seed.body.count("→ **failed**") == 3
        assert "cannot reach the cluster" in seed.body
        assert "What you should do next" in seed.body
        post = discord.posts[0]
        assert post["path"] == "/api/webhooks/1/abc"
        # The notify layer titles it by incident: kind, play and problem.
        assert "[play] play-task-4-abc" in post["body"]["content"]
        assert "brave_search" in post["body"]["content"]
        issues = list((dirs.state / "forge" / "issues").glob("*.md"))
        assert len(issues) == 1
        text = issues[0].read_text()
        assert "## Evaluation" in text and 'labels: ["heal", "A10"]' in text
        session = s.http.get("/api/v1/session/play-task-4-abc").json()["session"]
        assert session["issues"][0]["escalated"] is True

    def test_heal_again_from_the_dashboard_remediates_anew(self, serve, dirs) -> None:  # type: ignore[no-untyped-def]
        """An escalated play issue a person hands back ("heal again" on the dashboard) is
        remediated again by the play evaluation; this time the fix works and it resolves."""
        runs = dirs.root / "runs.txt"
        fix = dirs.root / "fix.py"
        # Fails until a person has looked (the escalation's three runs), then works.
        fix.write_text(f"import sys; p = {str(runs)!r}; open(p, 'a').write('x'); "
                       "n = len(open(p).read()); sys.exit(1 if n <= 3 else 0)\n")
        actions = json.dumps({"fix_config": [sys.executable, str(fix), "{play_id}"]})
        token = "play-heal-again-token-0123456789"
        s = serve(HEALER__PLAY__ACTIONS=actions, HEALER__API__TOKEN=token,
                  HEALER__PLAY__EVALUATE_INTERVAL_S="0.2")
        auth = {"authorization": f"Bearer {token}"}
        s.http.post("/api/v1/session/start", json=start_body(), headers=auth)
        s.http.post("/api/v1/session/play-task-4-abc/inventory", headers=auth,
                    json={"agent": "rex", "tools": ["github_create_pull_request",
                                                    "read_file", "write_file"]})
        human = dirs.fleet / "human"
        (seed,) = s.wait_for(lambda: list(human.glob("*.md")) if human.exists() else [])

        def issue() -> dict[str, Any]:
            return s.http.get("/api/v1/session/play-task-4-abc",
                              headers=auth).json()["session"]["issues"][0]

        s.wait_for(lambda: issue().get("escalated"))
        with httpx.Client(base_url=s.url, timeout=10) as person:
            r = person.post("/ui/login", data={"token": token, "next": "/ui/human"})
            assert r.status_code == 303, r.text
            csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', person.get("/ui/human").text)
            assert csrf
            r = person.post(f"/ui/human/{seed.name}/heal-again", data={"csrf": csrf.group(1)})
            assert r.status_code == 303, r.text
        assert (human / "archive" / seed.name).is_file()
        done = s.wait_for(lambda: (i := issue()).get("resolved") and i, timeout=60)
        assert not done.get("escalated") and runs.read_text() == "xxxx"
        iid = done["incident_id"]
        inc = s.http.get(f"/api/v1/incidents/{iid}", headers=auth).json()
        events = [e["event"] for e in inc["audit"]]
        assert inc["incident"]["status"] == "resolved"
        assert events.index("escalated") < events.index("attempt_started",
                                                        events.index("escalated"))

    def test_fixed_by_action(self, serve, dirs) -> None:  # type: ignore[no-untyped-def]
        """A remediation whose action succeeds, with no new evidence, resolves the issue."""
        marker = dirs.root / "ran.txt"
        script = dirs.root / "fix.py"
        script.write_text(f"import sys; open({str(marker)!r}, 'a').write(' '.join(sys.argv[1:]))\n")
        actions = json.dumps({"fix_config": [sys.executable, str(script), "{play_id}",
                                             "{missing_tools}"]})
        s = serve(HEALER__PLAY__ACTIONS=actions)
        s.http.post("/api/v1/session/start", json=start_body())
        s.http.post("/api/v1/session/play-task-4-abc/logs", json={"agent": "rex", "lines": [
            "2026-11-29T10:00:00Z Tool inventory MISMATCH: missing: brave_search"]})
        session = s.wait_for(lambda: (d := s.http.get(
            "/api/v1/session/play-task-4-abc").json()["session"])["issues"][0].get(
            "resolved") and d)
        assert marker.read_text() == "play-task-4-abc brave_search"
        assert not session["issues"][0].get("escalated")
        assert not (dirs.fleet / "human").exists()


class TestDescribed:
    def test_openapi_and_metrics(self, serve) -> None:  # type: ignore[no-untyped-def]
        """/openapi.json lists every route with its request schema; /metrics is Prometheus."""
        s = serve()
        doc = s.http.get("/openapi.json").json()
        assert doc["openapi"].startswith("3.1")
        for path in ("/health", "/api/v1/session/start", "/api/v1/session/{play_id}",
                     "/api/v1/sessions", "/api/v1/sessions/active",
                     "/api/v1/session/{play_id}/finish", "/metrics"):
            assert path in doc["paths"], path
        start = doc["paths"]["/api/v1/session/start"]["post"]
        schema = start["requestBody"]["content"]["application/json"]["schema"]
        assert "play_id" in schema["required"]
        s.http.post("/api/v1/session/start", json=start_body())
        metrics = s.http.get("/metrics").text
        assert "healer_sessions_active 1.0" in metrics
        assert "healer_sessions_started_total 1.0" in metrics


def test_state_files_are_json(dirs, serve) -> None:  # type: ignore[no-untyped-def]
    """Sessions are plain JSON records under the state dir (readable by people and tools)."""
    s = serve()
    s.http.post("/api/v1/session/start", json=start_body())
    rec = json.loads(Path(dirs.state / "records" / "sessions" / "play-task-4-abc.json")
                     .read_text())
    assert rec["revision"] == 1 and rec["data"]["play_id"] == "play-task-4-abc"


class TestInLoop:
    def test_loop_serves_api_and_detects_stuck(self, dirs) -> None:  # type: ignore[no-untyped-def]
        """`python -m healer.loop` serves the API; its periodic evaluation flags a silent
        agent as stuck."""
        import httpx

        from healer.testing.loop import LoopProcess

        env = {**dirs.env, "HEALER__API__ENABLED": "true", "HEALER_PORT": "0",
               "HEALER_EXECUTOR": "playbook", "HEALER__PLAY__STUCK_AFTER_S": "1",
               "HEALER__PLAY__EVALUATE_INTERVAL_S": "0.5",
               "HEALER__PLAY__REEVALUATE_AFTER_S": "0"}
        with LoopProcess(env) as loop:
            url = json.loads(loop.status_file.read_text())["api"]
            with httpx.Client(base_url=url, timeout=10) as http:
                assert http.get("/health").json()["status"] == "healthy"
                assert http.post("/api/v1/session/start", json=start_body()).status_code == 200
                http.post("/api/v1/session/play-task-4-abc/logs",
                          json={"agent": "cleo", "lines": ["INFO cleo starting"]})
                deadline = __import__("time").monotonic() + 30
                issues: list[dict[str, Any]] = []
                while __import__("time").monotonic() < deadline and not issues:
                    session = http.get("/api/v1/session/play-task-4-abc").json()["session"]
                    issues = [i for i in session["issues"] if i["issue_type"] == "stuck"]
                assert issues and issues[0]["agent"] == "cleo" and issues[0]["code"] == "A9"


class TestToolsServer:
    def test_unreachable_tools_server(self, serve) -> None:  # type: ignore[no-untyped-def]
        """A play whose tools-server does not answer gets an A12 mcp_init_failed issue."""
        from healer.testing.nats import free_port

        s = serve()
        dead = f"http://127.0.0.1:{free_port()}/health"
        s.http.post("/api/v1/session/start", json=start_body(tools_server=dead))
        session = s.wait_for(lambda: (d := s.http.get(
            "/api/v1/session/play-task-4-abc").json()["session"])["issues"] and d)
        issue = session["issues"][0]
        assert issue["issue_type"] == "mcp_init_failed" and issue["code"] == "A12"
        assert session["preflight"]["tools_server_reachable"]["ok"] is False

    def test_reachable_tools_server(self, serve) -> None:  # type: ignore[no-untyped-def]
        s = serve()
        s.http.post("/api/v1/session/start", json=start_body(play_id="p2",
                                                             tools_server=f"{s.url}/health"))
        session = s.wait_for(lambda: (d := s.http.get("/api/v1/session/p2").json()[
            "session"])["preflight"].get("tools_server_reachable") and d)
        assert session["preflight"]["tools_server_reachable"]["ok"] is True
        assert session["issues"] == []
