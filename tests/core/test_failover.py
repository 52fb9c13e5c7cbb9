"""Failover: three real ``healer loop`` replicas on a real three-server NATS JetStream
cluster (R3) lose one part while work is in flight, and nothing is lost or done twice.

In flight at the moment of the fault (half of it before, half after):

- a Kubernetes alert: a pod of the fake API server goes into CrashLoopBackOff (the watcher
  is a duty: one replica watches);
- a burst of Sentry events (envelopes as the SDKs send them, the DSN key in
  ``X-Sentry-Auth``) spread over the replicas' ingest, which answers 200 only once an event
  is filed (``ingest.answer: auto`` on the shared store): the fault comes right after the
  first half's answers, with nothing waited for. An event answered otherwise (503, or its
  connection dropped) is sent again to the next replica, as an SDK relay does;
- 20 ``report_error`` calls (``POST /api/v1/errors``) spread over the replicas, each
  starting a healing attempt whose agent runs a few seconds.

The faults, one test each:

1. **kill -9 of the replica leading every duty**, with every process it started (its host
   died): another replica leads every duty within 15 s (measured, printed); its attempts are
   taken over and run again once; the alert's remediation, running there at the kill, is
   taken over and resumed, and ends once.
2. **kill -9 of the NATS server leading the bucket's stream**: R3 elects another leader and
   everything goes on.
3. **a partition**: SIGSTOP of the leading replica and everything it started. Its duties,
   attempts and the alert's remediation are taken over; resumed (SIGCONT), it writes
   nothing stale — the attempts and the remediation it ran stay as the takeovers wrote
   them, it leads nothing, nothing is sent twice.

After each: every Sentry issue and every reported error is exactly one incident counting
every event answered 200 (and at most the sends that ended otherwise: those may have been
filed too) and every report the replicas accepted; the alert is one incident, and its
remediation ended once (escalated: one seed file; or resolved); no agent run started twice;
no attempt of one report that is not a takeover's retry; no notification (signed webhook) or
escalation seed file twice for one incident state.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from healer.core.incidents import INCIDENTS
from healer.play.remediate import KIND as REMEDIATIONS
from healer.selfheal.attempts import ATTEMPTS, Attempts
from healer.testing.kube import FakeKube, crash_loop, pod
from healer.testing.replicas import BUCKET, Replica, ReplicaSet, alive, frozen, seed_incidents
from healer.testing.wait import wait_for

pytestmark = pytest.mark.e2e

TTL_S = 3.0  # the duties' leases: a failover is quick to see (attempts: the rig's 6 s)
TAKEOVER_LIMIT_S = 15.0  # the issue's promise: every duty led elsewhere within 15 s
SETTLE_S = 120.0  # generous: CI is a busy 2-core machine
SENTRY_KEY = "5e" * 16
SENTRY_ISSUES = 4
SENTRY_EVENTS = 24  # spread over the issues and the replicas
REPORT_ERRORS = 5
REPORTS = 20  # 4 of each error, spread over the replicas
LABELS = {"app": "coderun", "workflow": "play-task-7-fo", "agent": "rex", "task-id": "7"}
POD = "play-task-7-fo-rex"


# --- traffic -------------------------------------------------------------------------------

def envelope(issue: int, n: int) -> bytes:
    """One Sentry envelope with one event of ``issue`` (as the Python SDK sends it)."""
    event = {"event_id": uuid.uuid4().hex, "platform": "python", "level": "error",
             "release": "shop@1.0.0", "user": {"id": f"user-{n}"},
             "exception": {"values": [{"type": f"Failover{issue}Error", "value": "cart lost",
                                       "stacktrace": {"frames": [{
                                           "filename": "app/cart.py",
                                           "function": f"checkout_{issue}", "lineno": 7 + issue,
                                           "in_app": True}]}}]}}
    payload = json.dumps(event).encode()
    return b"\n".join([json.dumps({"event_id": event["event_id"]}).encode(),
                       json.dumps({"type": "event", "length": len(payload)}).encode(),
                       payload]) + b"\n"


def report(i: int) -> dict[str, str]:
    return {"error_type": "KeyError", "error_message": f"'field_{i}'",
            "call_site": f"src/app/tools.py:lookup_{'abcde'[i]}"}


class Traffic:
    """What the replicas accepted: Sentry events answered 200 per issue (``events``), the
    sends answered otherwise (``unsure``: filed or not, nobody can tell the sender; the
    event is sent again), reports per fingerprint."""

    def __init__(self, rs: ReplicaSet, kube: FakeKube):
        self.rs, self.kube = rs, kube
        self.events: Counter[str] = Counter()
        self.unsure: Counter[str] = Counter()
        self.resent: Counter[str] = Counter()  # why an event was sent again
        self.reports: Counter[str] = Counter()
        self.sent = 0
        self.to = 0  # the replica the next Sentry event goes to first

    def sentry(self, count: int) -> None:
        for _ in range(count):
            n = self.sent
            self.sent += 1
            issue = n % SENTRY_ISSUES
            self.events[f"Failover{issue}Error"] += 1
            self.sentry_event(n, f"Failover{issue}Error", envelope(issue, n))
            self.to += 1

    def sentry_event(self, n: int, issue: str, body: bytes) -> None:
        """Send one event until a replica answers 200 (the next replica each time)."""
        headers = {"X-Sentry-Auth": f"Sentry sentry_version=7, sentry_key={SENTRY_KEY}, "
                                    "sentry_client=sentry.python/2.0.0",
                   "Content-Type": "application/x-sentry-envelope"}
        for attempt in range(2 * len(self.rs.replicas)):
            try:
                r = self.rs.post("/api/1/envelope/", first=self.to + attempt, content=body,
                                 headers=headers)
            except httpx.TransportError as exc:  # taken, then the connection dropped
                self.unsure[issue] += 1
                self.resent[type(exc).__name__] += 1
                continue
            if r.status_code == 200:
                return
            assert r.status_code == 503, r.text  # not filed (yet): sent again
            self.unsure[issue] += 1
            self.resent["503"] += 1
        raise AssertionError(f"no replica filed Sentry event {n}: {self.rs.logs()}")

    def report_errors(self, start: int, count: int) -> None:
        for n in range(start, start + count):
            r = self.rs.post("/api/v1/errors", first=n, json=report(n % REPORT_ERRORS))
            assert r.status_code in (200, 202), r.text
            self.reports[r.json()["fingerprint"]] += 1

    def crash_the_pod(self) -> None:
        self.kube.objects.patch("pods", "cto", POD, crash_loop())

    def first_half(self, victim: Replica | None = None, *, crash: bool = True) -> None:
        """Before the fault: the pod crashes (unless ``crash`` is false: the test crashes it
        itself), half the reports and half the events arrive, the last event at ``victim``.
        Nothing is waited for: an event answered 200 is in the store already (answered when
        queued, the last one would die with the victim)."""
        if crash:
            self.crash_the_pod()
        self.report_errors(0, REPORTS // 2)
        if victim is not None:
            self.to = self.rs.replicas.index(victim) - (SENTRY_EVENTS // 2 - 1)
        self.sentry(SENTRY_EVENTS // 2)

    def second_half(self) -> None:
        self.sentry(SENTRY_EVENTS - SENTRY_EVENTS // 2)
        self.report_errors(REPORTS // 2, REPORTS - REPORTS // 2)


# --- the rig ---------------------------------------------------------------------------------

@pytest.fixture
def kube(tmp_path: Path) -> Iterator[FakeKube]:
    with FakeKube(bookmark_every_s=0.5) as fake:
        fake.objects.create("pods", pod(POD, labels=LABELS))
        yield fake


@pytest.fixture
def replicas(tmp_path: Path, kube: FakeKube) -> Iterator[ReplicaSet]:
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    extra = {"HEALER_KUBE_ENABLED": "true", "HEALER__KUBE__KUBECONFIG": str(config),
             "HEALER__KUBE__FOLLOW_LOGS": "false", "HEALER__KUBE__EVALUATE_INTERVAL_S": "0.2",
             "HEALER__KUBE__BACKOFF_MAX_S": "0.5", "HEALER__PLAY__REEVALUATE_AFTER_S": "0.1",
             "HEALER__PLAY__MAX_ITERATIONS": "1", "HEALER_SENTRY_KEY": SENTRY_KEY}
    with ReplicaSet(tmp_path, ttl_s=TTL_S, extra=extra) as rs:
        yield rs


def incidents(rs: ReplicaSet) -> list[dict[str, Any]]:
    try:
        return [rec.data for rec in rs.store.list(INCIDENTS)]
    except Exception:  # a server of the cluster answered 503 meanwhile: ask again
        return []


def sentry_counts(found: list[dict[str, Any]]) -> dict[str, int]:
    """Events filed per Sentry issue (its exception type)."""
    return {str(i.get("error_type")): int(i.get("count") or 0) for i in found
            if i.get("source") == "sentry"}


def every_event_counted(counts: dict[str, int], traffic: Traffic) -> bool:
    """Each issue counts every event answered 200, and more only by sends answered
    otherwise (a 503 past the answer's bound, a connection dropped) that were filed after
    all."""
    return counts.keys() == traffic.events.keys() and all(
        traffic.events[k] <= counts[k] <= traffic.events[k] + traffic.unsure[k]
        for k in counts)


def remediations(rs: ReplicaSet) -> list[dict[str, Any]] | None:
    """The play remediations (the alert's); None when the store could not answer."""
    try:
        return [rec.data for rec in rs.store.list(REMEDIATIONS)]
    except Exception:
        return None


def running_on(rs: ReplicaSet, replica: Replica) -> dict[str, Any] | None:
    """The alert's remediation while ``replica`` runs it."""
    found = remediations(rs) or []
    return next((r for r in found if r.get("status") == "running" and str(
        (r.get("owner") or {}).get("holder", "")).startswith(replica.name + "/")), None)


def crash_the_pod_on(rs: ReplicaSet, traffic: Traffic, victim: Replica) -> None:
    """The pod crashes; returns once the alert's remediation runs on ``victim`` (its watcher
    fired the alert) — its evaluation takes seconds more, so the fault that comes next finds
    it running there."""
    traffic.crash_the_pod()
    try:
        wait_for(lambda: running_on(rs, victim), timeout=30)
    except AssertionError:
        raise AssertionError(f"not running on {victim.name}: {remediations(rs)}\n"
                             f"{rs.logs()}") from None


def remediation_revision(rs: ReplicaSet) -> int:
    [key] = rs.store.keys(REMEDIATIONS)
    return int(rs.store.require(REMEDIATIONS, key).revision)


def gave_up(replica: Replica) -> bool:
    """Whether ``replica`` logged that a remediation run of it lost its lease."""
    return any("remediation" in line and "writes nothing more" in line
               for line in replica.loop.log().splitlines())


def settled(rs: ReplicaSet, traffic: Traffic) -> list[dict[str, Any]] | None:
    """The incidents once each Sentry issue and each reported error has exactly one, counting
    everything accepted, the alert has its one, and no attempt or remediation still runs;
    else None."""
    found = incidents(rs)
    by_type = Counter(str(i.get("error_type")) for i in found if i.get("source") == "sentry")
    counts = sentry_counts(found)
    reported = {str(i.get("key")): int(i.get("count") or 0) for i in found
                if i.get("source") == "report_error"}
    alerts = [i for i in found if i.get("kind") == "play"]
    if by_type != Counter(dict.fromkeys(traffic.events, 1)) or \
            not every_event_counted(counts, traffic):
        return None
    if reported != dict(traffic.reports) or len(alerts) != 1:
        return None
    found_remediations = remediations(rs)
    if not found_remediations or any(r.get("status") == "running"
                                     for r in found_remediations):
        return None
    try:
        running = [a for a in Attempts(rs.store).all()
                   if a.get("status") in ("dispatch_pending", "investigating")]
    except Exception:
        return None
    return None if running else found


def wait_settled(rs: ReplicaSet, traffic: Traffic) -> list[dict[str, Any]]:
    try:
        return wait_for(lambda: settled(rs, traffic), timeout=SETTLE_S, every=0.5)
    except AssertionError:
        seen = [(i.get("kind"), i.get("source"), i.get("error_type"),
                 str(i.get("key"))[:12], i.get("count"), i.get("status"))
                for i in incidents(rs)]
        runs = [(a["attempt_id"], a.get("status"), a.get("retry_of"))
                for a in Attempts(rs.store).all()]
        raise AssertionError(f"not settled: sent {dict(traffic.events)} "
                             f"{dict(traffic.reports)}\nincidents {seen}\nattempts {runs}\n"
                             f"{rs.logs()}") from None


def assert_once(rs: ReplicaSet, traffic: Traffic) -> None:
    print(f"Sentry events answered 200: {sum(traffic.events.values())}; sent again: "
          f"{dict(traffic.resent) or 'none'}")
    dup = rs.duplicates()
    print(f"duplicates: {dup.summary()}")
    assert not dup, f"{dup}\n{rs.logs()}"
    remediated_once(rs)


def remediated_once(rs: ReplicaSet) -> dict[str, Any]:
    """The alert's one remediation, ended once: escalated with one seed file (the pod keeps
    crashing, so it is never healed), its incident escalated."""
    [rem] = remediations(rs) or [{}]
    [alert] = [i for i in incidents(rs) if i.get("kind") == "play"]
    seeds = seed_incidents(rs.fleet)[str(rem["issue"]["id"])]
    assert (rem["status"], alert["status"], seeds) == ("escalated", "escalated", 1), \
        f"{rem}\n{alert}\n{rs.logs()}"
    return rem


def taken_over(rs: ReplicaSet) -> dict[str, int]:
    """Attempts taken over, by the replica that had them (a worker that could not reach
    the store when it started counts too: its attempt was never taken up)."""
    return dict(Counter(a["taken_over"]["node"] for a in Attempts(rs.store).all()
                        if a.get("taken_over")))


def leader_of_all(rs: ReplicaSet) -> Replica:
    """The replica leading the watcher — and, as the first one up, every other duty."""
    victim = rs.leader_of("kube-watcher")
    owners = wait_for(lambda: (o := rs.owners()) and all(o.values()) and o, timeout=30)
    assert {o.split("/")[0] for o in owners.values()} == {victim.name}, owners
    return victim


def measure_takeover(rs: ReplicaSet, victim: Replica, started: float) -> float:
    took = rs.takeover_s(victim, started, timeout=TAKEOVER_LIMIT_S * 4)
    print(f"\nevery duty led by another replica {took:.2f} s after the fault "
          f"(duty ttl {TTL_S:g} s)")
    assert took <= TAKEOVER_LIMIT_S, rs.logs()
    return took


def second_half_during_takeover(rs: ReplicaSet, traffic: Traffic, victim: Replica,
                                started: float) -> None:
    """The second half of the traffic, sent while the takeover is measured: each Sentry
    event is answered once filed (a tenth of a second or more), and the time the traffic
    takes must not count as the takeover's."""
    with ThreadPoolExecutor(1) as pool:
        sending = pool.submit(traffic.second_half)
        measure_takeover(rs, victim, started)
        sending.result()


# --- the scenarios -------------------------------------------------------------------------

def test_kill_9_of_the_leading_replica_loses_nothing_and_does_nothing_twice(
        replicas: ReplicaSet, kube: FakeKube) -> None:
    rs = replicas
    traffic = Traffic(rs, kube)
    victim = leader_of_all(rs)
    traffic.first_half(victim, crash=False)
    crash_the_pod_on(rs, traffic, victim)
    started = time.monotonic()
    victim.kill9()
    second_half_during_takeover(rs, traffic, victim, started)
    wait_settled(rs, traffic)
    print(f"attempts taken over, by the replica that had them: {taken_over(rs)}")
    assert_once(rs, traffic)
    moved = remediated_once(rs)["taken_over"]
    print(f"the alert's remediation taken over from {moved['from']} by {moved['by']}")
    assert moved["from"].startswith(victim.name + "/")


@pytest.mark.exhaustive  # `make test-all`: the R3 cluster's own failover (~30 s)
def test_kill_9_of_a_nats_server_loses_nothing_and_does_nothing_twice(
        replicas: ReplicaSet, kube: FakeKube) -> None:
    rs = replicas
    traffic = Traffic(rs, kube)
    [leader] = wait_for(lambda: [i for i in [rs.cluster.stream_leader(f"KV_{BUCKET}")]
                                 if i is not None], timeout=30)
    traffic.first_half()
    rs.cluster.kill(leader)
    traffic.second_half()
    wait_settled(rs, traffic)
    owners = wait_for(lambda: (o := rs.owners()) and all(o.values()) and o, timeout=30)
    print(f"\nduties led by {sorted({o.split('/')[0] for o in owners.values()})} with NATS "
          f"server {leader} gone; attempts taken over: {taken_over(rs)}")
    assert_once(rs, traffic)


def test_a_partitioned_replica_is_taken_over_and_writes_nothing_stale(
        replicas: ReplicaSet, kube: FakeKube) -> None:
    rs = replicas
    traffic = Traffic(rs, kube)
    victim = leader_of_all(rs)
    traffic.first_half(victim, crash=False)
    crash_the_pod_on(rs, traffic, victim)
    with frozen(victim):
        started = time.monotonic()
        second_half_during_takeover(rs, traffic, victim, started)
        wait_settled(rs, traffic)
        ran = {a["attempt_id"]: a for a in Attempts(rs.store).all()
               if (a.get("taken_over") or {}).get("node") == victim.name}
        before = {aid: rs.store.require(ATTEMPTS, aid).revision for aid in ran}
        assert remediated_once(rs)["taken_over"]["from"].startswith(victim.name + "/")
        remediation_before = remediation_revision(rs)
        workers = victim.frozen_workers()
        resumed = time.time()
    # Resumed: it notices it leads nothing (its loop.json is rewritten every few seconds),
    # its workers find their leases taken and stop, and so does its remediation run.
    wait_for(lambda: victim.loop.status_file.stat().st_mtime > resumed + 1
             and not victim.leads(), timeout=30)
    wait_for(lambda: not any(alive(p) for p in workers), timeout=30)
    try:  # seen once not within 30 s with three test workers on two cores
        wait_for(lambda: gave_up(victim), timeout=60)
    except AssertionError:
        raise AssertionError("the resumed replica's remediation run never gave up:\n"
                             + victim.loop.log()[-4000:]) from None
    wait_settled(rs, traffic)
    after = {aid: rs.store.require(ATTEMPTS, aid).revision for aid in ran}
    print(f"attempts of the partitioned replica taken over: {len(ran)}, its workers "
          f"stopped when resumed: {len(workers)}; its remediation run stopped too")
    assert after == before  # its workers, resumed, wrote nothing to what was taken over
    assert remediation_revision(rs) == remediation_before  # nor did its remediation run
    assert not any(o and o.startswith(victim.name + "/") for o in rs.owners().values())
    assert_once(rs, traffic)
