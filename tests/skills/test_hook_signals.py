"""The plugin's hooks report what went wrong in a Claude Code session to healer's classifier.

``hooks/healer_session.py event`` runs on Stop, StopFailure, SubagentStop, PostToolUseFailure
and Notification. The StopFailure inputs and the transcripts used here are the real CLI's
(``tests/agents/cli_failures/claude/<case>.{hooks,transcript}.jsonl``, recorded by
``scripts/record_cli_failures.py``); two tests run the bundled CLI itself with the plugin
against the scripted model. Every hook run is the real script in a subprocess, posting to a
real ``healer serve`` (or to a recording receiver, where the test must see every request) on
127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from skills_helpers import CLAUDE_TEST_ENV, child_env

from healer.agents.claude import QUIET_ENV
from healer.agents.executors import claude_cli
from healer.config import load_settings
from healer.resources import bundle_root
from healer.testing import ScriptedModel, http_error, text, tool_use
from healer.testing.api import ServeProcess
from healer.testing.fleet import Tarpit, free_port
from healer.testing.receivers import WebhookReceiver
from healer.testing.wait import wait_for

pytestmark = pytest.mark.e2e
HOOK = bundle_root() / "hooks" / "healer_session.py"
RECORDED = Path(__file__).resolve().parents[1] / "agents" / "cli_failures" / "claude"
DEADLINE_S = 3.0  # the hook's own deadline (hooks/healer_session.py)
#: The deadline plus the interpreter's start on a loaded machine; far below Claude Code's 10 s.
WITHIN_S = DEADLINE_S + 2.5
#: What the real CLI printed for each recorded case, and the code healer gives it.
CASES = {"rate_limit_429": ("API Error: Request rejected (429)", "rate_limit", 429, "T1"),
         "auth_401": ("Invalid API key · Fix external API key", "authentication_failed", 401,
                      "X1")}


@pytest.fixture
def serve(base_env: dict[str, str]) -> Iterator[ServeProcess]:
    s = ServeProcess(base_env)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(status=200) as r:
        yield r


def hook_env(tmp_path: Path, url: str, **extra: str) -> dict[str, str]:
    """The environment Claude Code gives its hooks here: its config dir and a home in tmp."""
    (tmp_path / "home").mkdir(exist_ok=True)
    return {"HEALER_URL": url, "HEALER_HOOK_DEBUG": "1", "HOME": str(tmp_path / "home"),
            "CLAUDE_CONFIG_DIR": str(tmp_path / "config"), **extra}


def hook(data: Any, env: dict[str, str], mode: str = "event"
         ) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run the hook script as Claude Code does; what it did, and how long it took."""
    stdin = data if isinstance(data, str) else json.dumps(data)
    began = time.monotonic()
    # The timeout is only a safety net for a broken hook; its own deadline is 3 s.
    proc = subprocess.run([str(HOOK), mode], input=stdin, env=child_env(**env),
                          capture_output=True, text=True, timeout=30)
    return proc, time.monotonic() - began


