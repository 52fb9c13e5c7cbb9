"""Fencing with a real paused process: a leader stopped with SIGSTOP wakes up after another
replica took its duty over, and its late write is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from healer.core.duties import Duties, fenced_update
from healer.core.store import FileStore
from healer.testing.wait import wait_for

TTL = 1.0

OLD_LEADER = r"""
import sys, time
from pathlib import Path
from healer.core.duties import Duties, fenced_update
from healer.core.store import FileStore
from healer.errors import ConflictError

store = FileStore(Path(sys.argv[1]))
go = Path(sys.argv[2])
duties = Duties(store, "n1/old", float(sys.argv[3]))
duties.add("notify")
assert duties.tick()["notify"]
token = duties.fence("notify")
print(token, flush=True)  # holding the duty, work started under this token
while not go.exists():  # the test stops this process (SIGSTOP) while it waits here
    time.sleep(0.01)
outcomes = []
try:
    duties.check("notify", token)  # before an irreversible side effect (a notification)
    outcomes.append("sent")
except ConflictError:
    outcomes.append("check-refused")
try:  # a shared record written under the old token
    fenced_update(store, "shared", "notice-1", lambda cur: {**(cur or {}), "by": "old"},
                  duty="notify", token=token)
    outcomes.append("written")
except ConflictError:
    outcomes.append("write-refused")
print(" ".join(outcomes), flush=True)
"""


def test_a_paused_leaders_late_write_is_refused(tmp_path: Path) -> None:
    root, go = tmp_path / "state", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", OLD_LEADER, str(root), str(go), str(TTL)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        old_token = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGSTOP)
        store = FileStore(root)
        successor = Duties(store, "n2/new", TTL)
        successor.add("notify")
        wait_for(lambda: successor.tick()["notify"], timeout=10)  # once the old lease expired
        new_token = successor.fence("notify")
        assert new_token > old_token
        fenced_update(store, "shared", "notice-1", lambda cur: {**(cur or {}), "by": "new"},
                      duty="notify", token=new_token)
        go.touch()
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait(5)
    assert out.strip() == "check-refused write-refused", err
    assert store.require("shared", "notice-1").data["by"] == "new"
