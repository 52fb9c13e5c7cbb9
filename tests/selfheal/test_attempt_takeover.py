"""Attempts survive their replica: a running attempt is owned through its lease, and when its
replica stops renewing, another replica ends it with the reason and runs it again — once —
while the old run, should it come back, finds it lost and writes nothing.

The end-to-end tests run two real ``healer loop`` processes on one real JetStream store (one
nats-server), the real detached worker (``python -m healer.code.worker``) and a command agent
in the sandbox that waits. The fencing rules themselves are checked on the file store.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from healer.core.lease import KIND as LEASES
from healer.core.store import FileStore, Store
from healer.errors import AttemptLostError
from healer.selfheal import attempts as st
from healer.selfheal.attempts import Attempts, worker_identity
from healer.selfheal.ownership import AttemptLease, lease_name
from healer.testing.loop import LoopProcess, healer_env
from healer.testing.nats import NatsServer, free_port, jetstream_store
from healer.testing.replicas import alive
from healer.testing.wait import wait_for

TOKEN = "takeover-test-token-0123456789"
TTL_S, SWEEP_S = 3.0, 1.0
# The sweep is itself a duty: a replica takes it over from a dead leader after the duty's ttl.
DUTY_TTL_S = 3.0
WAIT_S = max(TTL_S, DUTY_TTL_S) + SWEEP_S + 15  # generous: CI machines are busy

# The agent says it started (in the one folder its sandbox may write), then waits.
AGENT = r"""
import secrets, sys, time
from pathlib import Path
(Path(sys.argv[1]) / f"agent-{secrets.token_hex(4)}").write_text("")  # its pid: the sandbox's
time.sleep(120)
"""

REPORT = {"error_type": "KeyError", "error_message": "'user_id'",
          "call_site": "src/app/tools.py:lookup"}


def replica_env(tmp: Path, node: str, nats_url: str, repo: Path, probe: Path,
                agent: Path, port: int) -> dict[str, str]:
    d = tmp / node
    return healer_env(
        d / "state", d / "results", tmp / "fleet", HEALER_NODE_ID=node,
        HEALER_STORE="jetstream", HEALER_NATS_URLS=nats_url, HEALER__STORE__BUCKET="takeover",
        HEALER__API__ENABLED="true", HEALER_PORT=str(port), HEALER_TOKEN=TOKEN,
        HEALER_EXECUTOR="command",
        HEALER__EXECUTOR__COMMANDS=json.dumps({"healing-agent": [sys.executable, str(agent),
                                                                 str(probe)]}),
        HEALER__AGENTS__SANDBOX_WRITE_PATHS=json.dumps([str(probe)]),
        HEALER__SELFHEAL__REPO=str(repo), HEALER__SELFHEAL__LEASE_TTL_S=str(TTL_S),
        HEALER__SELFHEAL__TAKEOVER_INTERVAL_S=str(SWEEP_S),
        HEALER_HA_LEASE_TTL_S=str(DUTY_TTL_S))


def agents(probe: Path) -> list[str]:
    """The agent runs that started so far."""
    return sorted(p.name for p in probe.glob("agent-*"))


def kill_agents(script: Path) -> None:
    """End the waiting agents of this test (the processes running its script)."""
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if str(script).encode() in (proc / "cmdline").read_bytes():
                kill(int(proc.name))


def kill(pid: int, sig: int = signal.SIGKILL) -> None:
    assert pid > 1  # never a process group, never every process
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


Replicas = tuple[LoopProcess, LoopProcess, Store, httpx.Client, Path]


@contextlib.contextmanager
def two_replicas(tmp: Path, repo: Path) -> Iterator[Replicas]:
    """Replicas ``a`` and ``b`` on one JetStream store; reports go to ``a``'s API."""
    probe = tmp / "probe"
    probe.mkdir()
    agent = tmp / "agent.py"
    agent.write_text(AGENT)
    with NatsServer(jetstream=True, store_dir=tmp / "nats") as ns:
        port = free_port()
        a = LoopProcess(replica_env(tmp, "a", ns.url, repo, probe, agent, port), cwd=repo)
        b = LoopProcess(replica_env(tmp, "b", ns.url, repo, probe, agent, free_port()),
                        cwd=repo)
        store = jetstream_store(ns.url, "takeover")
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                           headers={"Authorization": f"Bearer {TOKEN}"})
        try:
            a.start()
            b.start()
            yield a, b, store, api, probe
        finally:
            api.close()
            kill_agents(agent)
            for att in Attempts(store).all():
                pid = int((att.get("worker") or {}).get("pid") or 0)
                if pid > 1:
                    kill(pid)
            store.close()
            for lp in (a, b):
                with contextlib.suppress(Exception):
                    lp.stop()