def _program(pid: int) -> bytes:
    """What ``pid`` runs now (``/bin/sh`` until it execs the hook's Python)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:  # gone: the hook went to the background already
        return b"python"


def recorded(case: str, tmp_path: Path) -> dict[str, Any]:
    """The StopFailure input the CLI gave its hook in ``case``, with the session's recorded
    transcript put where that input says (under this test's CLAUDE_CONFIG_DIR)."""

    def fill(value: str) -> str:
        return value.replace("${tmp_slug}", re.sub(r"[^A-Za-z0-9]", "-", str(tmp_path))) \
            .replace("${tmp}", str(tmp_path))

    data = json.loads(fill((RECORDED / f"{case}.hooks.jsonl").read_text().splitlines()[0]))
    assert data["hook_event_name"] == "StopFailure"
    transcript = Path(data["transcript_path"])
    assert transcript.is_relative_to(tmp_path / "config" / "projects")
    transcript.parent.mkdir(parents=True, exist_ok=True)
    transcript.write_text(fill((RECORDED / f"{case}.transcript.jsonl").read_text()))
    Path(data["cwd"]).mkdir(parents=True, exist_ok=True)
    return data


def as_stop(data: dict[str, Any]) -> dict[str, Any]:
    """The same moment as a Stop hook sees it: no error fields, only the transcript."""
    keep = ("session_id", "transcript_path", "cwd", "prompt_id", "permission_mode")
    return {**{k: data[k] for k in keep if k in data}, "hook_event_name": "Stop",
            "stop_hook_active": False}


def session(serve: ServeProcess, play_id: str) -> dict[str, Any] | None:
    r = serve.http.get(f"/api/v1/session/{play_id}")
    return r.json()["session"] if r.status_code == 200 else None


def alert_codes(serve: ServeProcess, play_id: str) -> set[str]:
    """The codes healer's session for ``play_id`` has seen from agent claude-code."""
    s = session(serve, play_id) or {}
    return set(s.get("agents", {}).get("claude-code", {}).get("last_alert_at", {}))


def logs_posts(receiver: WebhookReceiver) -> list[dict[str, Any]]:
    return [p for p in receiver.posts if p["path"].endswith("/logs")]


def sent_lines(receiver: WebhookReceiver) -> list[str]:
    """The lines of the one log post the receiver got."""
    [post] = logs_posts(receiver)
    assert post["body"]["agent"] == "claude-code"
    return list(post["body"]["lines"])


def classified(data: dict[str, Any], tmp_path: Path, serve: ServeProcess, code: str) -> None:
    """The hook posts ``data`` to healer: exit 0, silent on stdout, within the deadline, and
    both the logs endpoint's answer and the session for claude-<id> have ``code``."""
    proc, took = hook(data, hook_env(tmp_path, serve.url))
    assert proc.returncode == 0 and proc.stdout == "" and took < WITHIN_S, proc.stderr
    assert re.search(rf"HTTP 200, alerts ([A-Z0-9 ]+ )?{code}\b", proc.stderr), proc.stderr
    assert code in alert_codes(serve, f"claude-{data['session_id']}")


class TestApiErrors:
    @pytest.mark.parametrize("case", sorted(CASES))
    def test_stop_failure_of_the_real_cli_gives_the_code(
            self, case: str, serve: ServeProcess, receiver: WebhookReceiver,
            tmp_path: Path) -> None:
        """The CLI's StopFailure input and transcript for a 429 and a 401: the line carries
        the CLI's words with the HTTP status from the transcript; healer's session for
        claude-<id> (registered at SessionStart) gets T1 / X1."""
        said, category, status, code = CASES[case]
        data = recorded(case, tmp_path)
        proc, _ = hook(data, hook_env(tmp_path, receiver.url))
        assert proc.returncode == 0 and proc.stdout == "", proc.stderr
        [line] = sent_lines(receiver)
        assert line.startswith(
            f"Claude Code StopFailure: API error ({category}, HTTP {status}): {said}")
        env = hook_env(tmp_path, serve.url)
        start, _ = hook({**data, "hook_event_name": "SessionStart"}, env, mode="start")
        assert start.returncode == 0, start.stderr
        assert session(serve, f"claude-{data['session_id']}") is not None
        classified(data, tmp_path, serve, code)

    @pytest.mark.parametrize("case", sorted(CASES))
    def test_stop_reads_the_api_error_from_the_transcript(
            self, case: str, serve: ServeProcess, receiver: WebhookReceiver,
            tmp_path: Path) -> None:
        """A Stop hook's input names only the transcript (Claude Code before StopFailure ran
        Stop when an API error ended the turn): the error entry at its end is sent."""
        said, category, status, code = CASES[case]
        data = as_stop(recorded(case, tmp_path))
        proc, _ = hook(data, hook_env(tmp_path, receiver.url))
        assert proc.returncode == 0 and proc.stdout == "", proc.stderr
        [line] = sent_lines(receiver)
        assert line.startswith(f"Claude Code Stop: API error ({category}, HTTP {status}): {said}")
        classified(data, tmp_path, serve, code)

    def test_subagent_stop_reads_the_subagents_transcript(
            self, serve: ServeProcess, receiver: WebhookReceiver, tmp_path: Path) -> None:
        """SubagentStop: agent_transcript_path (the subagent's own transcript) is read."""
        data = recorded("auth_401", tmp_path)
        sub = {**as_stop(data), "hook_event_name": "SubagentStop", "agent_id": "a1",
               "agent_type": "general-purpose", "agent_transcript_path": data["transcript_path"],
               "transcript_path": str(tmp_path / "config" / "projects" / "none.jsonl")}
        proc, _ = hook(sub, hook_env(tmp_path, receiver.url))
        assert proc.returncode == 0 and proc.stdout == "", proc.stderr
        assert sent_lines(receiver) == [
            "Claude Code SubagentStop [general-purpose]: API error (authentication_failed, "
            "HTTP 401): Invalid API key · Fix external API key"]
        classified(sub, tmp_path, serve, "X1")

    def test_a_session_healer_does_not_know_is_registered_first(
            self, serve: ServeProcess, tmp_path: Path) -> None:
        """healer came up after SessionStart: the logs answer 404, so the hook starts the
        session (repository = the cwd's folder, agent claude-code) and sends the lines again."""
        data = recorded("rate_limit_429", tmp_path)
        pid = f"claude-{data['session_id']}"
        assert session(serve, pid) is None
        proc, took = hook(data, hook_env(tmp_path, serve.url))
        assert proc.returncode == 0 and proc.stdout == "" and took < WITHIN_S
        assert "session start HTTP 200, HTTP 200, alerts T1" in proc.stderr, proc.stderr
        s = session(serve, pid)
        assert s is not None and s["status"] == "active" and s["repository"] == "work"
        assert "claude-code" in s["cto_config"]["agents"]
        assert "T1" in alert_codes(serve, pid)

    def test_the_cli_ending_its_hooks_at_once_does_not_lose_the_failure(
            self, serve: ServeProcess, tmp_path: Path) -> None:
        """When an API error ends a ``claude -p`` run the CLI exits and sends SIGTERM to its
        hooks' process group a few hundred ms after starting them. hooks.json's own command
        for StopFailure, run as the CLI runs it (``sh -c`` in a group of its own) and
        terminated at once, still gets the failure to healer."""
        [entry] = json.loads((HOOK.parent / "hooks.json").read_text())["hooks"]["StopFailure"]
        command = entry["hooks"][0]["command"]
        data = recorded("rate_limit_429", tmp_path)
        pid = f"claude-{data['session_id']}"
        env = child_env(**hook_env(tmp_path, serve.url), CLAUDE_PLUGIN_ROOT=str(bundle_root()))
        env.pop("HEALER_HOOK_DEBUG")  # as in a real session: the hook's stderr is not kept
        proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE,
                                env=env, start_new_session=True)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(data).encode())
        proc.stdin.close()
        # The moment the CLI's clean-up comes: the hook's Python is starting.
        wait_for(lambda: b"python" in _program(proc.pid), timeout=30, every=0.001)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
        assert serve.wait_for(lambda: "T1" in alert_codes(serve, pid))

    def test_stop_failure_without_a_readable_transcript_still_reports(
            self, serve: ServeProcess, receiver: WebhookReceiver, tmp_path: Path) -> None:
        """The transcript is written asynchronously and may lag: StopFailure's own
        last_assistant_message and error category are enough."""
        data = recorded("auth_401", tmp_path)
        Path(data["transcript_path"]).unlink()
        proc, _ = hook(data, hook_env(tmp_path, receiver.url))
        assert proc.returncode == 0 and proc.stdout == "", proc.stderr
        assert sent_lines(receiver) == ["Claude Code StopFailure: API error "
                                        "(authentication_failed): Invalid API key · Fix "
                                        "external API key"]
        classified(data, tmp_path, serve, "X1")


