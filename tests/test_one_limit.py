"""executor.max_concurrent bounds every agent run of every kind together, across processes.

A real `healer loop` (with its API) gets four incidents of each kind at once: four plays whose
agents lack a tool (play remediation), four `report_error` calls (code heals, each in its own
worker process) and four fleet peers that do not answer (fleet repair). Every agent is one
command that records how many agents run at that moment. With `max_concurrent: 2` no more than
two ever run, and every kind gets its turn.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from healer.demo.ports import free_port
from healer.testing.loop import LoopProcess, healer_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Each agent marks itself running, records how many are, stays a moment, and reports.
AGENT = r"""
import json, os, sys, time
from pathlib import Path
probe = Path(sys.argv[1]); result = sys.argv[2]
me = probe / "running" / os.environ["HEALER_RUN_ID"]
me.parent.mkdir(parents=True, exist_ok=True)
me.touch()
now = len(list(me.parent.iterdir()))
with open(probe / "log", "a") as fh:
    fh.write(json.dumps({"kind": os.environ["HEALER_KIND"], "target": os.environ["HEALER_TARGET"],
                         "running": now}) + "\n")
time.sleep(0.6)
me.unlink()
with open(result, "w") as fh:
    json.dump({"schema_version": 1, "kind": os.environ["HEALER_KIND"],
               "target": os.environ["HEALER_TARGET"], "run_id": os.environ["HEALER_RUN_ID"],
               "status": "failed", "summary": "the test agent only counts"}, fh)
"""


def runs(probe: Path) -> list[dict[str, object]]:
    try:
        return [json.loads(line) for line in (probe / "log").read_text().splitlines()]
    except OSError:
        return []


TOKEN = "one-limit-token-0123456789"


def test_three_kinds_four_incidents_each_never_more_than_two_agents(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    peers = {f"p{i}": {"host": f"127.0.0.{20 + i}", "port": free_port(), "user": "nobody",
                       "role": "worker"} for i in range(4)}
    fleet_config = tmp_path / "multifleet.json"
    fleet_config.write_text(json.dumps({"chief": {"nodeId": "testnode", "host": "127.0.0.1"},
                                        "nodes": {"testnode": {"host": "127.0.0.1",
                                                               "port": free_port(),
                                                               "role": "chief"}, **peers}}))
    port = free_port()
    env = healer_env(
        tmp_path / "state", tmp_path / "results", tmp_path / "fleet",
        HEALER_FLEET_CONFIG=str(fleet_config), HEALER__API__ENABLED="true",
        HEALER_FLEET_SECRET="one-limit-test-fleet-secret",
        HEALER_PORT=str(port), HEALER_EXECUTOR="command", HEALER_TOKEN=TOKEN,
        HEALER__EXECUTOR__COMMANDS=json.dumps(
            {"*": [sys.executable, str(script), str(probe), "{result_file}"]}),
        HEALER__EXECUTOR__MAX_CONCURRENT="2",
        # Every agent counts itself in one shared folder: the one its sandbox may write to.
        HEALER__AGENTS__SANDBOX_WRITE_PATHS=json.dumps([str(probe)]),
        HEALER__SELFHEAL__MAX_CONCURRENT="4",
        HEALER__PLAY__REEVALUATE_AFTER_S="0.1", HEALER__PLAY__MAX_ITERATIONS="1",
        HEALER__FLEET__HEAL_INTERVAL_S="1", HEALER__FLEET__WATCHDOG_START_S="600",
        HEALER__FLEET__MAX_HEAL_ATTEMPTS="1", HEALER__FLEET__HEAL_WAIT_S="1",
        HEALER__FLEET__AGENT_TIMEOUT_S="30")
    repo = tmp_path / "repo"  # code heals work in worktrees of a real repository
    (repo / "src" / "app").mkdir(parents=True)
    (repo / "src" / "app" / "mod0.py").write_text("def handler():\n    return {}\n")
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "x"]):
        subprocess.run(["git", *argv], cwd=repo, check=True)
    with LoopProcess(env, cwd=repo) as loop:
        # With the token the reports are trusted: they start agents without a person.
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                           headers={"Authorization": f"Bearer {TOKEN}"})
        for i in range(4):
            play = f"play-limit-{i}"
            r = api.post("/api/v1/session/start", json={
                "play_id": play, "repository": "5dlabs/cto",
                "cto_config": {"agents": {"rex": {"tools": {"remote": ["brave_search"]}}}}})
            assert r.status_code == 200, r.text
            r = api.post(f"/api/v1/session/{play}/logs", json={"agent": "rex", "lines": [
                "ERROR Tool inventory MISMATCH for rex: missing: brave_search"]})
            assert r.status_code == 200, r.text
            r = api.post("/api/v1/errors", json={
                "error_type": "KeyError", "error_message": f"'field_{i}'",
                "call_site": f"src/app/mod{i}.py:handler"})
            assert r.status_code in (200, 202), r.text

        def targets(kinds: set[str]) -> set[object]:
            return {r["target"] for r in runs(probe) if r["kind"] in kinds}

        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            play_t = targets({"evaluation", "remediation"})
            code_t = targets({"healing"})
            fleet_t = {r["target"] for r in runs(probe) if str(r["target"]).startswith("p")
                       and r["kind"] not in ("evaluation", "remediation", "healing")}
            if len(play_t) >= 4 and len(code_t) >= 4 and len(fleet_t) >= 4:
                break
            time.sleep(0.2)
        seen = runs(probe)
        loop.stop()
    kinds = sorted({str(r["kind"]) for r in seen})
    assert len(play_t) >= 4 and len(code_t) >= 4 and len(fleet_t) >= 4, (kinds, loop.log()[-3000:])
    assert max(int(r["running"]) for r in seen) <= 2, seen  # type: ignore[call-overload]
    assert any(int(r["running"]) == 2 for r in seen)  # type: ignore[call-overload]
