"""Trust by source, a person's approval and the flood limits, in core: pure decisions over
dicts, applied by the ledger in one compare-and-set. Time is passed in, never slept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from healer.core import approval, gate, trust
from healer.core.audit import Audit
from healer.core.gate import AWAITING_APPROVAL, Decision, Policy
from healer.core.incidents import Ledger, Signal, public_view
from healer.core.store import FileStore
from healer.errors import ApprovalError


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "state")


def signal(key: str = "k", **kw: Any) -> Signal:
    return Signal(kind="code", key=key, source=kw.pop("source", "test"), **kw)


class TestTrustOfIncidents:
    def test_an_incident_is_anonymous_until_a_trusted_source_reports_it(
            self, store: FileStore) -> None:
        book = Ledger(store, clock=Clock())
        first = book.receive(signal(source="sentry_sdk")).incident
        assert first is not None and first["trust"] == trust.ANONYMOUS
        assert store.members(trust.ANONYMOUS_SET) == [first["id"]]
        again = book.receive(signal(source="alertmanager", trust=trust.TRUSTED)).incident
        assert again is not None and again["trust"] == trust.TRUSTED
        assert any(h["event"] == "trusted" for h in again["history"])
        assert store.members(trust.ANONYMOUS_SET) == []  # no longer counts against the cap
        # Once trusted, an anonymous repeat does not take it back.
        assert book.receive(signal(source="sentry_sdk")).incident["trust"] == trust.TRUSTED

    def test_the_view_says_the_trust_and_how_many_reporters_never_who(
            self, store: FileStore) -> None:
        book = Ledger(store, clock=Clock())
        book.receive(signal(reporters=("u:aaa", "r:1.0")))
        data = book.receive(signal(reporters=("u:bbb", "u:aaa"))).incident
        assert data is not None
        view = public_view(data)
        assert view["trust"] == "anonymous" and view["reporters"] == 3
        assert "u:aaa" not in str(view)

    def test_a_resolved_anonymous_incident_leaves_the_set(self, store: FileStore) -> None:
        book = Ledger(store, clock=Clock())
        book.receive(signal())
        book.resolve("code-k", "source")
        assert store.members(trust.ANONYMOUS_SET) == []


class TestFloodLimits:
    def test_a_bucket_allows_its_hour_then_refills(self) -> None:
        state: dict[str, Any] | None = None
        allowed = 0
        for _ in range(10):
            ok, state = trust.take(state, 0.0, 4)
            allowed += ok
        assert allowed == 4 and state["refused"] == 6
        ok, state = trust.take(state, 899.0, 4)  # 1 token takes 900 s at 4/h
        assert not ok
        ok, state = trust.take(state, 901.0, 4)
        assert ok

    def test_the_cap_on_open_anonymous_incidents_comes_first(self, store: FileStore) -> None:
        book = Ledger(store, clock=Clock())
        policy = trust.FloodPolicy(new_per_hour=100, max_open_anonymous=2)
        for key in ("a", "b"):
            assert trust.admit_new(store, "dsn-1-x", policy, 0.0) == ""
            book.receive(signal(key))
        assert trust.admit_new(store, "dsn-1-x", policy, 0.0) == trust.ANONYMOUS_CAP
        assert trust.admit_new(store, "api", policy, 0.0) == trust.ANONYMOUS_CAP

    def test_each_origin_has_its_own_bucket(self, store: FileStore) -> None:
        policy = trust.FloodPolicy(new_per_hour=2, max_open_anonymous=0)
        got = [trust.admit_new(store, "dsn-1-aaa", policy, 0.0) for _ in range(3)]
        assert got == ["", "", trust.NEW_INCIDENT_LIMIT]
        assert trust.admit_new(store, "dsn-1-bbb", policy, 0.0) == ""
        off = trust.FloodPolicy(new_per_hour=0, max_open_anonymous=0)
        assert all(trust.admit_new(store, "dsn-1-aaa", off, 0.0) == "" for _ in range(5))

    def test_what_a_limit_drops_is_counted(self, store: FileStore) -> None:
        book = Ledger(store, clock=Clock())
        for _ in range(3):
            book.dropped("sentry_sdk", trust.NEW_INCIDENT_LIMIT)
        book.flush()
        assert Ledger(store).stats()["dropped"] == {"sentry_sdk": {"new_incident_limit": 3}}

    def test_a_dsn_key_is_never_stored_in_its_bucket_name(self) -> None:
        name = trust.dsn_origin("4", "a1b2c3d4e5f60718293a4b5c6d7e8f90")
        assert name.startswith("dsn-4-") and "a1b2c3d4" not in name


class TestApprovalStep:
    @pytest.mark.parametrize(("mode", "level", "asks"), [
        ("anonymous", "anonymous", True), ("anonymous", "trusted", False),
        ("always", "trusted", True), ("always", "anonymous", True),
        ("never", "anonymous", False), ("never", "trusted", False)])
    def test_the_mode_decides_who_waits(self, mode: str, level: str, asks: bool) -> None:
        step = approval.run_step({"id": "code-k", "status": "open"}, level,
                                 approval.Policy(mode=mode))
        assert (step is not None) == asks
        if step is not None:
            assert step.reason == AWAITING_APPROVAL and "healer approve code-k" in step.message

    def test_an_approval_admits_one_attempt(self, store: FileStore) -> None:
        clock = Clock()
        book = Ledger(store, clock=clock)
        policy = approval.Policy()
        book.receive(signal(), decision=Decision(AWAITING_APPROVAL, "wait"))
        data = book.judge("code-k", approval.Verdict("run", True, "alice", "cli", clock()),
                          policy)
        assert approval.ready(data) and approval.run_step(data, "anonymous", policy) is None
        book.started("code-k", "a1", "healing")
        data = book.require("code-k")
        assert approval.records(data)["run"]["attempt_id"] == "a1"
        assert not approval.ready(data)
        book.attempt_ended("code-k", "a1", "failed")
        # The next attempt asks a person again.
        assert approval.run_step(book.require("code-k"), "anonymous", policy) is not None

    def test_two_approvals_of_one_wait_one_wins(self, store: FileStore) -> None:
        book = Ledger(store, clock=Clock())
        book.receive(signal(), decision=Decision(AWAITING_APPROVAL, "wait"))
        book.judge("code-k", approval.Verdict("run", True, "alice", "cli", 1.0),
                   approval.Policy())
        book.decided("code-k", Decision(gate.CONCURRENCY_CAP, "full"))
        with pytest.raises(ApprovalError, match="approved already, by alice"):
            book.judge("code-k", approval.Verdict("run", True, "bob", "api", 2.0),
                       approval.Policy())

    def test_a_denial_resolves_and_is_audited(self, store: FileStore, tmp_path: Path) -> None:
        audit = Audit(tmp_path / "state")
        book = Ledger(store, clock=Clock(), audit=audit)
        book.receive(signal(), decision=Decision(AWAITING_APPROVAL, "wait"))
        data = book.judge("code-k", approval.Verdict("run", False, "carol", "dashboard", 5.0,
                                                      "junk"), approval.Policy())
        assert data["status"] == "resolved" and data["resolved_by"] == "run denied by carol"
        [rec] = [e for e in audit.read("code-k") if e["event"] == "denied"]
        assert (rec["by"], rec["via"], rec["stage"], rec["comment"]) == \
            ("carol", "dashboard", "run", "junk")
        # Firing again reopens it, and it waits for a person again.
        again = book.receive(signal())
        assert again.action == "reopened"
        assert approval.run_step(again.incident, "anonymous", approval.Policy()) is not None

    def test_eligibility_needs_events_from_distinct_reporters(self, store: FileStore) -> None:
        book = Ledger(store, clock=Clock())
        policy = approval.Policy(min_events=3, min_distinct=2)
        wait = Decision(AWAITING_APPROVAL, "wait")
        book.receive(signal(reporters=("u:a",)), decision=wait)
        book.receive(signal(reporters=("u:a",)), decision=wait)
        data = book.require("code-k")
        assert approval.waiting([data], policy) == []
        with pytest.raises(ApprovalError, match="not eligible yet"):
            book.judge("code-k", approval.Verdict("run", True, "a", "cli", 1.0), policy)
        book.receive(signal(reporters=("r:2.0",)), decision=wait)
        [item] = approval.waiting([book.require("code-k")], policy)
        assert (item["stage"], item["count"], item["distinct"]) == ("run", 3, 2)

    def test_a_held_publication_waits_before_the_run(self, store: FileStore) -> None:
        book = Ledger(store, clock=Clock())
        book.receive(signal(trust=trust.TRUSTED))
        book.started("code-k", "a1", "healing")
        data = book.held("code-k", "a1", ["touches CI or automation: .github/x.yml"])
        assert data is not None and data["status"] == "fixed"
        assert approval.waiting_stage(data) == "publish"
        with pytest.raises(ApprovalError, match="publish stage waits"):
            book.judge("code-k", approval.Verdict("run", True, "a", "cli", 1.0),
                       approval.Policy())
        data = book.judge("code-k", approval.Verdict("publish", True, "a", "cli", 1.0),
                          approval.Policy())
        rec = approval.records(data)["publish"]
        assert rec["verdict"] == "approved" and rec["attempt_id"] == "a1"
        data = book.publish_failed("code-k", "forge down")
        assert approval.waiting_stage(data or {}) == "publish"


class TestBreakerLanes:
    def test_anonymous_failures_never_open_the_trusted_breaker(self, store: FileStore) -> None:
        policy = Policy(kind="code", breaker_window=2, max_concurrent=5)
        anonymous = Policy(kind="code", breaker_window=2, max_concurrent=5,
                           lane=trust.ANONYMOUS_LANE)
        for n in range(2):
            gate.settle(store, f"junk{n}", f"j{n}", now=10.0, kind="code", ended=True,
                        outcome="failed", breaker=True, lane=trust.ANONYMOUS_LANE)
        adm = gate.admission(store)
        assert gate.decide(adm, "junk9", 11.0, anonymous, lambda: True).reason == \
            gate.CIRCUIT_BREAKER
        assert gate.decide(adm, "real", 11.0, policy, lambda: True).accepted


def test_only_code_signals_are_anonymous_unless_their_intake_says_otherwise() -> None:
    """Play and fleet signals come from healer's own watchers and probes: trusted, so they
    never count against code.max_open_anonymous."""
    assert Signal(kind="code", key="k", source="s").trust == trust.ANONYMOUS
    assert Signal(kind="play", key="k", source="play").trust == trust.TRUSTED
    assert Signal(kind="fleet", key="k", source="heartbeat").trust == trust.TRUSTED
    assert Signal(kind="fleet", key="k", source="x", trust="anonymous").trust == "anonymous"
