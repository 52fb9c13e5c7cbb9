"""Agent runtime failures are classified from what the CLIs really print.

Every case reads a recording (``tests/agents/cli_failures/``): the Claude Code CLI's plain and
stream-json output and stderr, and Codex's JSONL put together from its sources. The text forms
go through the detection catalog (what a play agent's logs meet); the stream-json forms through
``healer.agents.failures.from_result`` (what healer's own claude runs meet). Both must agree.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from healer.agents import failures
from healer.detect.catalog import Catalog
from healer.detect.engine import Engine

RECORDED = Path(__file__).parent / "cli_failures"
CLAUDE = {  # case → the code its output must get
    "rate_limit_429": "T1", "overloaded_529": "T2", "server_500": "T3", "network_refused": "T4",
    "auth_401": "X1", "permission_403": "X2", "billing_400": "X3",
    "context_overflow_400": "C1", "max_turns": "C2", "budget": "C3",
    "resume_missing": "S1", "session_in_use": "S2",
}
CODEX = {
    "rate_limit_429": "T1", "usage_limit_429": "T1", "overloaded": "T2", "server_500": "T2",
    "network_refused": "T4", "stream_disconnected": "T4", "auth_401": "X1",
    "permission_403": "X2", "cloudflare_403": "X2", "billing_quota": "X3",
    "context_overflow": "C1",
}


def _classified(lines: list[str]) -> list[str]:
    """The classified codes the detection engine raises, first catalog entry per line (what a
    play agent's runtime failure becomes)."""
    alerts = Engine(Catalog.embedded()).scan_lines(lines, source="agent")
    by_line: dict[int, str] = {}
    for a in sorted(alerts, key=lambda a: a.pattern.index if a.pattern else 0):
        if a.pattern is not None and a.pattern.failure_class:
            by_line.setdefault(a.line_no, a.code)
    return sorted(set(by_line.values()))


@pytest.mark.parametrize("case", sorted(CLAUDE))
def test_claude_code_plain_output_and_stderr_get_their_code(case: str) -> None:
    texts = [p.read_text() for p in sorted((RECORDED / "claude").glob(f"{case}.text*.txt"))]
    lines = [line for text in texts for line in text.splitlines()]
    assert _classified(lines) == [CLAUDE[case]]


@pytest.mark.parametrize("case", sorted(set(CLAUDE) - {"session_in_use"}))
def test_claude_code_stream_json_gets_the_same_code(case: str) -> None:
    path = RECORDED / "claude" / f"{case}.stream.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    # As the claude executor sees a run: its result, and the synthetic message's category.
    result = next(e for e in events if e.get("type") == "result")
    error = next((str(e["error"]) for e in events if e.get("type") == "assistant"
                  and e.get("error")), "")
    failure = failures.from_result(result, error=error)
    assert failure is not None and failure.code == CLAUDE[case]
    assert failure.cls == failures.class_of(CLAUDE[case])
    # The catalog sees the same run's lines the same way (an agent that logs stream-json).
    assert CLAUDE[case] in _classified(path.read_text().splitlines())


def test_a_session_in_use_prints_only_on_stderr() -> None:
    assert (RECORDED / "claude" / "session_in_use.stream.jsonl").read_text().strip() == ""
    stderr = (RECORDED / "claude" / "session_in_use.stream.stderr.txt").read_text()
    assert _classified(stderr.splitlines()) == ["S2"]


@pytest.mark.parametrize("case", sorted(CODEX))
def test_codex_exec_json_gets_its_code(case: str) -> None:
    lines = (RECORDED / "codex" / f"{case}.jsonl").read_text().splitlines()
    assert _classified(lines) == [CODEX[case]]


def test_codex_resume_failure_and_a_bare_turn_failure() -> None:
    stderr = (RECORDED / "codex" / "resume_missing.stderr.txt").read_text().splitlines()
    assert _classified(stderr) == ["S1"]
    bare = (RECORDED / "codex" / "turn_failed_no_detail.jsonl").read_text().splitlines()
    assert _classified(bare) == []  # no words to go on: not guessed at


def test_every_catalog_class_agrees_with_the_code_table() -> None:
    classified = [p for p in Catalog.embedded().patterns if p.failure_class]
    assert {p.code for p in classified} == set(failures.CODES) - {"K1"}  # K1: healer counts it
    for p in classified:
        assert p.failure_class == failures.class_of(p.code), p.id


def test_a_successful_run_is_no_failure() -> None:
    assert failures.from_result({"type": "result", "subtype": "success", "is_error": False,
                                 "result": "hello"}) is None


def test_retry_times_from_headers_and_text() -> None:
    now = 1_800_000_000.0
    assert failures.retry_at_from_headers({"Retry-After": "30"}, now) == now + 30
    assert failures.retry_at_from_headers(
        {"anthropic-ratelimit-requests-reset": "2027-01-15T08:00:10Z",
         "anthropic-ratelimit-tokens-reset": "2027-01-15T08:00:40+00:00"}, now) == 1800000040.0
    assert failures.retry_at_from_headers({"anthropic-ratelimit-unified-reset": "1800000099"},
                                          now) == 1800000099.0
    assert failures.retry_at_from_headers({}, now) is None
    assert failures.retry_at_from_text("Rate limited: try again in 2 minutes", now) == now + 120
    assert failures.retry_at_from_text("Claude AI usage limit reached|1800003600", now) == \
        1800003600.0
    assert failures.retry_at_from_text("API Error: Request rejected (429)", now) is None
    assert failures.retry_at_from_text("< retry-after: 7", now) == now + 7
    assert failures.retry_at_from_text(
        'headers {"anthropic-ratelimit-tokens-reset": "2027-01-15T08:00:40Z"}', now) == \
        1800000040.0
    assert [failures.backoff_s(n, base_s=30, cap_s=900) for n in (1, 2, 3, 6, 10)] == \
        [30, 60, 120, 900, 900]
