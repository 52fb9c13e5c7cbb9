"""The bus's fast path keeps its promises: a kill -9 while batches are checked and committed
loses no result and applies none twice; both watchers bring files; the quick schema check
never lets through what jsonschema refuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from healer.core.bus import LEDGER, AgentResult, ResultsBus
from healer.core.schemas import errors as schema_errors
from healer.core.schemas import fast_checker
from healer.core.store import FileStore
from healer.testing.loop import drop_result
from healer.testing.wait import wait_for

# Runs a bus over <root>/results until killed; each delivered result id goes to <root>/got.
BUS = r"""
import sys, time
from pathlib import Path
from healer.core.bus import ResultsBus
from healer.core.store import FileStore
root = Path(sys.argv[1])
log = open(root / "got", "a", buffering=1)
bus = ResultsBus(root / "results", FileStore(root / "state"), rescan_s=60.0)
bus.subscribe(lambda r: log.write(r.id + "\n"))
bus.start()
print("started", flush=True)
while True:
    time.sleep(1)
"""


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_kill_9_mid_batch_loses_nothing_and_applies_nothing_twice(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    n = 1500
    for i in range(n):
        drop_result(results, "diagnose", f"host{i}", epoch=1700000100 + i)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", BUS, str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "started\n"
        wait_for(lambda: len(_lines(tmp_path / "got")) >= 200, timeout=60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    first = _lines(tmp_path / "got")
    assert len(first) < n, "killed too late to test anything"

    store = FileStore(tmp_path / "state")
    bus = ResultsBus(results, store, rescan_s=60.0)
    again: list[AgentResult] = []
    lock = threading.Lock()

    def on(result: AgentResult) -> None:
        with lock:
            again.append(result)

    bus.subscribe(on)
    bus.start()
    try:
        wait_for(lambda: len(list((results / "applied").iterdir())) == n, timeout=120)
        assert bus.drain(30)
    finally:
        bus.stop()
    assert len(store.keys(LEDGER)) == n  # each result applied once, none lost
    delivered = set(first) | {r.id for r in again}
    assert delivered == set(store.keys(LEDGER))
    # Delivered again only what the kill interrupted: one batch being committed at most.
    twice = set(first) & {r.id for r in again}
    assert len(twice) <= 512
    assert [p.name for p in results.iterdir() if p.is_file()] == []
    assert list((results / "rejected").iterdir()) == []
    assert store.members(bus.pending_set) == []


@pytest.mark.parametrize("watcher", ["inotify", "watchdog"])
def test_both_watchers_bring_files(tmp_path: Path, watcher: str) -> None:
    """A result renamed into place and one written in place are applied without a rescan,
    whichever watcher hears about them."""
    results = tmp_path / "results"
    store = FileStore(tmp_path / "state")
    bus = ResultsBus(results, store, rescan_s=600.0, watcher=watcher)
    got: list[str] = []
    bus.subscribe(lambda r: got.append(r.target))
    bus.start()
    try:
        drop_result(results, "diagnose", "renamed", epoch=1700000001)
        (results / "heal-diagnose-inplace-1700000002.json").write_text(
            json.dumps({"kind": "diagnose", "target": "inplace", "status": "ok"}))
        wait_for(lambda: sorted(got) == ["inplace", "renamed"], timeout=20)
    finally:
        bus.stop()


def test_an_unknown_watcher_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="watcher must be one of inotify, watchdog"):
        ResultsBus(tmp_path / "results", FileStore(tmp_path / "state"), watcher="poll")


VALID: dict[str, Any] = {"kind": "diagnose", "target": "mac1", "status": "ok"}
VARIANTS: list[Any] = [
    VALID, {}, [], "x", None, 1, {**VALID, "status": "nope"}, {**VALID, "extra": 1},
    {**VALID, "schema_version": 1}, {**VALID, "schema_version": True},
    {**VALID, "schema_version": 1.0}, {**VALID, "kind": "Bad"}, {**VALID, "target": "x\n"},
    {**VALID, "kind": 5}, {**VALID, "cost_usd": -0.5}, {**VALID, "cost_usd": 10001},
    {**VALID, "cost_usd": True}, {**VALID, "cost_usd": 3}, {**VALID, "retry_at": 0},
    {**VALID, "summary": "é" * 4000}, {**VALID, "summary": "é" * 4001},
    {**VALID, "actions_taken": ["a"] * 200}, {**VALID, "actions_taken": ["a"] * 201},
    {**VALID, "actions_taken": [1]}, {**VALID, "actions_taken": "a"},
    {**VALID, "channels": {"nats": {"ok": True, "latency_ms": None}}},
    {**VALID, "channels": {"nats": {"ok": 1}}},
    {**VALID, "channels": {"nats": {"ok": True, "latency_ms": -1}}},
    {**VALID, "channels": {"nats": {"ok": True, "other": 1}}},
    {**VALID, "channels": {f"c{i}": {"ok": True} for i in range(33)}},
    {**VALID, "failure": {"code": "T1", "status": 429}},
    {**VALID, "failure": {"code": "T1", "status": 429.0}},
    {**VALID, "failure": {"code": "t1"}}, {**VALID, "failure": {"class": "transient"}},
    {**VALID, "pr_url": None}, {**VALID, "pr_url": 5}, {**VALID, "data": []},
    {**VALID, "data": {"anything": [1, {"x": None}]}}, {**VALID, "executor": "claude"},
    {**VALID, "run_id": "a" * 65}, {**VALID, "incident": "ok-1.2_3"},
]


@pytest.mark.parametrize("doc", VARIANTS, ids=range(len(VARIANTS)))
def test_the_quick_schema_check_never_says_yes_where_jsonschema_says_no(doc: Any) -> None:
    quick = fast_checker("agent-result")
    assert quick is not None  # the agent-result schema compiles: the fast path is in use
    refused = schema_errors("agent-result", doc)
    if quick(doc):
        assert refused == []
    if doc is VALID:
        assert quick(doc)
