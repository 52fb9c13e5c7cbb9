"""Records cached on the report path are never older than a plain read.

``StampedRecords`` (the silences and a fingerprint's newest attempt, read by every
report_error) parses a record again only when its stamp changed: a write by this process, by
another store object or by another process is seen by the very next read.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from healer.config import Settings
from healer.core.silences import Matcher, Silences
from healer.core.stamped import StampedRecords
from healer.core.store import FileStore
from healer.selfheal.attempts import Attempts
from healer.selfheal.service import SelfHealService

WRITE = """
import sys
import time
from healer.core.store import FileStore
FileStore(sys.argv[1]).put("things", "one", {"v": sys.argv[2]})
"""


def write_elsewhere(root: Path, value: str) -> None:
    """A write by another process (its own FileStore, its own memory)."""
    subprocess.run([sys.executable, "-c", WRITE, str(root), value], check=True, timeout=60)


def test_absent_written_changed_deleted(tmp_path: Path) -> None:
    """Absent, then created, changed and deleted by others: each read sees the store as it
    is, and an unchanged record is the very same object (not parsed again)."""
    store = FileStore(tmp_path)
    cached = StampedRecords(store, "things")
    assert cached.get("one") is None
    write_elsewhere(tmp_path, "a")
    first = cached.get("one")
    assert first == {"v": "a"}
    assert cached.get("one") is first
    write_elsewhere(tmp_path, "b")
    assert cached.get("one") == {"v": "b"}
    FileStore(tmp_path).put("things", "one", {"v": "c"})  # another store object, this process
    assert cached.get("one") == {"v": "c"}
    FileStore(tmp_path).delete("things", "one")
    assert cached.get("one") is None


def test_a_silence_made_elsewhere_covers_the_very_next_report(tmp_path: Path) -> None:
    """The report path reads silences through the cache: a silence added right after a
    report (by a store object of its own, as the API would) covers the next one."""
    settings = Settings(state_dir=str(tmp_path / "state"))
    settings.selfheal.repo = str(tmp_path)
    service = SelfHealService(settings, FileStore(tmp_path / "state"), launcher=lambda _a: None,
                              cwd=tmp_path, env={})
    report = {"error_type": "KeyError", "error_message": "no user_id in row",
              "traceback": f'  File "{tmp_path}/app/x.py", line 3, in f\n'}
    first = service.report(report)
    assert first.get("reason") != "silenced", first
    other = Silences(FileStore(tmp_path / "state"))
    made = other.add([Matcher("kind", "=", "code")], ends_at=time.time() + 3600, author="ops")
    second = service.report(report)
    assert second["reason"] == "silenced" and made["id"] in second["message"], second


def test_newest_attempt_follows_the_index(tmp_path: Path) -> None:
    """A fingerprint's newest attempt: none, then the one indexed, then its change."""
    store = FileStore(tmp_path)
    attempts = Attempts(store)
    assert attempts.newest_for("fp1") is None
    store.put("heal-attempts", "a1", {"attempt_id": "a1", "status": "running"})
    store.put("heal-fingerprints", "fp1", {"attempts": ["a1"]})
    assert attempts.newest_for("fp1") == {"attempt_id": "a1", "status": "running"}
    FileStore(tmp_path).put("heal-attempts", "a1", {"attempt_id": "a1", "status": "merged"})
    assert attempts.newest_for("fp1") == {"attempt_id": "a1", "status": "merged"}
