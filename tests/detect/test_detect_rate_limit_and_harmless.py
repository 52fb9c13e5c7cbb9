"""Generic HTTP 429 wordings raise T1 and look-alikes stay silent; the CTO healer's harmless
lines (ArgoCD's unconfigured notification triggers) are suppressed — on both engines."""

from __future__ import annotations

import pytest
from detect_helpers import by_line

from healer.detect.catalog import Catalog
from healer.detect.engine import Engine

RATE_LIMITED = [
    "Error: rate limit exceeded (429)",
    "Error: 429 Too Many Requests",
    "HTTP 429 rate limit exceeded",
    "2024-05-01T10:00:00Z level=error msg=\"github: too many requests\"",
    '{"level":"error","msg":"POST /v1/search failed: HTTP/1.1 429"}',
    "[ERROR] upstream answered status 429, giving up",
]
QUIET = [
    "0 rate limits hit",
    "rate_limit: 100/s",
    "level=info msg=\"config loaded\" rate_limit=100/s",
    "level=info msg=\"too many requests are answered with 429\"",
    "retry_status_code: 429",
    "test client::tests::backs_off_on_rate_limit_error ... ok",
    '{"level":"error","msg":"Failed to execute condition of trigger on-sync-succeeded: trigger '
    "'on-sync-succeeded' is not configured\"}",
    "time=\"2024-05-01T10:00:00Z\" level=error msg=\"trigger 'on-deployed' is not configured "
    "using the configuration in namespace argocd\"",
    '{"level":"error","msg":"sync done","errorMessages": []}',
    "2024-05-01 [ERROR] Register command extension for command error",
]


def _scan(engine: Engine, lines: list[str]) -> dict[int, set[str]]:
    return by_line(engine.scan_bytes(("\n".join(lines) + "\n").encode()))


def test_generic_429_wordings_are_t1(engine: Engine) -> None:
    assert _scan(engine, RATE_LIMITED) == {n: {"T1"} for n in range(1, len(RATE_LIMITED) + 1)}


def test_look_alikes_and_harmless_lines_stay_silent(engine: Engine) -> None:
    assert _scan(engine, QUIET) == {}


@pytest.mark.parametrize("line", QUIET[-4:])
def test_each_harmless_line_has_its_named_suppression(line: str) -> None:
    """The silence comes from a suppression, not from a pattern that happens to miss."""
    data = line.encode()
    assert any(s.compiled().search(data) for s in Catalog.load().suppressions), line
