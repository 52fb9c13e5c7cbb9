"""The index of running remediations: recovery and ``healer status`` read it, not the folder."""

from __future__ import annotations

from pathlib import Path

from healer.config import load_settings
from healer.core import gate
from healer.core.store import FileStore
from healer.overview import _play
from healer.play import remediate
from healer.play.service import PlayService


def _service(tmp_path: Path) -> PlayService:
    settings = load_settings(env={}, overrides={"state_dir": str(tmp_path / "state"),
                                                "results_dir": str(tmp_path / "results"),
                                                "fleet_dir": str(tmp_path / "fleet")})
    return PlayService(settings, FileStore(tmp_path / "state"))


def test_recover_reads_the_running_index(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    store = svc.store
    store.put(*remediate.RUNNING_INDEXED, {"at": 0})
    for i in range(5):
        store.put(remediate.KIND, f"done-{i}", {"status": "resolved"})
    store.add_member(remediate.RUNNING, "crashed")
    store.put(remediate.KIND, "crashed", {"status": "running", "play_id": "p"})
    assert _play(store)["remediations_running"] == ["crashed"]
    assert svc.recover() == 1
    assert store.require(remediate.KIND, "crashed").data["status"] == "interrupted"
    assert store.members(remediate.RUNNING) == []
    assert _play(store)["remediations_running"] == []


def test_an_old_state_dir_is_indexed_once(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    store = svc.store
    store.put(remediate.KIND, "old-running", {"status": "running"})
    store.put(remediate.KIND, "old-done", {"status": "escalated"})
    # Before the index: the first reader (status, or recovery) builds it, once.
    assert _play(store)["remediations_running"] == ["old-running"]
    assert store.get(*remediate.RUNNING_INDEXED) is not None
    assert store.members(remediate.RUNNING) == ["old-running"]
    assert svc.recover() == 1
    assert store.get(*remediate.RUNNING_INDEXED) is not None
    assert store.require(remediate.KIND, "old-running").data["status"] == "interrupted"


def test_a_remediation_leaves_the_index_when_it_ends(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    rem = svc.remediator
    issue = {"id": "issue-1", "issue_type": "tool_mismatch", "agent": "rex",
             "description": "rex is missing declared tools: x"}
    d = rem.claim("play-1", issue)
    assert d.accepted
    key = rem.key_of("play-1", issue)
    assert svc.store.members(remediate.RUNNING) == [key]
    rem._update(key, status="resolved")
    assert svc.store.members(remediate.RUNNING) == []


def test_recover_releases_the_crashed_remediations_gate_claim(tmp_path: Path) -> None:
    """A remediation a crash left running gives its gate claim back at recovery, so it does
    not hold a slot of the global cap (nothing else judges play's claims)."""
    svc = _service(tmp_path)
    issue = {"id": "issue-1", "issue_type": "tool_mismatch", "agent": "rex",
             "description": "rex is missing declared tools: x"}
    assert svc.remediator.claim("play-1", issue).accepted
    key = svc.remediator.key_of("play-1", issue)
    assert remediate.claim_key(key) in gate.admission(svc.store)["active"]
    assert svc.recover() == 1
    assert gate.admission(svc.store)["active"] == {}
    assert svc.remediator.claim("play-1", issue).accepted
