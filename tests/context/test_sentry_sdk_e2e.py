"""The real sentry-sdk, its DSN pointed at a running `healer serve`, reports into incidents."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.testing.api import ServeProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
pytest.importorskip("sentry_sdk", reason="the test extra installs sentry-sdk")

KEY = "a1b2c3d4e5f60718293a4b5c6d7e8f90"

SDK_SCRIPT = """
import sys
import sentry_sdk

sys.path.insert(0, {shop!r})
from app.payment import average

sentry_sdk.init(dsn={dsn!r}, shutdown_timeout=10, {options})
for i in range({times}):
    try:
        average(10 + i, 0)
    except ZeroDivisionError as exc:
        sentry_sdk.set_user({{"id": "user-%d" % (i % 2), "email": "u%d@example.com" % i}})
        sentry_sdk.set_tag("shop.flow", "checkout")
        sentry_sdk.add_breadcrumb(category="cart", message="added item %d" % i)
        sentry_sdk.capture_exception(exc)
        sentry_sdk.flush(10)
{after}
sentry_sdk.flush(10)
"""


def run_sdk(shop: Path, dsn: str, *, times: int = 3, after: str = "", options: str = "",
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    code = SDK_SCRIPT.format(shop=str(shop), dsn=dsn, times=times, options=options,
                             after=textwrap.dedent(after))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.fixture
def healer(serve_env: Any) -> Iterator[ServeProcess]:
    s = ServeProcess(serve_env(HEALER_SENTRY_KEY=KEY, HEALER__CONTEXT__ENABLED="false",
                               HEALER__INGEST__RATE_BURST="5", HEALER__INGEST__RATE_PER_S="0.01"))
    yield s
    s.close()


def dsn(server: ServeProcess, key: str = KEY, project: int = 4) -> str:
    return re.sub(r"^http://", f"http://{key}@", server.url.rstrip("/")) + f"/{project}"


def incidents(server: ServeProcess) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = server.http.get("/api/v1/context/incidents").json()[
        "incidents"]
    return found


def metric(server: ServeProcess, result: str) -> float:
    """``healer_webhooks_total{source="sentry_sdk", result=...}``: requests that reached
    healer, by what became of them."""
    for line in server.http.get("/metrics").text.splitlines():
        if (line.startswith("healer_webhooks_total{") and 'source="sentry_sdk"' in line
                and f'result="{result}"' in line):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class TestPythonSdk:
    def test_three_captures_are_one_incident_with_the_culprit(self, healer: ServeProcess,
                                                              project: Path) -> None:
        """An exception captured 3 times by the SDK (gzip bodies) is one incident, count 3,
        naming the culprit file and function, with users counted and breadcrumbs kept."""
        done = run_sdk(project, dsn(healer), after="""
            sentry_sdk.capture_message("checkout took too long", level="error")
        """)
        assert done.returncode == 0, done.stderr

        def settled() -> Any:
            found = incidents(healer)
            code = [i for i in found if "ZeroDivisionError" in i["summary"]]
            msg = [i for i in found if "checkout took too long" in i["summary"]]
            return (code[0], msg[0]) if code and msg and code[0]["count"] == 3 else None

        code, msg = healer.wait_for(settled, timeout=60)
        assert len(incidents(healer)) == 2
        err = code["error"]
        assert err["file"] == "app/payment.py"
        assert err["function"] == "average"
        assert err["source"] == "sentry"
        assert code["count"] == 3 and code["first_seen"] <= code["last_seen"]
        assert code["summary"].startswith("ZeroDivisionError: ") and \
            "ZeroDivisionError: ZeroDivisionError" not in code["summary"]  # named once
        assert err["sentry"]["users"] == 2  # user-0 and user-1, counted, never stored
        assert "user-0" not in str(code) and "u0@example.com" not in str(code)
        assert any("added item 2" in b for b in err["sentry"]["breadcrumbs"])
        assert err["sentry"]["tags"]["shop.flow"] == "checkout"
        assert msg["error"]["message"] == "checkout took too long"
        # The SDK gzips its envelopes: what arrived was decoded.
        assert metric(healer, "accepted") >= 4

    def test_a_wrong_key_is_refused_and_nothing_is_stored(self, healer: ServeProcess,
                                                          project: Path) -> None:
        """The SDK with a key healer does not know gets 403; no incident appears, while the
        right key right after is filed."""
        done = run_sdk(project, dsn(healer, key="0" * 32), times=1)
        assert done.returncode == 0, done.stderr
        healer.wait_for(lambda: metric(healer, "forbidden") >= 1, timeout=30)
        assert incidents(healer) == []
        run_sdk(project, dsn(healer), times=1)
        healer.wait_for(lambda: incidents(healer), timeout=60)
        assert len(incidents(healer)) == 1

    def test_the_sdk_backs_off_after_a_429(self, healer: ServeProcess, project: Path) -> None:
        """Over the key's rate healer answers 429 with X-Sentry-Rate-Limits; the SDK stops
        sending errors, so fewer requests reach healer than events were captured."""
        done = run_sdk(project, dsn(healer), times=12)
        assert done.returncode == 0, done.stderr
        healer.wait_for(lambda: metric(healer, "rate_limited") >= 1, timeout=30)
        reached = metric(healer, "accepted") + metric(healer, "rate_limited")
        assert metric(healer, "accepted") == 5  # the burst
        assert reached < 12, f"{reached} requests reached healer: the SDK did not back off"


class TestHealedFromTheSdk:
    def test_an_sdk_error_waits_for_a_person_then_is_healed_to_a_pr(
            self, serve_env: Any, project: Path, tmp_path: Path, dirs: Any) -> None:
        """What a new user sees: `sentry_sdk.init(dsn=<healer>)` and nothing else. The DSN key
        is public, so the ZeroDivisionError becomes an anonymous code incident that waits for
        a person — the healing agent is never started. `healer approve` (the real CLI) starts
        it: the agent fixes app/payment.py in a worktree, the verifier passes it, a PR record
        is written, and the audit trail names who approved."""
        from context_helpers import BUGGY, GOOD_FIX, edit, plan

        agent = tmp_path / "agent"
        env = serve_env(plan=plan(agent, edit(BUGGY, GOOD_FIX)), HEALER_SENTRY_KEY=KEY)
        s = ServeProcess(env)
        try:
            done = run_sdk(project, dsn(s), times=1)
            assert done.returncode == 0, done.stderr

            def found(statuses: tuple[str, ...]) -> Any:
                hits = [i for i in incidents(s) if "ZeroDivisionError" in i["summary"]]
                return hits[0] if hits and hits[0]["status"] in statuses else None

            inc = s.wait_for(lambda: found(("open",)), timeout=60)
            assert inc["trust"] == "anonymous"
            assert inc["gate"]["reason"] == "awaiting_approval", inc["gate"]
            assert inc["attempts"] == [] and not list(agent.glob("prompt-*.md"))
            waiting = s.http.get("/api/v1/approvals").json()["waiting"]
            assert [w["id"] for w in waiting] == [inc["id"]]

            out = subprocess.run([sys.executable, "-m", "healer", "approve", inc["id"],
                                  "--by", "alice", "--comment", "looked at the trace"],
                                 env=env, capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert f"{inc['id']}: run approved by alice" in out.stdout
            assert "started: attempt" in out.stdout

            inc = s.wait_for(lambda: found(("fixed", "escalated")), timeout=120)
            assert inc["status"] == "fixed", inc.get("escalation")
            assert list(agent.glob("prompt-*.md"))  # the agent ran only after the approval
            prs = sorted((dirs.state / "forge" / "prs").glob("*.json"))
            assert prs and "app/payment.py" in prs[0].read_text()
            audit = s.http.get(f"/api/v1/incidents/{inc['id']}").json()["audit"]
            approved = [e for e in audit if e["event"] == "approved"]
            assert approved and approved[0]["by"] == "alice" and approved[0]["via"] == "cli"
            assert approved[0]["stage"] == "run" and approved[0]["comment"] == \
                "looked at the trace"
        finally:
            s.close()
