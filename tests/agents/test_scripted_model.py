"""ScriptedModel: the Anthropic Messages wire format, scripts, side requests and faults."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from healer.testing import (
    RecordedRequest,
    ScriptedModel,
    break_stream,
    hang,
    http_error,
    load_script,
    text,
    tool_use,
)

TOOLS = [{"name": "Write", "description": "write", "input_schema": {"type": "object"}}]


def ask(model: ScriptedModel, *, stream: bool = True, tools: bool = True,
        prompt: str = "hi", timeout: float = 5) -> httpx.Response:
    body: dict[str, Any] = {"model": "claude-test", "max_tokens": 100, "stream": stream,
                            "system": [{"type": "text", "text": "You are a test."}],
                            "messages": [{"role": "user", "content": prompt}]}
    if tools:
        body["tools"] = TOOLS
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        return client.post(f"{model.url}/v1/messages?beta=true", json=body,
                           headers={"x-api-key": "secret-key"})


def events(resp: httpx.Response) -> list[dict[str, Any]]:
    found = []
    for block in resp.text.strip().split("\n\n"):
        name, data = block.split("\n", 1)
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        found.append(event)
    return found


class TestWireFormat:
    def test_streams_the_messages_event_sequence(self) -> None:
        """A tool-use turn streams message_start … message_stop with input_json_delta pieces."""
        with ScriptedModel([tool_use("Write", {"file_path": "/x", "content": "y"},
                                     text="writing")]) as model:
            resp = ask(model)
        assert resp.headers["content-type"] == "text/event-stream"
        seq = [e["type"] for e in events(resp)]
        assert seq == ["message_start",
                       "content_block_start", "content_block_delta", "content_block_stop",
                       "content_block_start", "content_block_delta", "content_block_delta",
                       "content_block_stop", "message_delta", "message_stop"]
        evs = events(resp)
        assert evs[0]["message"]["model"] == "claude-test"
        tool = evs[4]["content_block"]
        assert (tool["type"], tool["name"]) == ("tool_use", "Write")
        args = "".join(e["delta"]["partial_json"] for e in evs[5:7])
        assert json.loads(args) == {"file_path": "/x", "content": "y"}
        assert evs[8]["delta"]["stop_reason"] == "tool_use"

    def test_plain_json_reply(self) -> None:
        """A non-streaming request gets one Messages API JSON body."""
        with ScriptedModel([text("hello")]) as model:
            body = ask(model, stream=False).json()
        assert body["type"] == "message" and body["stop_reason"] == "end_turn"
        assert body["content"] == [{"type": "text", "text": "hello"}]

    def test_start_up_calls_get_harmless_answers(self) -> None:
        """count_tokens, model lists and unknown routes answer 200 without touching the script."""
        with ScriptedModel([text("scripted")]) as model, httpx.Client(trust_env=False) as c:
            assert c.post(f"{model.url}/v1/messages/count_tokens",
                          json={"messages": []}).json()["input_tokens"] >= 1
            assert c.get(f"{model.url}/v1/models").status_code == 200
            assert c.post(f"{model.url}/api/event_logging/batch", json={}).status_code == 200
            assert model.remaining == 1

    def test_requests_are_recorded_with_keys_masked(self) -> None:
        """Tests can read what the client sent; the API key is never kept."""
        with ScriptedModel([text("a")]) as model:
            ask(model, prompt="please fix it")
        req = model.requests[0]
        assert req.headers["x-api-key"] == "***"
        assert req.system_text == "You are a test." and req.tool_names == ["Write"]
        assert req.user_text() == "please fix it" and req.scripted and req.turn == 0


class TestScripts:
    def test_side_requests_do_not_consume_the_script(self) -> None:
        """A request without tools (a title or quota check) gets 'ok'; the script waits."""
        with ScriptedModel([text("the real answer")]) as model:
            side = ask(model, stream=False, tools=False).json()
            main = ask(model, stream=False).json()
        assert side["content"][0]["text"] == "ok"
        assert main["content"][0]["text"] == "the real answer"
        assert [r.scripted for r in model.requests] == [False, True]

    def test_callable_turn_sees_the_request(self) -> None:
        """A turn may be a function of the request, to react to what the client sent."""
        def echo(req: RecordedRequest) -> Any:
            return text(f"you said {req.user_text()}")

        with ScriptedModel([echo]) as model:
            assert ask(model, stream=False, prompt="ping").json()["content"][0]["text"] == \
                "you said ping"

    def test_placeholders_are_filled_from_the_prompt(self) -> None:
        """${result_path} and friends come from healer's task prompt."""
        prompt = "- run_id: `run-1`\n- result file: `/tmp/r/heal-x-y-1.json`"
        with ScriptedModel([tool_use("Write", {"file_path": "${result_path}",
                                               "content": "${run_id} ${unknown}"})]) as model:
            block = ask(model, stream=False, prompt=prompt).json()["content"][0]
        assert block["input"] == {"file_path": "/tmp/r/heal-x-y-1.json",
                                  "content": "run-1 ${unknown}"}

    def test_exhausted_script_ends_the_conversation(self) -> None:
        """Past the last turn the model just ends its turn, and counts it."""
        with ScriptedModel([]) as model:
            assert ask(model, stream=False).json()["stop_reason"] == "end_turn"
        assert model.exhausted_requests == 1

    def test_script_file(self, tmp_path: Path) -> None:
        """YAML scripts give text, tool and fault turns; a Write's mapping content is JSON."""
        path = tmp_path / "s.yaml"
        path.write_text("- text: hi\n- tool: Write\n  input: {file_path: /x, content: {a: 1}}\n"
                        "- fault: http_error\n  status: 500\n  times: 1\n")
        script = load_script(path)
        assert json.loads(script[1].content[0]["input"]["content"]) == {"a": 1}
        assert script[2].status == 500 and script[2].times == 1
        path.write_text("- fault: melt\n")
        with pytest.raises(ValueError, match="unknown fault"):
            load_script(path)


