"""Play remediations survive their replica: a remediation's run holds a lease, and when its
replica stops renewing it — dead, cut off, or stopped cleanly — another replica's takeover
resumes the cycle where it was (attempts already made count, the evaluation is not repeated,
the same gate claim) and it ends once: one escalation, or one resolution. The run that lost
its lease writes nothing more, and start-up recovery leaves another replica's live run alone.

Two (or three) ``PlayService`` objects on one state folder stand for replicas; a watcher's
alert (``AlertSink``) starts the remediation, as the Kubernetes watcher does. Lease expiry
follows an injected clock; the lease time is long in real time, so a run renews only when a
test says so (the renewal tests use a short one and the real clock). The end-to-end check —
three ``healer loop`` processes on a NATS cluster, kill -9 of the one running it — is
``tests/core/test_failover.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from healer.agents.task import AgentTask, RunOutcome
from healer.config import load_settings
from healer.core import gate
from healer.core.incidents import INCIDENTS
from healer.core.lease import KIND as LEASES
from healer.core.store import FileStore, Record
from healer.errors import StoreError
from healer.overview import _play, overview, render
from healer.play import remediate
from healer.play.alerts import AlertSink, PlayAlert
from healer.play.ownership import lease_name
from healer.play.remediate import MAX_TAKEOVERS
from healer.play.service import PlayService
from healer.testing.replicas import seed_incidents
from healer.testing.wait import until

TTL_S = 30.0
START = 1_800_000_000.0
ALERT = PlayAlert(code="A5", play_id="play-task-3-ha", agent="cleo", target="pr/o/r#3",
                  severity="warning", summary="CI failed after approval",
                  issue_type="build_failure")


class Agent:
    """Every agent run of one replica: noted by kind; run number ``hold_at`` (1: the
    evaluation, 2: remediation 1, …) waits until ``let_go`` — the replica is stuck there."""

    def __init__(self, hold_at: int = 0):
        self.kinds: list[str] = []
        self.hold_at = hold_at
        self.held = asyncio.Event()
        self.let_go = asyncio.Event()

    async def run(self, task: AgentTask) -> RunOutcome:
        self.kinds.append(task.kind)
        if len(self.kinds) == self.hold_at:
            self.held.set()
            await self.let_go.wait()
        return RunOutcome(run_id=f"run-{len(self.kinds)}", agent=task.agent, executor="fake",
                          status="failed", result_path="",
                          result={"status": "failed", "summary": "nothing fixed"}, error="",
                          duration_s=0.0)


class FlakyStore(FileStore):
    """The file store, whose writes of the kinds in ``down`` fail (the store is away)."""

    down: frozenset[str] = frozenset()

    def put(self, kind: str, key: str, data: dict[str, Any], **kw: Any) -> Record:
        if kind in self.down:
            raise StoreError("JetStream did not answer within 10.0s")
        return super().put(kind, key, data, **kw)


class Replica:
    def __init__(self, tmp_path: Path, name: str, clock: Callable[[], float], *,
                 hold_at: int = 0, ttl_s: float = TTL_S, reevaluate_after_s: float = 0.0,
                 rounds: int = 2, store: FileStore | None = None):
        settings = load_settings(env={}, overrides={
            "state_dir": str(tmp_path / "state"), "results_dir": str(tmp_path / "results"),
            "fleet_dir": str(tmp_path / "fleet"), "node_id": name,
            "play": {"reevaluate_after_s": reevaluate_after_s, "max_iterations": rounds}})
        settings.ha.lease_ttl_s = ttl_s  # below the setting's minimum in the renewal tests
        self.fleet = settings.fleet_path
        self.agent = Agent(hold_at)
        self.store = store or FileStore(tmp_path / "state")
        self.play = PlayService(settings, self.store, run_agent=self.agent.run, clock=clock,
                                owner=f"{name}/1")

    def fire(self) -> None:
        AlertSink.for_play(self.play).fire(ALERT)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def remediation(store: FileStore) -> dict[str, Any]:
    """The one remediation record ({} before there is one)."""
    recs = [rec.data for rec in store.list(remediate.KIND)]
    assert len(recs) <= 1
    return recs[0] if recs else {}


def lease_of(store: FileStore) -> dict[str, Any] | None:
    """The remediation's lease record (None: none)."""
    [key] = store.keys(remediate.KIND)
    rec = store.get(LEASES, lease_name(key))
    return rec.data if rec else None


