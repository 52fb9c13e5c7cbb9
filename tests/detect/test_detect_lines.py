"""The line model: prefixes stripped, the level read from every common format, transcripts."""

from __future__ import annotations

import pytest

from healer.detect.lines import LOG, SPEECH, view

LEVELS = [
    (b'{"level":"info","msg":"timeout"}', "info"),
    (b'{"severity":"ERROR","msg":"x"}', "error"),
    (b'{"lvl":"warn","msg":"x"}', "warn"),
    (b'{"levelname":"CRITICAL","msg":"x"}', "fatal"),
    (b'{"level":30,"msg":"pino info"}', "info"),
    (b'{"level":50,"msg":"pino error"}', "error"),
    (b'ts=1 level=debug msg="timeout=30s"', "debug"),
    (b'time=1 lvl=error msg=boom', "error"),
    (b"[INFO] retrying after timeout", "info"),
    (b"<warn> disk almost full", "warn"),
    (b"INFO:app.http:request timeout configured", "info"),
    (b"2024-05-01 10:00:00,123 - app - WARNING - slow", "warn"),
    (b"2024-05-01T10:00:00.123456Z  INFO hyper::client: connection refused", "info"),
    (b"[2024-05-01T10:00:00Z ERROR worker] panicked at src/main.rs:3", "error"),
    (b"I0501 10:00:00.000001       1 controller.go:12] timeout", "info"),
    (b"E0501 10:00:00.000001       1 controller.go:12] timeout", "error"),
    (b"F0501 10:00:00.000001       1 controller.go:12] boom", "fatal"),
    (b"<11>May  1 10:00:00 host app: failed", "error"),
    (b"<14>May  1 10:00:00 host app: timeout configured", "info"),
    (b"thread 'main' panicked at src/main.rs:3:5", ""),
    (b"the request hit an error and a timeout", ""),  # words, not a level
]


@pytest.mark.parametrize(("line", "level"), LEVELS)
def test_levels(line: bytes, level: str) -> None:
    assert view(line).level == level


@pytest.mark.parametrize(("line", "source", "body"), [
    (b"[pod/rex-7f9c/agent] 2024-05-01T10:00:00.123Z INFO hello", "pod/rex-7f9c/agent",
     b"INFO hello"),
    (b"web-1  | test handles_timeout ... ok", "web-1", b"test handles_timeout ... ok"),
    (b"2024-05-01T10:00:00.123456789Z [pod/a/b] x", "pod/a/b", b"x"),
    (b"\x1b[32m[pod/a/b]\x1b[0m plain", "pod/a/b", b"plain"),
    (b"no prefix | at all? yes", "", b"no prefix | at all? yes"),
])
def test_prefixes(line: bytes, source: str, body: bytes) -> None:
    v = view(line)
    assert (v.source, v.body) == (source, body)


@pytest.mark.parametrize(("line", "part", "level"), [
    (b'{"type":"assistant","message":{"content":[{"type":"text","text":"timeout"}]}}',
     SPEECH, "info"),
    (b'{"type":"user","message":{"content":[{"type":"tool_result","is_error":true,'
     b'"content":"connection refused"}]}}', LOG, "error"),
    (b'{"type":"user","message":{"content":[{"type":"tool_result","is_error":false,'
     b'"content":"3 tests passed; timeout test ok"}]}}', SPEECH, "info"),
    (b'{"type":"result","subtype":"error_max_turns","is_error":true}', LOG, "error"),
    (b'{"type":"result","subtype":"success","is_error":false}', LOG, "info"),
    (b'{"msg":{"type":"agent_message","message":"panicked at"}}', SPEECH, "info"),
    (b'{"type":"item.completed","item":{"type":"command_execution","exit_code":1}}',
     LOG, "error"),
    (b'{"type":"turn.failed","error":{"message":"rate limited"}}', LOG, "error"),
])
def test_transcripts(line: bytes, part: str, level: str) -> None:
    v = view(line)
    assert (v.part, v.level) == (part, level)