class TestNothingToReport:
    def test_an_error_a_later_turn_got_past_is_not_sent_again(
            self, receiver: WebhookReceiver, tmp_path: Path) -> None:
        """The transcript ends with a new prompt and a real reply after the 429: a Stop then
        reports nothing — no request at all."""
        data = as_stop(recorded("rate_limit_429", tmp_path))
        path = Path(data["transcript_path"])
        entries = [json.loads(line) for line in path.read_text().splitlines()]
        prompt = next(e for e in entries if e.get("type") == "user")
        error = next(e for e in entries if e.get("isApiErrorMessage"))
        reply = {k: v for k, v in error.items() if k not in (
            "error", "isApiErrorMessage", "apiErrorStatus", "apiErrorType")}
        reply["message"] = {**error["message"], "model": "claude-opus-5-5",
                            "content": [{"type": "text", "text": "Hello!"}]}
        with path.open("a") as fh:
            for e in (prompt, reply):
                fh.write(json.dumps(e) + "\n")
        proc, _ = hook(data, hook_env(tmp_path, receiver.url))
        assert proc.returncode == 0 and proc.stdout == ""
        assert "nothing to report" in proc.stderr and receiver.posts == []

    def test_only_a_transcript_of_the_users_own_claude_files_is_read(
            self, receiver: WebhookReceiver, tmp_path: Path) -> None:
        """The same recorded transcript outside $CLAUDE_CONFIG_DIR and $HOME, behind a
        symlink that leads out of them, without the .jsonl name, as a FIFO, or given as a
        relative path: never read, nothing sent."""
        data = as_stop(recorded("rate_limit_429", tmp_path))
        real = Path(data["transcript_path"])
        outside = tmp_path / "elsewhere" / real.name
        outside.parent.mkdir()
        outside.write_bytes(real.read_bytes())
        link = real.parent / "link.jsonl"
        link.symlink_to(outside)
        renamed = real.with_suffix(".txt")
        renamed.write_bytes(real.read_bytes())
        fifo = real.parent / "fifo.jsonl"
        os.mkfifo(fifo)
        env = hook_env(tmp_path, receiver.url)
        for path in (outside, link, renamed, fifo, Path(os.path.relpath(real))):
            proc, took = hook({**data, "transcript_path": str(path)}, env)
            assert proc.returncode == 0 and proc.stdout == "" and took < WITHIN_S, path
            assert "nothing to report" in proc.stderr, (path, proc.stderr)
        assert receiver.posts == []
        proc, _ = hook(data, env)  # the real one, for contrast
        assert len(logs_posts(receiver)) == 1

    def test_only_the_tail_of_a_long_transcript_is_read(
            self, receiver: WebhookReceiver, tmp_path: Path) -> None:
        """A 20 MB transcript (8 MB of old turns before the recorded session): the error at
        its end is found in the last 256 KiB, quickly."""
        data = as_stop(recorded("rate_limit_429", tmp_path))
        path = Path(data["transcript_path"])
        recorded_text = path.read_bytes()
        old = json.dumps({"type": "user", "message": {"role": "user", "content": "x" * 4000}})
        path.write_bytes((old + "\n").encode() * 5000 + recorded_text)
        proc, took = hook(data, hook_env(tmp_path, receiver.url, HEALER_TOKEN="s3cret"))
        assert proc.returncode == 0 and took < WITHIN_S, proc.stderr
        [post] = logs_posts(receiver)
        assert post["headers"]["Authorization"] == "Bearer s3cret"
        assert post["body"]["agent"] == "claude-code"
        [line] = post["body"]["lines"]
        assert line.startswith("Claude Code Stop: API error (rate_limit, HTTP 429): API Error: "
                               "Request rejected (429) · This request would exceed")