def incident(store: FileStore) -> dict[str, Any]:
    [rec] = list(store.list(INCIDENTS))
    return rec.data


def snapshot(store: FileStore) -> dict[str, int]:
    """The revision of every record a remediation writes (the remediation, its incident, the
    gate's admission record, its lease)."""
    out = {f"{r.kind}/{r.key}": r.revision for kind in (remediate.KIND, INCIDENTS)
           for r in store.list(kind)}
    adm = store.get(gate.ADMISSION, gate.GATE_KEY)
    out["admission"] = adm.revision if adm else 0
    [key] = store.keys(remediate.KIND)
    lease = store.get(LEASES, lease_name(key))
    out["lease"] = lease.revision if lease else 0
    return out


def escalations(r: Replica) -> int:
    return sum(seed_incidents(r.fleet).values())


def events(store: FileStore) -> list[str]:
    return [h["event"] for h in incident(store).get("history", [])]


def claims(store: FileStore) -> dict[str, Any]:
    return dict(gate.admission(store)["active"])


async def test_a_remediation_whose_replica_stopped_is_resumed_elsewhere_and_ends_once(
        tmp_path: Path) -> None:
    """A is stuck in remediation 2 (1 is recorded) and stops renewing; once its lease
    expired, B's takeover resumes at remediation 2 — no second evaluation — and escalates
    once. A, coming back, writes nothing."""
    clock = Clock()
    a = Replica(tmp_path, "a", clock, hold_at=3)
    b = Replica(tmp_path, "b", clock)
    a.fire()
    await asyncio.wait_for(a.agent.held.wait(), 10)
    running = remediation(a.store)
    assert running["status"] == "running" and running["owner"]["holder"] == "a/1"
    assert running["evaluated"] and len(running["attempts"]) == 1
    assert running["round"]["n"] == 2
    [shown] = _play(b.store)["remediations"]  # `healer status`: who runs it, how far
    assert (shown["owner"], shown["rounds"], shown["taken_over"]) == ("a/1", 1, False)
    assert "1 round(s) done on a/1, since" in render(overview(b.play.settings, b.store))
    assert await b.play.take_over() == 0  # A's lease still holds

    clock.now += TTL_S + 1
    assert await b.play.take_over() == 1
    await b.play.wait_idle(10)
    assert b.agent.kinds == ["remediation"]  # remediation 2 only
    done = remediation(b.store)
    assert done["status"] == "escalated" and len(done["attempts"]) == 2
    assert done["taken_over"]["from"] == "a/1" and done["owner"]["holder"] == "b/1"
    assert escalations(a) == 1
    found = incident(b.store)
    assert found["status"] == "escalated"
    assert "remediation_taken_over" in events(b.store)
    assert found["taken_over"]["from"] == "a/1"
    assert claims(b.store) == {}
    assert lease_of(b.store) is None  # given back

    before = snapshot(a.store)
    a.agent.let_go.set()  # A comes back, its remediation 2 ended
    assert await a.play.wait_idle(10)
    assert snapshot(a.store) == before
    assert escalations(a) == 1
    assert a.agent.kinds == ["evaluation", "remediation", "remediation"]