def started_by_a(store: Store, api: httpx.Client, probe: Path) -> dict[str, Any]:
    """Report the bug to replica ``a``; its worker's agent is running and waiting."""
    r = api.post("/api/v1/errors", json=REPORT)
    assert r.status_code in (200, 202) and r.json()["accepted"], r.text
    aid = r.json()["attempt_id"]
    wait_for(lambda: agents(probe), timeout=30)
    att = Attempts(store).require(aid)
    assert att["status"] == st.INVESTIGATING and att["owner"]["node"] == "a"
    assert store.require(LEASES, lease_name(aid)).data["owner"] == att["owner"]["holder"]
    return att


def retry_of(store: Store, aid: str) -> dict[str, Any] | None:
    att = Attempts(store).get(aid) or {}
    return Attempts(store).get(att["retried_as"]) if att.get("retried_as") else None


@pytest.mark.e2e
class TestTakeover:
    def test_a_dead_replica_s_attempt_is_ended_and_run_again_once(
            self, tmp_path: Path, repo: Path) -> None:
        """kill -9 of replica ``a`` and of its worker: within the lease time and a sweep,
        ``b`` ends the attempt saying ``a`` stopped renewing, and runs it again exactly once,
        under its own lease."""
        with two_replicas(tmp_path, repo) as (a, _b, store, api, probe):
            att = started_by_a(store, api, probe)
            aid, worker = att["attempt_id"], att["worker"]["pid"]
            a.kill9()
            kill(worker)
            killed = time.monotonic()
            new = wait_for(lambda: retry_of(store, aid), timeout=WAIT_S)
            took = time.monotonic() - killed
            old = Attempts(store).require(aid)
            new = wait_for(lambda: (lambda n: n if n.get("owner") else None)(
                Attempts(store).require(new["attempt_id"])), timeout=30)
            wait_for(lambda: len(agents(probe)) == 2, timeout=30)
            every = Attempts(store).for_fingerprint(att["fingerprint"])
        print(f"taken over {took:.1f} s after the kill")
        assert took < TTL_S + SWEEP_S + 5
        assert old["status"] == st.FAILED and "its replica a stopped renewing at" in \
            old["reason"] and old["taken_over"]["node"] == "a"
        assert old["retried_as"] == new["attempt_id"] and new["retry_of"] == aid
        assert new["takeovers"] == 1 and new["owner"]["node"] == "b"
        assert new["status"] == st.INVESTIGATING
        assert sorted(x["attempt_id"] for x in every) == sorted([aid, new["attempt_id"]])
        assert "escalation_due" not in old  # it is being retried: nobody to tell yet

    def test_a_cut_off_worker_finds_its_attempt_lost_and_writes_nothing(
            self, tmp_path: Path, repo: Path) -> None:
        """SIGSTOP of ``a``'s worker (a partition: its replica still runs): the attempt is
        taken over once its lease expires; resumed, the old worker sees it lost the lease,
        stops and leaves the attempt as the takeover wrote it."""
        with two_replicas(tmp_path, repo) as (a, _b, store, api, probe):
            att = started_by_a(store, api, probe)
            aid, worker = att["attempt_id"], att["worker"]["pid"]
            kill(worker, signal.SIGSTOP)
            try:
                new = wait_for(lambda: retry_of(store, aid), timeout=WAIT_S)
                # The retry took its own lease; the old one is no longer the old run's.
                lease = store.get(LEASES, lease_name(aid))
                assert lease is None or lease.data["owner"] != att["owner"]["holder"]
                wait_for(lambda: len(agents(probe)) == 2, timeout=30)
                settled = store.require(st.ATTEMPTS, aid)
            finally:
                kill(worker, signal.SIGCONT)
            wait_for(lambda: not alive(worker), timeout=TTL_S + 15)
            after = store.require(st.ATTEMPTS, aid)
            log = (Path(a.env["HEALER_STATE_DIR"]) / "selfheal" / "logs" / f"{aid}.log"
                   ).read_text()
            every = Attempts(store).for_fingerprint(att["fingerprint"])
        assert after.revision == settled.revision  # the late run wrote nothing
        assert after.data["status"] == st.FAILED and after.data["retried_as"] == \
            new["attempt_id"]
        assert "no longer this run's" in log
        assert len(every) == 2