class TestToolFailuresAndNotifications:
    def test_post_tool_use_failure_sends_the_tool_and_its_error(
            self, serve: ServeProcess, receiver: WebhookReceiver, tmp_path: Path) -> None:
        """The tool's name and its error, line by line (the tool's input is not sent): a
        refused connection in a Bash error is classified like any log line (R2)."""
        data = recorded("auth_401", tmp_path)
        failure = {**as_stop(data), "hook_event_name": "PostToolUseFailure",
                   "tool_name": "Bash", "tool_input": {"command": "psql -h db SECRET=1"},
                   "tool_use_id": "toolu_1", "is_interrupt": False, "duration_ms": 40,
                   "error": "Exit code 2\npsql: error: connection to server at \"db\" "
                            "(10.0.0.5), port 5432 failed: Connection refused"}
        proc, _ = hook(failure, hook_env(tmp_path, receiver.url))
        assert proc.returncode == 0 and proc.stdout == "", proc.stderr
        assert sent_lines(receiver) == [
            "Claude Code PostToolUseFailure: tool Bash failed: Exit code 2",
            'psql: error: connection to server at "db" (10.0.0.5), port 5432 failed: '
            "Connection refused"]
        classified(failure, tmp_path, serve, "R2")

    def test_tool_failure_and_notification_lines(
            self, receiver: WebhookReceiver, tmp_path: Path) -> None:
        """What exactly is sent; an interrupted tool and routine notifications send nothing."""
        base = {"session_id": "s-1", "cwd": str(tmp_path),
                "transcript_path": str(tmp_path / "config" / "projects" / "p" / "s-1.jsonl")}
        env = hook_env(tmp_path, receiver.url)
        events = [
            {"hook_event_name": "PostToolUseFailure", "tool_name": "Bash",
             "tool_input": {"command": "make"}, "tool_use_id": "t1", "is_interrupt": False,
             "error": "Exit code 2\nmake: *** [all] Error 1\n\n"},
            {"hook_event_name": "Notification", "notification_type": "permission_prompt",
             "title": "Permission needed", "message": "Claude needs your permission to use Bash"},
            {"hook_event_name": "PostToolUseFailure", "tool_name": "Bash", "tool_input": {},
             "tool_use_id": "t2", "is_interrupt": True, "error": "Interrupted by user"},
            {"hook_event_name": "Notification", "notification_type": "idle_prompt",
             "message": "Claude is waiting for your input"},
            {"hook_event_name": "Notification", "message": "   "},
        ]
        for event in events:
            proc, _ = hook({**base, **event}, env)
            assert proc.returncode == 0 and proc.stdout == "", proc.stderr
        assert [p["body"]["lines"] for p in receiver.posts] == [
            ["Claude Code PostToolUseFailure: tool Bash failed: Exit code 2",
             "make: *** [all] Error 1"],
            ["Claude Code Notification (permission_prompt): Permission needed: Claude needs "
             "your permission to use Bash"]]
        assert {p["path"] for p in receiver.posts} == {"/api/v1/session/claude-s-1/logs"}

    def test_a_long_error_is_bounded(self, receiver: WebhookReceiver, tmp_path: Path) -> None:
        """8000 lines of tool output (3 MB, some lines of 5000 characters): its head and
        tail, each line cut to 4000 characters."""
        error = "\n".join(f"line {i} " + "y" * (5000 if i % 100 == 1 else 300)
                          for i in range(8000))
        proc, _ = hook({"session_id": "s-2", "hook_event_name": "PostToolUseFailure",
                        "tool_name": "Bash", "tool_input": {}, "error": error},
                       hook_env(tmp_path, receiver.url))
        assert proc.returncode == 0, proc.stderr
        [post] = receiver.posts
        lines = post["body"]["lines"]
        assert len(lines) <= 81 and max(map(len, lines)) <= 4000
        assert sum(map(len, lines)) <= 128 << 10
        assert lines[0].startswith("Claude Code PostToolUseFailure: tool Bash failed: line 0 ")
        assert lines[1].startswith("line 1 ") and len(lines[1]) == 4000
        assert lines[-1].startswith("line 7999 ")


