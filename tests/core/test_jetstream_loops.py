"""Three healer loops on one JetStream behave like one healer: each result applied once."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from healer.testing.loop import LoopProcess, drop_result, healer_env
from healer.testing.nats import NatsServer, jetstream_store
from healer.testing.wait import wait_for

pytestmark = pytest.mark.e2e


def node_env(root: Path, node: str, url: str, bucket: str) -> dict[str, str]:
    d = root / node
    return healer_env(d / "state", d / "results", root / "fleet", HEALER_NODE_ID=node,
                      HEALER_STORE="jetstream", HEALER_NATS_URLS=url,
                      HEALER__STORE__BUCKET=bucket)


def applied_counts(loops: list[LoopProcess]) -> list[int]:
    out = []
    for lp in loops:
        try:
            out.append(json.loads(lp.status_file.read_text())["bus"]["applied"])
        except (OSError, ValueError, KeyError):
            out.append(0)
    return out


# `make test-all`; tests/core/test_failover.py runs three loops in `make test`
@pytest.mark.exhaustive
class TestSharedBus:
    def test_three_loops_apply_each_result_once(self, tmp_path: Path) -> None:
        """Results dropped on any node are applied exactly once by the fleet, across a kill -9
        of one loop and a restart of the NATS server in the middle of the run."""
        total = 300
        with NatsServer(jetstream=True, store_dir=tmp_path / "nats") as ns:
            envs = [node_env(tmp_path, f"n{i}", ns.url, "fleet1") for i in range(3)]
            loops = [LoopProcess(env).start() for env in envs]
            names: list[str] = []
            try:
                def burst(start: int, count: int) -> None:
                    for i in range(start, start + count):
                        node = i % 3
                        names.append(drop_result(Path(envs[node]["HEALER_RESULTS_DIR"]),
                                                 "diagnose", f"p{i:04d}",
                                                 epoch=1700000000 + i).name)

                t = threading.Thread(target=burst, args=(0, 150))
                t.start()
                time.sleep(0.3)
                loops[1].kill9()  # dies mid-burst, maybe holding unacked messages
                t.join()
                ns.restart()  # the server goes away and comes back with its data
                burst(150, 150)
                loops[1] = LoopProcess(envs[1]).start()
                store = jetstream_store(ns.url, "fleet1")
                try:
                    wait_for(lambda: len(store.keys("results")) >= total, timeout=90)
                    ledger = [store.require("results", k).data["name"]
                              for k in store.keys("results")]
                finally:
                    store.close()
            finally:
                for lp in loops:
                    lp.stop()
        assert len(ledger) == total and sorted(ledger) == sorted(names)
        for env in envs:
            left = [p.name for p in Path(env["HEALER_RESULTS_DIR"]).iterdir()
                    if p.name not in ("applied", "rejected")]
            assert left == []


WORKER = r"""
import sys, time
from healer.testing.nats import jetstream_store
from healer.core.lease import Lease
url, bucket, me, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
store = jetstream_store(url, bucket)
lease = Lease(store, "peer-mac1", me, ttl_s=2.0)
while True:
    if lease.acquire():
        while lease.renew():
            rec = store.update("work", "mac1", lambda d: {"steps": (d or {"steps": 0})["steps"] + 1,
                                                           "by": me})
            if rec.data["steps"] >= steps:
                print("done", flush=True)
                sys.exit(0)
            time.sleep(0.1)
    time.sleep(0.2)