class TestFencing:
    """The rules under the takeover, on the file store (one replica)."""

    def _investigating(self, tmp_path: Path) -> tuple[Attempts, AttemptLease, str]:
        store = FileStore(tmp_path / "state")
        atts = Attempts(store)
        aid = "20250101T000000-0000beef"
        atts.create(aid, {"fingerprint": "f" * 64, "error_type": "E", "call_site": "x:y"})
        lease = AttemptLease(store, aid, "n1", ttl_s=30)
        assert lease.take()
        atts.transition(aid, st.INVESTIGATING, worker=worker_identity(),
                        deadline=time.time() + 600, owner=lease.owner())
        return atts, lease, aid

    def test_a_run_s_writes_are_refused_once_another_owner_is_recorded(
            self, tmp_path: Path) -> None:
        atts, lease, aid = self._investigating(tmp_path)
        run = Attempts(atts.store)
        run.fence(aid, lease.token)
        run.update(aid, branch="healer/x")  # still its own
        atts.update(aid, owner={**lease.owner(), "revision": lease.token + 100})
        with pytest.raises(AttemptLostError):
            run.update(aid, branch="healer/y")
        with pytest.raises(AttemptLostError):
            run.transition(aid, st.FAILED, expect=st.INVESTIGATING, reason="late")
        assert atts.require(aid)["status"] == st.INVESTIGATING

    def test_a_takeover_ends_only_the_owner_it_found(self, tmp_path: Path) -> None:
        atts, lease, aid = self._investigating(tmp_path)
        with pytest.raises(AttemptLostError):
            atts.transition(aid, st.FAILED, expect=st.INVESTIGATING, owned_by=lease.token + 1)
        atts.transition(aid, st.FAILED, expect=st.INVESTIGATING, owned_by=lease.token)

    def test_recovery_leaves_another_host_s_leased_run_to_its_lease(
            self, tmp_path: Path) -> None:
        """A worker elsewhere holding the lease is not judged by a pid this host cannot see;
        one without a lease still is (records from before leases)."""
        atts, _lease, aid = self._investigating(tmp_path)
        atts.update(aid, worker={"host": "elsewhere", "pid": 1, "start": 0})
        assert atts.recover(timeout_s=60) == []
        atts.update(aid, owner=None)
        [ended] = atts.recover(timeout_s=60)
        assert ended["status"] == st.FAILED

    def test_on_a_shared_store_the_lease_decides_even_on_this_host(
            self, tmp_path: Path) -> None:
        """Two replicas on one host share the store: a dead worker here is still the lease's
        to settle (the takeover runs it again; a pid verdict would only fail it)."""
        atts, _lease, aid = self._investigating(tmp_path)
        dead = {"host": socket.gethostname(), "pid": 2 ** 22 + 1, "start": 0}
        atts.update(aid, worker=dead)
        assert atts.recover(timeout_s=60, leases_decide=True) == []
        [ended] = atts.recover(timeout_s=60)
        assert ended["status"] == st.FAILED


def test_an_agent_verdict_that_reached_the_store_is_applied_once(service: Any) -> None:
    """The agent's ``unfixable`` reached the store (the bus noted it) before its replica
    died: the takeover applies that verdict, once, instead of running the report again."""
    svc = service()
    aid = svc.report(REPORT)["attempt_id"]
    lease = AttemptLease(svc.store, aid, "a", ttl_s=1, clock=lambda: time.time() - 60)
    assert lease.take()  # taken a minute ago, never renewed
    svc.attempts.transition(aid, st.INVESTIGATING, worker={"host": "gone", "pid": 1},
                            deadline=time.time() + 600, owner=lease.owner())
    svc.on_result(SimpleNamespace(kind="healing", data={
        "run_id": f"{aid}-i1", "status": "unfixable",
        "summary": "not a code bug: the migration creating the table never ran"}))
    [ended] = svc.take_over(launch=False)
    assert ended["status"] == st.UNFIXABLE and "migration" in ended["unfixable_reason"]
    assert "its replica a stopped renewing" in ended["reason"]
    assert "retried_as" not in ended and len(svc.attempts.for_fingerprint(
        ended["fingerprint"])) == 1
    assert svc.take_over(launch=False) == []  # applied once