class TestNeverInTheWay:
    @pytest.mark.parametrize("stdin", [
        "", "not json", "[1, 2]", '{"session_id": 5, "hook_event_name": "Stop"}',
        '{"session_id": "s", "hook_event_name": "Stop", "transcript_path": 7}',
        '{"session_id": "s", "hook_event_name": "PostToolUseFailure", "error": null}',
        '{"session_id": "s", "hook_event_name": "SomethingNew"}', '{"session_id": "s"}'])
    def test_malformed_or_odd_input_exits_zero(
            self, stdin: str, receiver: WebhookReceiver, tmp_path: Path) -> None:
        proc, took = hook(stdin, hook_env(tmp_path, receiver.url))
        assert proc.returncode == 0 and proc.stdout == "" and took < WITHIN_S
        assert all(p["body"]["lines"] for p in receiver.posts)

    def test_healer_down(self, tmp_path: Path) -> None:
        """A closed port: exit 0, nothing on stdout, well within the deadline."""
        data = recorded("rate_limit_429", tmp_path)
        proc, took = hook(data, hook_env(tmp_path, f"http://127.0.0.1:{free_port()}"))
        assert proc.returncode == 0 and proc.stdout == "" and took < WITHIN_S
        assert "Connection refused" in proc.stderr or "URLError" in proc.stderr, proc.stderr

    def test_a_healer_that_never_answers(self, tmp_path: Path) -> None:
        """Accepted and never answered: the hook gives up on its deadline and exits 0."""
        data = recorded("auth_401", tmp_path)
        pit = Tarpit()
        try:
            proc, took = hook(data, hook_env(tmp_path, f"http://127.0.0.1:{pit.port}"))
        finally:
            pit.close()
        assert proc.returncode == 0 and proc.stdout == "" and took < WITHIN_S
        assert "timed out" in proc.stderr or "gave up" in proc.stderr, proc.stderr

    @pytest.mark.parametrize(("value", "seconds"), [
        ("", 3.0), ("6", 6.0), ("0", 0.5), ("60", 9.0), ("soon", 3.0), ("nan", 3.0)])
    def test_the_deadline_can_be_raised_for_a_slow_healer_but_stays_under_the_hook_timeout(
            self, value: str, seconds: float) -> None:
        """$HEALER_HOOK_DEADLINE_S is clamped to 0.5–9 s (hooks.json kills a hook at 10 s);
        a value that is not a number keeps the 3 s default."""
        probe = ("import importlib.util, sys\n"
                 f"spec = importlib.util.spec_from_file_location('hook', {str(HOOK)!r})\n"
                 "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
                 "print(mod.deadline())")
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              env=child_env(HEALER_HOOK_DEADLINE_S=value), timeout=30)
        assert proc.returncode == 0 and float(proc.stdout) == seconds, proc.stderr

    def test_no_endpoint_or_switched_off(
            self, receiver: WebhookReceiver, tmp_path: Path) -> None:
        data = recorded("auth_401", tmp_path)
        env = hook_env(tmp_path, receiver.url)
        proc, _ = hook(data, {k: v for k, v in env.items() if k != "HEALER_URL"})
        assert proc.returncode == 0 and "no healer endpoint configured" in proc.stderr
        proc, _ = hook(data, {**env, "HEALER_SESSION_HOOK": "0"})
        assert proc.returncode == 0 and receiver.posts == []