async def test_another_replica_neither_recovers_nor_repeats_a_live_run(tmp_path: Path
                                                                      ) -> None:
    """B starting (its recovery) while A runs the remediation, then B taking the same issue:
    A's record, claim and lease stay as they are (B's report joins A's run: no lease write),
    and A finishes it."""
    clock = Clock()
    a = Replica(tmp_path, "a", clock, hold_at=2)
    b = Replica(tmp_path, "b", clock)
    a.fire()
    await asyncio.wait_for(a.agent.held.wait(), 10)
    before = snapshot(a.store)
    assert b.play.recover() == 0
    issue = remediation(a.store)["issue"]
    assert await b.play.remediator.handle(ALERT.play_id, issue) == {"status": "deduplicated"}
    assert {k: v for k, v in snapshot(a.store).items() if not k.startswith(INCIDENTS)} == \
        {k: v for k, v in before.items() if not k.startswith(INCIDENTS)}
    assert b.agent.kinds == []
    [key] = a.store.keys(remediate.KIND)
    assert remediate.claim_key(key) in claims(a.store)
    a.agent.let_go.set()
    await a.play.wait_idle(10)
    assert remediation(a.store)["status"] == "escalated"
    assert escalations(a) == 1 and claims(a.store) == {}


async def test_a_clean_stop_hands_the_remediation_over(tmp_path: Path) -> None:
    """A stopped (SIGTERM) during remediation 1: its lease is given back, the remediation
    stays running with its claim held — not "interrupted" — and B resumes it at once (no
    wait for the lease time): remediation 1 again, then 2, one escalation."""
    clock = Clock()
    a = Replica(tmp_path, "a", clock, hold_at=2)
    b = Replica(tmp_path, "b", clock)
    a.fire()
    await asyncio.wait_for(a.agent.held.wait(), 10)
    [key] = a.store.keys(remediate.KIND)
    await a.play.stop()
    stopped = remediation(a.store)
    assert stopped["status"] == "running" and stopped["owner"]["holder"] == "a/1"
    assert remediate.claim_key(key) in claims(a.store)
    assert lease_of(a.store) is None
    assert "interrupted" not in str(incident(a.store).get("last_outcome"))

    assert await b.play.take_over() == 1
    await b.play.wait_idle(10)
    assert b.agent.kinds == ["remediation", "remediation"]
    assert remediation(b.store)["status"] == "escalated"
    assert remediation(b.store)["run_id"] == stopped["run_id"]  # the same gate claim
    assert escalations(b) == 1 and claims(b.store) == {}
    ended = [h for h in incident(b.store)["history"] if h["event"] == "attempt_ended"]
    assert [h["outcome"] for h in ended] == ["interrupted", "failed", "failed"]


async def test_spent_rounds_are_escalated_without_another_agent(tmp_path: Path) -> None:
    """A stopped after its last remediation, waiting to re-evaluate: B escalates at once."""
    clock = Clock()
    a = Replica(tmp_path, "a", clock, reevaluate_after_s=3600, rounds=1)
    b = Replica(tmp_path, "b", clock, rounds=1)
    a.fire()
    await until(lambda: remediation(a.store).get("attempts"), timeout=10)
    clock.now += TTL_S + 1
    assert await b.play.take_over() == 1
    await b.play.wait_idle(10)
    assert b.agent.kinds == []
    assert remediation(b.store)["status"] == "escalated"
    assert escalations(b) == 1
    await a.play.stop()  # the old run, still waiting: nothing more from it
    assert escalations(b) == 1 and remediation(b.store)["status"] == "escalated"


async def test_replicas_racing_to_take_over_resume_it_once(tmp_path: Path) -> None:
    clock = Clock()
    a = Replica(tmp_path, "a", clock, hold_at=2)
    b, c = Replica(tmp_path, "b", clock), Replica(tmp_path, "c", clock)
    a.fire()
    await asyncio.wait_for(a.agent.held.wait(), 10)
    clock.now += TTL_S + 1
    taken = await asyncio.gather(b.play.take_over(), c.play.take_over())
    assert sorted(taken) == [0, 1]
    await asyncio.gather(b.play.wait_idle(10), c.play.wait_idle(10))
    assert len(b.agent.kinds) + len(c.agent.kinds) == 2
    assert escalations(a) == 1
    await a.play.stop()


