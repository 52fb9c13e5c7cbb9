"""The plugin's session hook registers a Claude Code session with healer and never gets in the
way: nothing on stdout, exit 0, bounded time — whatever the endpoint does."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from skills_helpers import child_env

from healer.core.names import safe_name
from healer.resources import bundle_root
from healer.testing.api import ServeProcess
from healer.testing.fleet import Tarpit

pytestmark = pytest.mark.e2e
HOOK = bundle_root() / "hooks" / "healer_session.py"
SESSION = "7b6e2857-6e5f-49c4-bb24-6b1e9f4c21c4"


def hook(event: str, data: Any, **env: str) -> subprocess.CompletedProcess[str]:
    stdin = data if isinstance(data, str) else json.dumps(data)
    # Generous: the hook's own deadline is 3 s; this only keeps a broken hook from hanging CI.
    return subprocess.run([str(HOOK), event], input=stdin, env=child_env(**env),
                          capture_output=True, text=True, timeout=30)


@pytest.fixture
def serve(base_env: dict[str, str]) -> Iterator[ServeProcess]:
    s = ServeProcess(base_env)
    try:
        yield s
    finally:
        s.close()


def session(serve: ServeProcess, play_id: str) -> Any:
    r = serve.http.get(f"/api/v1/session/{play_id}")
    return r.json()["session"] if r.status_code == 200 else None


class TestRegistration:
    def test_start_and_end_register_and_finish_the_session(
            self, serve: ServeProcess, tmp_path: Path) -> None:
        """SessionStart posts the session as play claude-<id> (repository = the git folder's
        name, agent claude-code); SessionEnd marks it completed with the reason."""
        repo = tmp_path / "webapp"
        (repo / ".git").mkdir(parents=True)
        (repo / "src").mkdir()
        data = {"session_id": SESSION, "cwd": str(repo / "src"), "source": "startup",
                "model": "claude-sonnet-4-5", "hook_event_name": "SessionStart"}
        proc = hook("start", data, HEALER_URL=serve.url)
        assert proc.returncode == 0 and proc.stdout == ""
        s = session(serve, f"claude-{SESSION}")
        assert s["status"] == "active" and s["repository"] == "webapp"
        assert s["cto_config"]["agents"]["claude-code"]["model"] == "claude-sonnet-4-5"
        proc = hook("end", {**data, "reason": "prompt_input_exit"}, HEALER_URL=serve.url)
        assert proc.returncode == 0 and proc.stdout == ""
        s = session(serve, f"claude-{SESSION}")
        assert s["status"] == "completed" and "prompt_input_exit" in s["finish_reason"]

    def test_a_resumed_session_is_fine(self, serve: ServeProcess, tmp_path: Path) -> None:
        """Starting a session that is already active (resume) still exits 0, silently."""
        data = {"session_id": SESSION, "cwd": str(tmp_path), "source": "resume"}
        for _ in range(2):
            proc = hook("start", data, HEALER_URL=serve.url, HEALER_HOOK_DEBUG="1")
            assert proc.returncode == 0 and proc.stdout == ""
        assert "HTTP 409" in proc.stderr

    def test_the_endpoint_can_come_from_cto_config(
            self, serve: ServeProcess, tmp_path: Path) -> None:
        """Without HEALER_URL, defaults.play.healerEndpoint of the session folder's
        cto-config.json is used."""
        (tmp_path / "cto-config.json").write_text(json.dumps(
            {"defaults": {"play": {"healerEndpoint": serve.url}}}))
        assert hook("start", {"session_id": "abc", "cwd": str(tmp_path)}).returncode == 0
        assert session(serve, "claude-abc") is not None

    def test_a_hostile_session_id_becomes_a_safe_play_id(self, serve: ServeProcess) -> None:
        """Path and shell characters in the session id are replaced, never sent as they are."""
        proc = hook("start", {"session_id": "../../a..b;rm -rf $(id)", "cwd": "/"},
                    HEALER_URL=serve.url, HEALER_HOOK_DEBUG="1")
        assert proc.returncode == 0
        ids = [s["play_id"] for s in serve.http.get("/api/v1/sessions").json()["sessions"]]
        assert len(ids) == 1, proc.stderr
        assert ids[0].startswith("claude-a.b-rm-") and safe_name(ids[0]) == ids[0]


class TestNeverInTheWay:
    def test_no_endpoint_means_no_request(self, tmp_path: Path) -> None:
        """Without HEALER_URL or a cto-config endpoint the hook does nothing and says so only
        when debugging."""
        proc = hook("start", {"session_id": SESSION, "cwd": str(tmp_path)},
                    HEALER_HOOK_DEBUG="1")
        assert proc.returncode == 0 and proc.stdout == ""
        assert "no healer endpoint configured" in proc.stderr

    def test_switched_off(self, serve: ServeProcess, tmp_path: Path) -> None:
        """HEALER_SESSION_HOOK=0 stops it even with an endpoint."""
        hook("start", {"session_id": SESSION, "cwd": str(tmp_path)}, HEALER_URL=serve.url,
             HEALER_SESSION_HOOK="0")
        assert session(serve, f"claude-{SESSION}") is None

    @pytest.mark.parametrize("stdin", ["", "not json", "[1, 2]", '{"session_id": 5}'])
    def test_bad_input_exits_zero(self, serve: ServeProcess, stdin: str) -> None:
        """Empty, malformed or odd hook input: exit 0, nothing on stdout, nothing posted."""
        proc = hook("start", stdin, HEALER_URL=serve.url)
        assert proc.returncode == 0 and proc.stdout == ""
        assert serve.http.get("/api/v1/sessions").json()["count"] == 0

    @pytest.mark.parametrize("url", ["http://127.0.0.1:9", "file:///etc/passwd", "not a url"])
    def test_unreachable_or_odd_endpoints_exit_zero(self, url: str, tmp_path: Path) -> None:
        """A closed port, a non-HTTP scheme or garbage as the endpoint: exit 0, silently."""
        proc = hook("start", {"session_id": SESSION, "cwd": str(tmp_path)}, HEALER_URL=url)
        assert proc.returncode == 0 and proc.stdout == ""

    def test_a_server_that_never_answers_does_not_hold_the_session(
            self, tmp_path: Path) -> None:
        """An endpoint that accepts the connection and never replies: the hook gives up on
        its own deadline and exits 0 (the subprocess timeout here is only a safety net)."""
        pit = Tarpit()
        try:
            proc = hook("start", {"session_id": SESSION, "cwd": str(tmp_path)},
                        HEALER_URL=f"http://127.0.0.1:{pit.port}", HEALER_HOOK_DEBUG="1")
        finally:
            pit.close()
        assert proc.returncode == 0 and proc.stdout == ""
        assert "timed out" in proc.stderr or "gave up" in proc.stderr

    def test_help_and_unknown_events(self) -> None:
        """--help documents the hook; an unknown event is ignored with exit 0."""
        proc = subprocess.run([sys.executable, str(HOOK), "--help"], capture_output=True,
                              text=True, timeout=30)
        assert proc.returncode == 0 and "SessionStart" in proc.stdout
        assert hook("explode", {"session_id": SESSION}).returncode == 0
