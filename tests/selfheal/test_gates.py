"""The gates through the service, in the reference order, with the seed's response shapes."""

from __future__ import annotations

import time
from typing import Any

import pytest
from selfheal_helpers import SEED_REPORT

from healer.core.gate import Policy, decide
from healer.selfheal import attempts as st
from healer.selfheal.gates import severity_verdict
from healer.selfheal.service import ReportInput


def report(n: int = 0, **kw: Any) -> dict[str, Any]:
    """A distinct (by call site) report that passes the severity gate."""
    return {"error_type": "KeyError", "error_message": "'user_id'",
            "call_site": f"src/app/mod{n}.py:handler", **kw}


def finish(service: Any, attempt_id: str, status: str) -> None:
    service.attempts.transition(attempt_id, st.INVESTIGATING)
    service.attempts.transition(attempt_id, status)


class TestResponses:
    def test_seed_example_is_accepted(self, service: Any) -> None:
        """The seed's example report is accepted with the seed's response shape."""
        launched: list[str] = []
        svc = service(launched=launched)
        out = svc.report(SEED_REPORT)
        assert out.keys() == {"accepted", "fingerprint", "attempt_id", "message"}
        assert out["accepted"] is True and out["message"] == "Healing agent dispatched"
        assert len(out["fingerprint"]) == 64
        assert launched == [out["attempt_id"]]
        att = svc.attempts.require(out["attempt_id"])
        assert att["status"] == "dispatch_pending"
        assert att["call_site"] == "src/butlers/modules/memory/tools/facts.py:memory_store_fact"
        assert att["severity"] == "high"

    def test_duplicate_joins(self, service: Any) -> None:
        """The same error again joins the running attempt: already_investigating, same id."""
        svc = service()
        first = svc.report(SEED_REPORT)
        again = svc.report({**SEED_REPORT, "context": "another agent, same bug"})
        assert again == {"accepted": False, "reason": "already_investigating",
                         "attempt_id": first["attempt_id"], "fingerprint": first["fingerprint"],
                         "message": "This error is already under investigation"}

    def test_open_pr_also_joins(self, service: Any) -> None:
        """While a fix PR is open the error counts as being handled."""
        svc = service()
        first = svc.report(report())
        finish(svc, first["attempt_id"], st.PR_OPEN)
        again = svc.report(report())
        assert again["reason"] == "already_investigating"
        assert again["attempt_id"] == first["attempt_id"]

    def test_bad_input_is_refused(self, service: Any) -> None:
        """Missing fields, wrong types and unknown hints are usage errors, not crashes."""
        from healer.errors import UsageError

        svc = service()
        for bad in ({"error_type": "X"}, {"error_type": "", "error_message": "m"},
                    {"error_type": "X", "error_message": 3},
                    {"error_type": "X", "error_message": "m", "severity_hint": "urgent"},
                    {"error_type": "X", "error_message": "m", "color": "red"}):
            with pytest.raises(UsageError):
                svc.report(bad)