# -- the real CLI runs the plugin's hooks ---------------------------------------------------------

def run_cli(tmp_path: Path, model: ScriptedModel, healer_url: str, *args: str
            ) -> dict[str, Any]:
    """``claude --plugin-dir <healer> -p`` against the scripted model; its init event."""
    cli = claude_cli(load_settings(env={}))
    if cli is None:
        pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(exist_ok=True)
    home.mkdir(exist_ok=True)
    env = {**child_env(), **QUIET_ENV, **CLAUDE_TEST_ENV, **model.env(), "HOME": str(home),
           "CLAUDE_CONFIG_DIR": str(tmp_path / "config"), "HEALER_URL": healer_url,
           # A busy CI machine can take more than the default 3 s for the CLI's hook to
           # register the session and post its lines; the deadline itself is tested above.
           "HEALER_HOOK_DEADLINE_S": "9"}
    proc = subprocess.run([str(cli), "--plugin-dir", str(bundle_root()), "-p", "Say hello.",
                           "--output-format", "stream-json", "--verbose", *args],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    init = next((e for e in events if e.get("subtype") == "init"), None)
    assert init is not None, proc.stderr[-2000:]
    return init


class TestWithTheRealCli:
    def test_a_rate_limited_session_reaches_healer_as_t1(
            self, serve: ServeProcess, tmp_path: Path) -> None:
        """SessionStart registers the session, the 429 ends the turn, StopFailure sends the
        CLI's words and healer's session for claude-<id> has seen T1."""
        script = [http_error(429, "rate_limit_error", "Number of requests exceeded.",
                             headers={"x-should-retry": "false", "request-id": "req_live"})]
        with ScriptedModel(script) as model:
            init = run_cli(tmp_path, model, serve.url)
        pid = f"claude-{init['session_id']}"
        assert serve.wait_for(lambda: "T1" in alert_codes(serve, pid))

    def test_a_failed_tool_is_sent_and_a_normal_stop_sends_nothing(
            self, receiver: WebhookReceiver, tmp_path: Path) -> None:
        """A Bash call fails, then the model answers: the requests are the session start,
        one log post with the tool's error (PostToolUseFailure) and the finish — the Stop
        after the real reply sends nothing."""
        script = [tool_use("Bash", {"command": "echo 'fatal error: disk full' >&2; exit 3",
                                    "description": "fail"}), text("done")]
        with ScriptedModel(script) as model:
            init = run_cli(tmp_path, model, receiver.url, "--allowedTools", "Bash")
        pid = f"claude-{init['session_id']}"
        wait_for(lambda: any(p["path"].endswith("/finish") for p in receiver.posts), 15)
        paths = [p["path"] for p in receiver.posts]
        assert paths == ["/api/v1/session/start", f"/api/v1/session/{pid}/logs",
                         f"/api/v1/session/{pid}/finish"], paths
        assert receiver.posts[1]["body"]["lines"] == [
            "Claude Code PostToolUseFailure: tool Bash failed: Exit code 3",
            "fatal error: disk full"]