class TestNeverStarted:
    """The replica that admitted a report died before its worker took the attempt up: the
    attempt is still ``dispatch_pending`` and holds no lease. Two lease times after its
    dispatch it is taken over."""

    def _service(self, make_settings: Any) -> tuple[Any, list[float]]:
        from healer.selfheal.service import SelfHealService

        now = [time.time()]
        settings = make_settings()
        svc = SelfHealService(settings, FileStore(settings.state_path), launcher=[].append,
                              clock=lambda: now[0])
        return svc, now

    def test_it_is_run_again_once_after_a_lease_time(self, make_settings: Any) -> None:
        svc, now = self._service(make_settings)
        aid = svc.report(REPORT)["attempt_id"]
        now[0] += svc.settings.selfheal.lease_ttl_s
        assert svc.take_over(launch=False) == []  # its worker may still be starting
        now[0] += svc.settings.selfheal.lease_ttl_s
        [ended] = svc.take_over(launch=False)
        node = svc.settings.node
        assert ended["status"] == st.FAILED and ended["taken_over"]["node"] == node
        assert f"its replica {node} stopped before a worker took it up" in ended["reason"]
        retry = svc.attempts.require(ended["retried_as"])
        assert retry["retry_of"] == aid and retry["status"] == st.DISPATCH_PENDING
        assert svc.take_over(launch=False) == []  # once
        assert "escalation_due" not in ended  # it is being retried: nobody to tell yet
        with pytest.raises(st.TransitionError):  # a worker starting late runs nothing
            svc.attempts.transition(aid, st.INVESTIGATING, expect=st.DISPATCH_PENDING)

    def test_a_worker_holding_its_lease_is_left_to_start(self, make_settings: Any) -> None:
        svc, now = self._service(make_settings)
        aid = svc.report(REPORT)["attempt_id"]
        now[0] += 2 * svc.settings.selfheal.lease_ttl_s
        lease = AttemptLease(svc.store, aid, "slow", ttl_s=30, clock=lambda: now[0])
        assert lease.take()  # a slow worker got there first
        assert svc.take_over(launch=False) == []
        assert svc.attempts.require(aid)["status"] == st.DISPATCH_PENDING


def test_a_report_admitted_before_the_retry_does_the_retry_s_work(make_settings: Any) -> None:
    """The takeover ends the attempt (freeing the gate's claim) and a new report of the same
    error is admitted before the retry asks the gate: that attempt is the retry. The old
    one names it (``superseded_by``), no second attempt is made and nothing is launched
    twice."""
    from healer.selfheal.service import SelfHealService

    now = [time.time()]
    settings = make_settings()
    launched: list[str] = []
    svc = SelfHealService(settings, FileStore(settings.state_path), launcher=launched.append,
                          clock=lambda: now[0])
    aid = svc.report(REPORT)["attempt_id"]
    now[0] += 2 * svc.settings.selfheal.lease_ttl_s
    take, fresh = svc._take, []

    def take_then_a_report_lands(*args: Any) -> dict[str, Any]:
        ended = take(*args)
        fresh.append(svc.report(REPORT)["attempt_id"])
        return ended

    svc._take = take_then_a_report_lands  # type: ignore[method-assign]
    [ended] = svc.take_over(launch=False)
    assert ended["status"] == st.FAILED and fresh[0] != aid
    assert ended["superseded_by"] == fresh[0] and "retried_as" not in ended
    fp = ended["fingerprint"]
    assert sorted(a["attempt_id"] for a in svc.attempts.for_fingerprint(fp)) == \
        sorted([aid, fresh[0]])
    assert launched == [aid, fresh[0]]
    assert svc.attempts.require(fresh[0])["status"] == st.DISPATCH_PENDING