class TestGateOrder:
    def test_cooldown_after_a_terminal_attempt(self, service: Any) -> None:
        """After an attempt ends, the same error is in cooldown for an hour."""
        svc = service()
        first = svc.report(report())
        finish(svc, first["attempt_id"], st.FAILED)
        again = svc.report(report())
        assert again["accepted"] is False and again["reason"] == "cooldown"
        assert again["message"].startswith("Cooldown period active")
        assert "attempt_id" not in again

    def test_cooldown_is_configurable(self, service: Any) -> None:
        """With selfheal.cooldown_s 0 a new attempt may start right away."""
        svc = service(cooldown_s=0)
        first = svc.report(report())
        finish(svc, first["attempt_id"], st.FAILED)
        assert svc.report(report())["accepted"] is True

    def test_concurrency_cap_at_two(self, service: Any) -> None:
        """Two attempts investigating: a third error is refused (concurrency_cap)."""
        svc = service()
        assert svc.report(report(1))["accepted"] and svc.report(report(2))["accepted"]
        third = svc.report(report(3))
        assert third["reason"] == "concurrency_cap"
        # A duplicate of a running one still joins: novelty comes before the cap.
        assert svc.report(report(1))["reason"] == "already_investigating"

    def test_cap_frees_when_an_attempt_ends(self, service: Any) -> None:
        """A slot frees as soon as an attempt stops investigating (pr_open counts as ended)."""
        svc = service()
        a = svc.report(report(1))
        svc.report(report(2))
        finish(svc, a["attempt_id"], st.PR_OPEN)
        assert svc.report(report(3))["accepted"] is True

    def test_breaker_after_five_failures(self, service: Any) -> None:
        """Five failed/timeout/anonymization_failed attempts in a row open the breaker."""
        svc = service()
        endings = [st.FAILED, st.TIMEOUT, st.ANONYMIZATION_FAILED, st.FAILED, st.FAILED]
        for n, status in enumerate(endings):
            out = svc.report(report(n))
            assert out["accepted"], out
            finish(svc, out["attempt_id"], status)
        refused = svc.report(report(99))
        assert refused["reason"] == "circuit_breaker"
        assert refused["message"].startswith("Circuit breaker open")

    def test_unfixable_does_not_count(self, service: Any) -> None:
        """Unfixable attempts neither trip the breaker nor reset it."""
        svc = service()
        for n in range(4):
            out = svc.report(report(n))
            finish(svc, out["attempt_id"], st.FAILED)
        out = svc.report(report(10))
        finish(svc, out["attempt_id"], st.UNFIXABLE)
        assert svc.report(report(11))["accepted"] is True

    def test_a_success_resets_the_breaker(self, service: Any) -> None:
        """A PR opened between failures keeps the breaker closed."""
        svc = service()
        for n, status in enumerate([st.FAILED] * 4 + [st.PR_OPEN] + [st.FAILED] * 4):
            out = svc.report(report(n))
            assert out["accepted"], (n, out)
            finish(svc, out["attempt_id"], status)
        assert svc.report(report(50))["accepted"] is True

    def test_rejections_do_not_feed_the_breaker(self, service: Any) -> None:
        """Cooldown, cap and no-model rejections leave the breaker's record alone."""
        svc = service(agent=None)
        for n in range(10):
            assert svc.report(report(n))["reason"] == "no_model"
        assert svc.attempts.admission()["outcomes"] == []

    def test_no_model(self, service: Any) -> None:
        """Without an executor able to run the healing agent: no_model."""
        out = service(agent=None).report(report())
        assert out["reason"] == "no_model" and out["accepted"] is False

    def test_disabled(self, service: Any) -> None:
        """selfheal.enabled false refuses everything (disabled)."""
        assert service(enabled=False).report(report())["reason"] == "disabled"

    def test_severity_threshold(self, service: Any) -> None:
        """Below the threshold (info, low) is refused; the threshold is configurable."""
        svc = service()
        cancelled = svc.report({"error_type": "asyncio.CancelledError", "error_message": ""})
        assert cancelled["reason"] == "below_threshold"
        limited = svc.report({"error_type": "httpx.HTTPStatusError",
                              "error_message": "429 Too Many Requests"})
        assert limited["reason"] == "below_threshold"
        assert service(severity_threshold=4).report(
            {"error_type": "asyncio.CancelledError", "error_message": ""})["accepted"]


class TestRecursion:
    def test_env_marker(self, service: Any) -> None:
        """A process with HEALER_HEALING_RUN set (a healing agent) is never healed."""
        svc = service(env={"HEALER_HEALING_RUN": "1"})
        assert svc.report(report())["reason"] == "recursion"

    def test_body_flag(self, service: Any) -> None:
        """A report that says it comes from a healing run is refused."""
        assert service().report(report(healing_run=True))["reason"] == "recursion"

    def test_recursion_comes_first(self, service: Any) -> None:
        """Recursion is checked before everything else, even when disabled."""
        svc = service(enabled=False, env={"HEALER_HEALING_RUN": "1"})
        assert svc.report(report())["reason"] == "recursion"