"""


class TestLeases:
    def test_takeover_after_kill9(self, tmp_path: Path) -> None:
        """Two nodes want to heal one peer: one works; kill -9 it and the other takes over
        within the lease time and finishes."""
        import subprocess
        import sys

        script = tmp_path / "worker.py"
        script.write_text(WORKER)
        root = Path(__file__).resolve().parents[2]
        with NatsServer(jetstream=True, store_dir=tmp_path / "nats") as ns:
            args = [ns.url, "leases1"]
            a = subprocess.Popen([sys.executable, str(script), *args, "a", "40"], cwd=root,
                                 stdout=subprocess.PIPE, text=True)
            store = jetstream_store(ns.url, "leases1")
            try:
                wait_for(lambda: (store.get("work", "mac1") or None) is not None, timeout=30)
                b = subprocess.Popen([sys.executable, str(script), *args, "b", "40"], cwd=root,
                                     stdout=subprocess.PIPE, text=True)
                time.sleep(1.0)
                assert store.require("work", "mac1").data["by"] == "a"  # b waits its turn
                a.kill()
                a.wait(10)
                killed_at = time.monotonic()
                wait_for(lambda: store.require("work", "mac1").data["by"] == "b", timeout=30)
                took_over_in = time.monotonic() - killed_at
                assert b.wait(60) == 0
                assert store.require("work", "mac1").data["steps"] == 40
            finally:
                store.close()
                for p in (a, b):
                    if p.poll() is None:
                        p.kill()
        assert took_over_in < 2.0 + 2.0  # the lease time, plus a poll or two


class TestDoctor:
    def test_doctor_checks_jetstream(self, tmp_path: Path) -> None:
        """`healer doctor` with store=jetstream says whether JetStream answers and the bucket
        exists; with the server gone the check fails (exit 1) with the reason."""
        import subprocess
        import sys

        with NatsServer(jetstream=True, store_dir=tmp_path / "nats") as ns:
            env = node_env(tmp_path, "n1", ns.url, "doctor1")
            r = subprocess.run([sys.executable, "-m", "healer", "doctor", "--json"], env=env,
                               capture_output=True, text=True, timeout=60)
            checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
            assert r.returncode == 0, r.stderr
            assert checks["jetstream"]["ok"] and "bucket doctor1" in checks["jetstream"]["detail"]
        r = subprocess.run([sys.executable, "-m", "healer", "doctor", "--json"], env=env,
                           capture_output=True, text=True, timeout=60)
        checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
        assert r.returncode == 1
        assert not checks["jetstream"]["ok"] and "cannot connect" in checks["jetstream"]["detail"]


REPORTER = r"""
import json, sys, time
from healer.config import load_settings
from healer.selfheal.service import SelfHealService
from healer.testing.nats import jetstream_store

url, bucket, state, repo, count, start = json.loads(sys.argv[1])
settings = load_settings(env={}, overrides=[
    f"state_dir={state}", f"selfheal.repo={repo}", "executor.default=command",
    'executor.commands={"healing-agent": ["true"]}'])
service = SelfHealService(settings, jetstream_store(url, bucket), launcher=lambda _id: None,
                          env={})
report = {"error_type": "asyncpg.exceptions.UndefinedTableError",
          "error_message": 'relation "butler_name.missing_table" does not exist',
          "call_site": "src/butlers/modules/memory/tools/facts.py:memory_store_fact",
          "severity_hint": "high"}
while time.time() < start:
    time.sleep(0.001)
print(json.dumps([service.report(report) for _ in range(count)]))
"""


class TestNoveltyAcrossNodes:
    def test_200_identical_reports_over_three_nodes(self, tmp_path: Path) -> None:
        """200 identical report_error calls spread over three nodes sharing JetStream start
        exactly one attempt; every other call joins it."""
        import subprocess
        import sys

        repo = tmp_path / "repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        script = tmp_path / "reporter.py"
        script.write_text(REPORTER)
        with NatsServer(jetstream=True, store_dir=tmp_path / "nats") as ns:
            start = time.time() + 3.0
            children = [subprocess.Popen(
                [sys.executable, str(script),
                 json.dumps([ns.url, "novelty1", str(tmp_path / f"n{i}"), str(repo), count,
                             start])],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
                for i, count in enumerate((67, 67, 66))]
            answers = []
            for child in children:
                out, err = child.communicate(timeout=180)
                assert child.returncode == 0, err
                answers += json.loads(out)
        assert len(answers) == 200
        accepted = [a for a in answers if a["accepted"]]
        assert len(accepted) == 1, answers[:2]
        joined = {a.get("attempt_id") for a in answers if a.get("reason") ==
                  "already_investigating"}
        assert joined == {accepted[0]["attempt_id"]}
        assert sum(1 for a in answers if a.get("reason") == "already_investigating") == 199