async def test_a_run_that_cannot_renew_stops_before_its_lease_expires(tmp_path: Path
                                                                      ) -> None:
    """Real time, a 0.6 s lease: A's lease writes fail; A's run stops (writing nothing)
    before the lease can expire, and B takes it over once it did."""
    import time

    store = FlakyStore(tmp_path / "state")
    a = Replica(tmp_path, "a", time.time, hold_at=2, ttl_s=0.6, store=store)
    b = Replica(tmp_path, "b", time.time, ttl_s=0.6)
    a.fire()
    await asyncio.wait_for(a.agent.held.wait(), 10)
    renewed = await until(lambda: (lease := lease_of(a.store)) and lease["expires_at"] >
                          lease["taken_at"] + 0.6 and lease, timeout=5)
    assert renewed["owner"] == "a/1"
    store.down = frozenset({LEASES})
    before = snapshot(b.store)
    assert await a.play.wait_idle(5)  # its lease keeper stopped it
    assert snapshot(b.store) == before
    await until(lambda: float(lease_of(b.store)["expires_at"]) <= time.time(), timeout=5)
    assert await b.play.take_over() == 1
    await b.play.wait_idle(10)
    assert remediation(b.store)["status"] == "escalated" and escalations(b) == 1


async def test_a_run_whose_lease_was_taken_stops_at_its_next_renewal(tmp_path: Path
                                                                     ) -> None:
    """Real time, a 0.6 s lease: another holder's name in A's lease (a takeover while A
    was paused) stops A's run within a renewal, and A writes nothing."""
    import time

    a = Replica(tmp_path, "a", time.time, hold_at=2, ttl_s=0.6)
    a.fire()
    await asyncio.wait_for(a.agent.held.wait(), 10)
    [key] = a.store.keys(remediate.KIND)
    rec = a.store.require(LEASES, lease_name(key))
    a.store.put(LEASES, rec.key, {**rec.data, "owner": "z/9", "tenure": "other"},
                expected_revision=rec.revision)
    before = snapshot(a.store)
    assert await a.play.wait_idle(5)
    assert snapshot(a.store) == before
    assert remediation(a.store)["status"] == "running"


async def test_a_store_failing_under_a_run_hands_the_remediation_over(tmp_path: Path
                                                                      ) -> None:
    """A store call of A's run fails (a NATS server gone): the remediation is not ended in
    an error nobody goes on from — it is handed over, and B finishes it."""
    clock = Clock()
    store = FlakyStore(tmp_path / "state")
    a = Replica(tmp_path, "a", clock, hold_at=2, store=store)
    b = Replica(tmp_path, "b", clock)
    a.fire()
    await asyncio.wait_for(a.agent.held.wait(), 10)
    store.down = frozenset({remediate.KIND})
    a.agent.let_go.set()  # remediation 1 ends; recording it fails
    assert await a.play.wait_idle(10)
    stopped = remediation(b.store)
    assert stopped["status"] == "running" and not stopped["attempts"]
    assert lease_of(b.store) is None
    assert await b.play.take_over() == 1
    await b.play.wait_idle(10)
    assert remediation(b.store)["status"] == "escalated" and escalations(b) == 1


async def test_a_remediation_whose_runs_keep_stopping_is_escalated(tmp_path: Path) -> None:
    """Each replica that takes it over stops during remediation 1: after MAX_TAKEOVERS the
    next takeover tells a person at once, without another agent run."""
    clock = Clock()
    first = Replica(tmp_path, "r0", clock, hold_at=2)
    first.fire()
    await asyncio.wait_for(first.agent.held.wait(), 10)
    await first.play.stop()
    for n in range(1, MAX_TAKEOVERS + 1):
        r = Replica(tmp_path, f"r{n}", clock, hold_at=1)
        assert await r.play.take_over() == 1
        await asyncio.wait_for(r.agent.held.wait(), 10)
        await r.play.stop()
    last = Replica(tmp_path, "last", clock)
    assert await last.play.take_over() == 1
    assert await last.play.wait_idle(10)
    assert last.agent.kinds == []
    done = remediation(last.store)
    assert done["status"] == "escalated" and done["takeovers"] == MAX_TAKEOVERS + 1
    assert escalations(last) == 1