class TestSeverity:
    @pytest.mark.parametrize(("etype", "msg", "hint", "want"), [
        ("asyncio.CancelledError", "", "critical", 4),
        ("KeyboardInterrupt", "", None, 4),
        ("DeprecationWarning", "old", None, 4),
        ("httpx.ReadTimeout", "", "high", 3),
        ("RuntimeError", "rate limit exceeded", None, 3),
        ("RuntimeError", "possible data loss in writer", None, 0),
        ("KeyError", "'x'", "low", 1),
        ("asyncpg.exceptions.UndefinedTableError", "relation missing", None, 1),
        ("RuntimeError", "odd", None, 2),
        ("RuntimeError", "odd", "critical", 0),
        ("RuntimeError", "odd", "low", 3),
    ])
    def test_verdicts(self, etype: str, msg: str, hint: str | None, want: int) -> None:
        """The verdict comes from the error; a hint only refines a medium verdict."""
        assert severity_verdict(etype, msg, hint) == want


class TestDecide:
    def test_half_open_breaker(self) -> None:
        """Long after the last failure, with nothing running, one attempt may try again."""
        now = time.time()
        adm = {"active": {}, "open_prs": {}, "ended": {},
               "outcomes": [{"status": "failed", "at": now - 7200}] * 5}
        limits = Policy(breaker_reset_s=3600)
        assert decide(adm, "f" * 64, now, limits, lambda: True).accepted
        adm["outcomes"][-1] = {"status": "failed", "at": now - 60}
        assert decide(adm, "f" * 64, now, limits, lambda: True).reason == "circuit_breaker"

    def test_model_is_asked_last(self) -> None:
        """The model check runs only when every other gate passed."""
        asked: list[bool] = []
        adm = {"active": {"a" * 64: {"attempt_id": "x", "since": 0}}, "open_prs": {},
               "ended": {}, "outcomes": []}
        decide(adm, "a" * 64, time.time(), Policy(), lambda: asked.append(True) or True)
        assert asked == []

    def test_report_input_from_mapping(self) -> None:
        """None values count as absent (MCP and JSON send nulls)."""
        r = ReportInput.from_mapping({"error_type": "E", "error_message": "m", "traceback": None})
        assert r.traceback == ""


class TestClaimAndRecord:
    def test_a_failed_write_after_admission_frees_its_slot(self, service: Any) -> None:
        """Two reports whose attempt record cannot be written (the disk, a bug) must not jam
        the concurrency cap: the next report is still admitted."""
        service = service()
        assert service.settings.selfheal.max_concurrent == 2
        real_create = service.attempts.create
        failing = [True, True]

        def create(attempt_id: str, data: dict[str, Any]) -> dict[str, Any]:
            if failing:
                failing.pop()
                raise OSError(28, "No space left on device")
            return real_create(attempt_id, data)

        service.attempts.create = create
        for n in (1, 2):
            with pytest.raises(OSError):
                service.report(report(n))
        assert service.attempts.admission()["active"] == {}
        out = service.report(report(3))
        assert out["accepted"] is True, out
        assert list(service.attempts.admission()["active"]) == [out["fingerprint"]]
        # The failed ones start no cooldown either: the same error may be reported again.
        assert service.report(report(1))["accepted"] is True


class TestHeldReports:
    def test_a_report_held_by_the_cap_starts_when_a_slot_frees(self, service: Any) -> None:
        """The cap holds a third error back; once an attempt ends, the loop's retry starts
        it — the same incident, its first attempt — without anyone reporting it again."""
        launched: list[str] = []
        svc = service(launched=launched)
        first, second = svc.report(report(1)), svc.report(report(2))
        third = svc.report(report(3))
        assert third["reason"] == "concurrency_cap"
        assert svc.retry_held() == []  # still full: nothing changes, nothing is written
        finish(svc, first["attempt_id"], st.PR_OPEN)
        [started] = svc.retry_held()
        assert launched == [first["attempt_id"], second["attempt_id"], started]
        att = svc.attempts.require(started)
        assert att["fingerprint"] == third["fingerprint"]
        assert att["call_site"] == "src/app/mod3.py:handler"
        inc = svc.ledger.find("code", third["fingerprint"])
        assert inc is not None and inc["status"] == "healing" and inc["attempts"] == 1
        assert inc["rejections"] == {"concurrency_cap": 1}
        assert svc.retry_held() == []  # healing now: not retried twice