class TestFaults:
    def test_http_error_keeps_failing_until_times_runs_out(self) -> None:
        """A fault answers every retry by default; with times=1 the next turn follows."""
        with ScriptedModel([http_error(529)]) as model:
            assert [ask(model).status_code for _ in range(3)] == [529, 529, 529]
            assert ask(model).json()["error"]["type"] == "overloaded_error"
        with ScriptedModel([http_error(500, times=1), text("recovered")]) as model:
            assert ask(model, stream=False).status_code == 500
            assert ask(model, stream=False).json()["content"][0]["text"] == "recovered"

    def test_broken_stream_is_a_protocol_error(self) -> None:
        """A stream cut midway makes the client see an incomplete body."""
        with ScriptedModel([break_stream(after_events=2)]) as model:
            with pytest.raises(httpx.RemoteProtocolError):
                ask(model)
            with pytest.raises(httpx.RemoteProtocolError):
                ask(model, stream=False)

    def test_hang_times_out_the_client(self) -> None:
        """A hanging turn answers nothing; stopping the server releases it."""
        with ScriptedModel([hang()]) as model, pytest.raises(httpx.ReadTimeout):
            ask(model, timeout=0.5)


class TestCommandLine:
    def test_serves_a_script_file(self, tmp_path: Path) -> None:
        """`python -m healer.testing.scripted_model --script FILE` prints its URL and serves."""
        script = tmp_path / "s.json"
        script.write_text(json.dumps([{"text": "from a file"}]))
        proc = subprocess.Popen([sys.executable, "-m", "healer.testing.scripted_model",
                                 "--script", str(script)], stdout=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline() if proc.stdout else ""
            assert line.startswith("ANTHROPIC_BASE_URL=http://127.0.0.1:")
            url = line.strip().split("=", 1)[1]
            body = {"model": "m", "max_tokens": 10, "tools": TOOLS,
                    "messages": [{"role": "user", "content": "x"}]}
            resp = httpx.post(f"{url}/v1/messages", json=body, trust_env=False)
            assert resp.json()["content"][0]["text"] == "from a file"
        finally:
            proc.terminate()
            assert proc.wait(10) == 0

    def test_bad_script_is_exit_2(self, tmp_path: Path) -> None:
        """A script that is not a list of turns is a usage error."""
        script = tmp_path / "s.json"
        script.write_text('{"no": "turns"}')
        proc = subprocess.run([sys.executable, "-m", "healer.testing.scripted_model",
                               "--script", str(script)], capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 2 and "list of turns" in proc.stderr
