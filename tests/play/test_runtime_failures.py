"""Play agents failing for reasons outside their code, end to end.

The failure texts are the real Claude Code CLI's: it runs against the scripted model server on
127.0.0.1 returning each error (``scripts/record_cli_failures.py``), and what it prints is what
the agent's logs carry to a real ``healer serve``. The actions are scripts that note each call,
so the tests see what healer did — and did not do.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from healer.core import gate, seeds
from healer.core.store import FileStore
from healer.testing import cli_recorder

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
PLAY = "play-task-7-rt"
AGENTS = [f"agent-{n:02d}" for n in range(20)]
CASES = ("rate_limit_429", "overloaded_529", "auth_401", "context_overflow_400",
         "resume_missing")


@pytest.fixture(scope="module")
def printed() -> dict[str, dict[str, Any]]:
    """What the real CLI printed (plain ``-p``) for each case, and the headers it was sent."""
    recorder = cli_recorder.recorder()
    path = recorder.bundled_cli()
    if path is None:
        pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")
    out = {}
    for name in CASES:
        run = recorder.record_mode(path, recorder.CASES[name], "text", 30.0)
        assert not run["timed_out"], name
        lines = [ln for ln in (run["stdout"] + "\n" + run["stderr"]).splitlines() if ln.strip()]
        assert lines, name
        out[name] = {"lines": lines, "headers": (run.get("http") or {}).get("headers") or {},
                     "session_id": run.get("session_id_arg")}
    return out


def _body(agents: list[str]) -> dict[str, Any]:
    return {"play_id": PLAY, "repository": "5dlabs/cto", "service": "cto", "namespace": "cto",
            "cto_config": {"agents": {a: {"cli": "claude", "tools": {"remote": []}}
                                      for a in agents}},
            "tasks": [{"id": 7, "title": "t", "agent_hint": agents[0], "dependencies": [],
                       "priority": 1}]}


def _noting(root: Path, name: str, *, fail: bool = False) -> tuple[list[str], Path]:
    """An action argv that appends ``<time> <args>`` to a file (and fails if asked)."""
    calls = root / f"{name}.calls"
    script = root / f"{name}.py"
    script.write_text(
        "import sys, time\n"
        f"open({str(calls)!r}, 'a').write(f'{{time.time()}} ' + ' '.join(sys.argv[1:]) + "
        "'\\n')\n" + ("sys.exit(1)\n" if fail else ""))
    return [sys.executable, str(script), "{play_id}", "{agent}", "{code}", "{session_id}"], calls


def _calls(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _escalations(dirs: Any) -> list[Path]:
    human = dirs.fleet / "human"
    return sorted(human.glob("*.md")) if human.exists() else []


def _incident(s: Any, code: str) -> dict[str, Any] | None:
    items = s.http.get("/api/v1/incidents", params={"kind": "play", "limit": 50}).json()
    items = items.get("incidents", items.get("items", []))
    return next((i for i in items if i.get("code") == code), None)


def _serve(serve: Any, **play: Any) -> Any:
    env = {f"HEALER__PLAY__{k.upper()}": (json.dumps(v) if isinstance(v, dict) else str(v))
           for k, v in play.items()}
    return serve(**env)


def _post(s: Any, agent: str, lines: list[str]) -> dict[str, Any]:
    r = s.http.post(f"/api/v1/session/{PLAY}/logs", json={"agent": agent, "lines": lines})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_rate_limit_waits_for_the_reset_the_api_gave_then_resumes_once(
        serve: Any, dirs: Any, printed: dict[str, Any]) -> None:
    resume, calls = _noting(dirs.root, "resume")
    s = _serve(serve, limit_wait_s=0.3, resume_stagger_s=0, actions={"resume": resume})
    s.http.post("/api/v1/session/start", json=_body(AGENTS[:1]))
    rec = printed["rate_limit_429"]
    # The CLI prints no headers; the agent's wrapper logs the ones the API sent (retry-after).
    assert rec["headers"].get("retry-after")
    lines = [*rec["lines"], "response headers: " + json.dumps(rec["headers"])]
    reported = time.time()
    runtime = _post(s, AGENTS[0], lines)["runtime"]
    assert runtime["action"] == "waiting" and runtime["code"] == "T1"

    incident = s.wait_for(lambda: _incident(s, "T1"))
    assert incident["held"][0]["agent"] == AGENTS[0] and incident.get("resume_at")
    try:
        done = s.wait_for(lambda: _calls(calls))
    except AssertionError:
        raise AssertionError(json.dumps([runtime, _incident(s, "T1")])
                             + s.log()[-6000:]) from None
    assert len(done) == 1 and done[0][1:4] == [PLAY, AGENTS[0], "T1"]
    # The API said retry-after N seconds: healer waited at least that long.
    assert float(done[0][0]) >= reported + float(rec["headers"]["retry-after"]) - 0.05

    _post(s, AGENTS[0], ["working on task 7", "wrote src/lib.rs"])
    s.wait_for(lambda: (i := _incident(s, "T1")) and i["status"] == "resolved" and i)
    assert len(_calls(calls)) == 1  # resumed once, not again
    assert _escalations(dirs) == []


def test_an_overload_wave_is_one_incident_with_staggered_resumes(
        serve: Any, dirs: Any, printed: dict[str, Any]) -> None:
    resume, calls = _noting(dirs.root, "resume")
    stagger = 0.05
    # The first round waits long enough for all four reports to land even on a loaded
    # machine: a 529 reported after the round resumed the others is the limit coming back.
    s = _serve(serve, limit_first_wait_s=2.0, limit_wait_s=0.5, resume_stagger_s=stagger,
               actions={"resume": resume})
    s.http.post("/api/v1/session/start", json=_body(AGENTS))
    for agent in AGENTS:  # every agent meets the same 529
        assert _post(s, agent, printed["overloaded_529"]["lines"])["runtime"]["action"] == \
            "waiting"
    done = s.wait_for(lambda: (c := _calls(calls)) and len(c) >= len(AGENTS) and c,
                      timeout=60)
    assert sorted(c[2] for c in done) == AGENTS  # each resumed exactly once
    times = [float(c[0]) for c in done]
    gaps = [(c[2], round(b - a, 3)) for c, (a, b) in
            zip(done[1:], itertools.pairwise(times), strict=True)]
    assert all(gap >= stagger * 0.9 for _, gap in gaps), [g for g in gaps if g[1] < stagger]

    items = s.http.get("/api/v1/incidents", params={"kind": "play", "limit": 50}).json()
    items = items.get("incidents", items.get("items", []))
    assert len(items) == 1  # one incident for the fleet's shared limit
    assert items[0]["count"] == len(AGENTS)
    assert _escalations(dirs) == []
    for agent in AGENTS:
        _post(s, agent, ["back at work"])
    s.wait_for(lambda: (i := _incident(s, "T2")) and i["status"] == "resolved" and i)
    assert len(_calls(calls)) == len(AGENTS)
    # Never a failed attempt: the gate's breaker learnt nothing from the wave.
    adm = FileStore(dirs.state).get(gate.ADMISSION, gate.GATE_KEY)
    assert adm is not None
    assert [o for o in adm.data["outcomes"] if o["kind"] == "play"] == []
    assert not [k for k in adm.data["active"] if k.startswith("play.limit.")]


def test_a_rejected_key_across_the_fleet_is_one_escalation_and_no_restart(
        serve: Any, dirs: Any, printed: dict[str, Any], cli: Any) -> None:
    resume, resumed = _noting(dirs.root, "resume")
    restart, restarted = _noting(dirs.root, "restart")
    s = _serve(serve, limit_first_wait_s=0.1, actions={"resume": resume, "restart": restart})
    s.http.post("/api/v1/session/start", json=_body(AGENTS))
    for agent in AGENTS:
        assert _post(s, agent, printed["auth_401"]["lines"])["runtime"]["action"] == "paused"
    files = s.wait_for(lambda: _escalations(dirs))
    seed = seeds.read(files[0])
    assert "[HEAL-X1]" in seed.body
    assert "Rotate the API key" in seed.body
    incident = _incident(s, "X1")
    assert incident is not None and incident["held_total"] == len(AGENTS)
    assert incident["status"] == "escalated"
    # Reported again: still one escalation, still nothing restarted.
    _post(s, AGENTS[0], printed["auth_401"]["lines"])
    assert len(_escalations(dirs)) == 1
    assert _calls(resumed) == [] and _calls(restarted) == []

    # healer status names the paused agents and why.
    out = cli("status").out
    assert f"agents held: 0 waiting, {len(AGENTS)} paused" in out
    assert f"{AGENTS[0]} in {PLAY}: paused (X1 API key or login rejected" in out


def test_a_waiting_agent_shows_when_it_resumes(serve: Any, dirs: Any,
                                               printed: dict[str, Any], cli: Any) -> None:
    resume, calls = _noting(dirs.root, "resume")
    s = _serve(serve, limit_first_wait_s=600, actions={"resume": resume})
    s.http.post("/api/v1/session/start", json=_body(AGENTS[:2]))
    waiting = _post(s, AGENTS[1], printed["overloaded_529"]["lines"])["runtime"]
    incident = _incident(s, "T2")
    assert incident is not None and incident["resume_at"] == waiting["resume_at"]
    assert incident["failure_class"] == "transient" and incident["status"] == "open"
    assert incident["doing"] == f"waiting for the reset: 1 agent(s) resume from " \
        f"{waiting['resume_at']}"  # not an attempt: nothing has failed
    out = cli("status").out
    assert "agents held: 1 waiting, 0 paused" in out
    assert (f"{AGENTS[1]} in {PLAY}: waiting (T2 model API overloaded, resumes "
            f"{waiting['resume_at']})") in out
    assert _calls(calls) == []


def test_a_context_overflow_starts_a_fresh_session(serve: Any, dirs: Any,
                                                   printed: dict[str, Any]) -> None:
    fresh, calls = _noting(dirs.root, "fresh")
    restart, restarted = _noting(dirs.root, "restart")
    s = _serve(serve, actions={"fresh_session": fresh, "restart": restart})
    s.http.post("/api/v1/session/start", json=_body(AGENTS[:1]))
    assert _post(s, AGENTS[0], printed["context_overflow_400"]["lines"])["runtime"][
        "action"] == "fresh_session"
    done = s.wait_for(lambda: _calls(calls))
    assert [c[1:4] for c in done] == [[PLAY, AGENTS[0], "C1"]]
    assert _calls(restarted) == [] and _escalations(dirs) == []


def test_a_missing_resume_is_never_replayed(serve: Any, dirs: Any,
                                            printed: dict[str, Any]) -> None:
    fresh, calls = _noting(dirs.root, "fresh")
    resume, resumed = _noting(dirs.root, "resume")
    s = _serve(serve, actions={"fresh_session": fresh, "resume": resume})
    s.http.post("/api/v1/session/start", json=_body(AGENTS[:1]))
    rec = printed["resume_missing"]
    assert _post(s, AGENTS[0], rec["lines"])["runtime"]["code"] == "S1"
    done = s.wait_for(lambda: _calls(calls))
    # The fresh start is told which session not to resume: the one the CLI could not find.
    assert done[0][1:5] == [PLAY, AGENTS[0], "S1", rec["session_id"]]
    assert _calls(resumed) == []


def test_without_a_fresh_session_action_a_person_is_told(serve: Any, dirs: Any,
                                                         printed: dict[str, Any]) -> None:
    restart, restarted = _noting(dirs.root, "restart")
    s = _serve(serve, actions={"restart": restart})
    s.http.post("/api/v1/session/start", json=_body(AGENTS[:1]))
    _post(s, AGENTS[0], printed["context_overflow_400"]["lines"])
    files = s.wait_for(lambda: _escalations(dirs))
    body = seeds.read(files[0]).body
    assert "play.actions.fresh_session" in body and "context window exceeded" in body
    _post(s, AGENTS[0], printed["context_overflow_400"]["lines"])  # again: still one
    assert len(_escalations(dirs)) == 1 and _calls(restarted) == []


def test_a_crash_loop_is_paused_and_escalated_once(serve: Any, dirs: Any,
                                                   printed: dict[str, Any], cli: Any) -> None:
    resume, calls = _noting(dirs.root, "resume", fail=True)
    s = _serve(serve, limit_first_wait_s=0.05, limit_wait_s=0.05, crash_loop_launches=3,
               crash_backoff_base_s=0.05, crash_backoff_cap_s=0.2,
               actions={"resume": resume})
    s.http.post("/api/v1/session/start", json=_body(AGENTS[:1]))
    _post(s, AGENTS[0], printed["overloaded_529"]["lines"])
    files = s.wait_for(lambda: _escalations(dirs))
    seed = seeds.read(files[0])
    assert "[HEAL-K1]" in seed.body and "3 launches in a row" in seed.body

    def waiter_gone() -> bool:
        adm = FileStore(dirs.state).get(gate.ADMISSION, gate.GATE_KEY)
        return adm is not None and not [k for k in adm.data["active"]
                                        if k.startswith("play.limit.")]

    s.wait_for(waiter_gone)
    assert len(_calls(calls)) == 3  # no launch after the pause
    assert len(_escalations(dirs)) == 1
    _post(s, AGENTS[0], printed["overloaded_529"]["lines"])  # it fails again: still paused
    assert _post(s, AGENTS[0], ["noise"])["runtime"] is None
    assert f"{AGENTS[0]} in {PLAY}: paused (K1 crash loop" in cli("status").out
    assert len(_calls(calls)) == 3 and len(_escalations(dirs)) == 1
    # A person restarts the play: nothing of the old run is held any more.
    assert s.http.post("/api/v1/session/start", json=_body(AGENTS[:1])).status_code == 409
    s.http.post(f"/api/v1/session/{PLAY}/finish", json={"status": "failed", "reason": "fixed"})
    assert "agents held" not in cli("status").out


def test_a_limit_is_shared_per_account(serve: Any, dirs: Any, printed: dict[str, Any]) -> None:
    s = _serve(serve, limit_first_wait_s=600)
    for n, account in enumerate(("team-a", "team-a", "team-b")):
        body = {**_body(AGENTS[:1]), "play_id": f"{PLAY}-{n}", "account": account}
        assert s.http.post("/api/v1/session/start", json=body).status_code in (200, 201)
        r = s.http.post(f"/api/v1/session/{PLAY}-{n}/logs",
                        json={"agent": AGENTS[0], "lines": printed["rate_limit_429"]["lines"]})
        assert r.json()["runtime"]["action"] == "waiting"
    items = s.http.get("/api/v1/incidents", params={"kind": "play"}).json()["incidents"]
    assert sorted((i["summary"], i["held_total"]) for i in items) == [
        ("anthropic rate limit reached (account team-a)", 2),
        ("anthropic rate limit reached (account team-b)", 1)]
    bad = s.http.post("/api/v1/session/start", json={**_body(AGENTS[:1]), "play_id": "p-x",
                                                     "account": "sk-ant-../../x"})
    assert bad.status_code == 400
