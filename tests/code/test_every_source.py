"""Every source of a code error ends in the same attempt record and the same verification.

One test per source × case, each through the real server or CLI (``sources.Rig``) with the
real Claude Code CLI driven by the scripted model:

* ``fix`` — the agent adds a failing test reproducing the error and fixes the code: the
  attempt is ``pr_open``, verified, and the PR body shows the reproduction before the fix and
  the verification after it;
* ``wrong`` — the agent adds the test and a fix that breaks an existing test: ``failed``, no
  PR, and the incident says why;
* ``edits_tests`` — the agent rewrites an existing test so it passes without a fix:
  ``failed``, no PR.

One case per source runs by default; the rest are ``slow``. A rig that cannot drive its
source raises ``HarnessError`` — a failure, never an expected one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sources import INTAKE, REPRO_FILE, HarnessError, Outcome, rig

from healer.agents.executors import claude_cli
from healer.config import load_settings

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

BEFORE = "### Reproduction (before the fix)"
AFTER = "### Verification (after the fix)"

# One case per source in the default suite (each case twice); the others are `exhaustive`
# (`make test-all`).
DEFAULT = {("report_http", "fix"), ("report_cli", "wrong"), ("sentry", "fix"),
           ("alertmanager", "edits_tests"), ("slack", "wrong"), ("loki", "edits_tests")}


def cases() -> Iterator[Any]:
    for source in INTAKE:
        for case in ("fix", "wrong", "edits_tests"):
            marks = [] if (source, case) in DEFAULT else [pytest.mark.slow, pytest.mark.exhaustive]
            yield pytest.param(source, case, marks=marks, id=f"{source}-{case}")


@pytest.fixture(autouse=True)
def _needs_cli() -> None:
    if claude_cli(load_settings(env={})) is None:
        pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")


def strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON document."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def says_why(out: Outcome) -> str:
    """No PR, the attempt failed on a rejected iteration, and the reason it ended is on the
    record and on the incident. Returns every reason given, for the case to look into."""
    att = out.attempt
    assert out.prs == [], [pr.get("title") for pr in out.prs]
    assert att["status"] == "failed", (att["status"], att.get("reason"))
    assert (att.get("verification") or {}).get("passed") is not True
    last = att["iterations"][-1]
    assert last["verdict"] == "rejected" and last["reasons"], att["iterations"]
    reason = " ".join((att.get("reason") or "").split())
    assert reason
    # The incident may frame it in words of its own: some 40 characters of it will do.
    shown = [" ".join(s.split()) for s in strings(out.status_json)]
    pieces = [reason[i:i + 40] for i in range(0, max(1, len(reason) - 39), 10)]
    assert any(p in s for p in pieces for s in shown), (reason, out.status_json)
    return "\n".join([reason, *map(str, last["reasons"]),
                      *map(str, (att.get("verification") or {}).get("reasons") or [])])


@pytest.mark.parametrize(("source", "case"), list(cases()))
def test_every_source(source: str, case: str, tmp_path: Path) -> None:
    with rig(tmp_path, case) as r:
        r.drive(source)
        out = r.outcome()
        if out.model_turns == 0:
            raise HarnessError(f"the agent never ran: {out.attempt}")
        check(source, case, out)


def check(source: str, case: str, out: Outcome) -> None:
    att = out.attempt
    assert att.get("source") == INTAKE[source], att.get("source")
    if case == "fix":
        assert att["status"] == "pr_open", (att["status"], att.get("reason"))
        assert att["iterations"][-1]["verdict"] == "verified", att["iterations"]
        ver = att["verification"]
        assert ver["passed"] is True and not ver["reasons"], ver
        repro = att["reproduction"]
        assert repro["files"] == [REPRO_FILE] and repro["reproduced"] is True, repro
        assert repro["before"]["exit"] != 0 and "ZeroDivisionError" in repro["before"]["output"]
        assert ver["reproduction_after"]["exit"] == 0, ver["reproduction_after"]
        assert ver["suite_after"]["exit"] == 0, ver["suite_after"]
        (pr,) = out.prs
        body = pr["body"]
        assert BEFORE in body and AFTER in body, body
        assert body.index(BEFORE) < body.index(AFTER)
        assert att["pr_url"] and att["branch"] == pr["head"]
        diff = Path(pr["diff_file"]).read_text()
        assert REPRO_FILE in diff and "if count else 0" in diff
    elif case == "wrong":
        says_why(out)
        # The reproduction passes with ``return 0``; the test that passed on base does not.
        assert att["reproduction"]["files"] == [REPRO_FILE]
        assert att["verification"]["suite_after"]["exit"] != 0, att["verification"]
    else:
        why = says_why(out)
        assert "edits the tests" in why, why
