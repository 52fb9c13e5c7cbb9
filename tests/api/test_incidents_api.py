"""Incidents of every kind through the public surfaces: HTTP, `healer status`, /metrics.

A report made where no model is reachable used to leave no trace at all; now it is an
incident, visible with the gate's reason, counted in /metrics by whichever process took it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env
from healer.testing.wait import wait_for

REPORT = {"error_type": "KeyError", "error_message": "'user_id'",
          "call_site": "src/app/users.py:load_user"}
TOKEN = "incidents-api-token-0123"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("incidents")
    # `command` with no command configured: nothing can run a healing agent here.
    return healer_env(root / "state", root / "results", root / "fleet",
                      HEALER_EXECUTOR="command", HEALER__CONTEXT__ENABLED="false",
                      HEALER_TOKEN=TOKEN)


@pytest.fixture(scope="module")
def server(env: dict[str, str]) -> Iterator[ServeProcess]:
    s = ServeProcess(env, token=TOKEN)  # reports are trusted: they reach the gate
    yield s
    s.close()


def healer(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "healer", *args], env=env, text=True,
                          capture_output=True, timeout=60)


def incidents(server: ServeProcess, **query: Any) -> dict[str, Any]:
    r = server.http.get("/api/v1/incidents", params=query)
    assert r.status_code == 200, r.text
    return r.json()


class TestNoModel:
    def test_a_refused_report_is_an_incident_with_the_reason(self, server: ServeProcess,
                                                              env: dict[str, str]) -> None:
        r = server.http.post("/api/v1/errors", json=REPORT)
        assert r.json()["reason"] == "no_model"
        again = server.http.post("/api/v1/errors", json={**REPORT, "context": "again"})
        assert again.json()["fingerprint"] == r.json()["fingerprint"]
        listed = incidents(server, kind="code")
        assert listed["total"] == 1
        inc = listed["incidents"][0]
        assert inc["status"] == "open" and inc["count"] == 2
        assert inc["gate"]["reason"] == "no_model" and inc["rejections"] == {"no_model": 2}
        assert inc["summary"] == "KeyError in src/app/users.py:load_user"

        one = server.http.get(f"/api/v1/incidents/{inc['id']}")
        assert one.status_code == 200
        events = [e["event"] for e in one.json()["audit"]]
        assert events == ["opened", "gate"]  # the repeat is counted, not logged again

        # Another process: the server writes its counters and counted repeats within a
        # second (healer.core.incidents, healer.core.repeats), so the CLI sees them by then.
        line = f"{inc['id']} [open] KeyError in src/app/users.py:load_user (×2"

        def current() -> subprocess.CompletedProcess[str] | None:
            out = healer(env, "status")
            assert out.returncode == 0, out.stderr
            ok = "incidents: code 1 open" in out.stdout and line in out.stdout
            return out if ok else None

        status = wait_for(current, timeout=10)
        assert "No model available" in status.stdout

    def test_metrics_count_reports_made_by_another_process(self, server: ServeProcess,
                                                           env: dict[str, str]) -> None:
        """`healer report` is its own process; the server's /metrics still counts it."""
        before = _reports(server)
        out = healer(env, "report", "--type", "ValueError", "--message", "bad literal",
                     "--call-site", "src/app/parse.py:parse")
        assert out.returncode == 1, out.stderr  # refused by a gate: no model
        assert _reports(server) == before + 1
        body = server.http.get("/metrics").text
        assert 'healer_incidents_by_status{kind="code",status="open"}' in body
        assert 'healer_gate_decisions_total{kind="code",reason="no_model"}' in body


def _reports(server: ServeProcess) -> float:
    for line in server.http.get("/metrics").text.splitlines():
        if line.startswith('healer_error_reports_total{decision="no_model"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class TestListing:
    @pytest.mark.parametrize("query", [{"kind": ""}, {"kind": "nope"}, {"status": "gone"},
                                       {"limit": "0"}, {"limit": "x"}, {"offset": "-1"}])
    def test_bad_queries_are_400_with_a_reason(self, server: ServeProcess,
                                               query: dict[str, str]) -> None:
        r = server.http.get("/api/v1/incidents", params=query)
        assert r.status_code == 400 and r.json()["error"]

    def test_unknown_and_unsafe_ids(self, server: ServeProcess) -> None:
        assert server.http.get("/api/v1/incidents/code-nothing").status_code == 404
        assert server.http.get("/api/v1/incidents/a%0Ab").status_code == 400

    def test_play_issues_are_incidents_too(self, server: ServeProcess, tmp_path: Path) -> None:
        """A play's missing tool is a play incident in the same list."""
        start = {"play_id": "play-42", "repository": "5dlabs/cto",
                 "cto_config": {"agents": {"rex": {"tools": {"remote": ["brave_search"]}}}}}
        assert server.http.post("/api/v1/session/start", json=start).status_code == 200
        r = server.http.post("/api/v1/session/play-42/inventory",
                             json={"agent": "rex", "tools": []})
        assert r.status_code == 200, r.text
        found = server.wait_for(lambda: incidents(server, kind="play")["incidents"])
        assert found[0]["kind"] == "play" and "play-42" in found[0]["summary"]
        assert "play" in {i["kind"] for i in incidents(server, limit=50)["incidents"]}


def test_the_list_is_json_paged(server: ServeProcess) -> None:
    page = incidents(server, limit=1)
    assert page["count"] == 1 and page["limit"] == 1
    assert page["next_offset"] == (1 if page["total"] > 1 else None)
    json.dumps(page)  # plain JSON all the way down


def test_serve_runs_the_loop_behind_its_api(server: ServeProcess, env: dict[str, str]) -> None:
    """`healer serve` is the whole pipeline (the loop with the API on), not the API alone."""
    out = healer(env, "status", "--json")
    loop = json.loads(out.stdout)["overview"]["loop"]
    assert loop["state"] == "running" and loop["api"] == server.url
    started = healer(env, "loop", "--once")
    assert started.returncode == 2 and "another healer loop is running" in started.stderr
