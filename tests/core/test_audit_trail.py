"""The audit trail: a step's lines land in order, whole, and in one append."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from healer.core import gate
from healer.core.audit import Audit
from healer.core.incidents import Ledger, Signal
from healer.core.store import FileStore


def test_lines_of_one_step_keep_their_order(tmp_path: Path) -> None:
    audit = Audit(tmp_path, clock=lambda: 12.0)
    audit.write_many([("opened", "code-k", {"source": "s"}), ("gate", "code-k", {"n": 1})])
    audit.write("resolved", "code-k")
    assert [(e["event"], e["ts"]) for e in audit.read("code-k")] == [
        ("opened", 12.0), ("gate", 12.0), ("resolved", 12.0)]


def test_nothing_to_write_creates_no_file(tmp_path: Path) -> None:
    Audit(tmp_path).write_many([])
    assert not (tmp_path / "heal-audit.jsonl").exists()


def test_a_refused_new_incident_is_one_append(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``opened`` and ``gate`` lines of a new incident the gate refused: both, in that
    order, written by one ``write(2)`` (no other process's line can fall between them)."""
    state = tmp_path / "state"
    ledger = Ledger(FileStore(state), audit=Audit(state))
    trail = str(state / "heal-audit.jsonl")
    fds: set[int] = set()
    writes: list[bytes] = []
    real_open, real_write = os.open, os.write

    def opened(path: Any, *a: Any, **kw: Any) -> int:
        fd = real_open(path, *a, **kw)
        if os.fspath(path) == trail:
            fds.add(fd)
        return fd

    def wrote(fd: int, data: Any) -> int:
        if fd in fds:
            writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(os, "write", wrote)
    ledger.receive(Signal(kind="code", key="k", source="report_error", trust="trusted"),
                   decision=gate.Decision(gate.CONCURRENCY_CAP, "busy"))
    monkeypatch.undo()
    assert len(writes) == 1
    assert [e["event"] for e in Audit(state).read("code-k")] == ["opened", "gate"]
