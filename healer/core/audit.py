"""The audit trail: every decision and step about every incident, one JSON object per line.

``<state>/heal-audit.jsonl`` is appended (one ``O_APPEND`` write per line) and rotated under a
lock at 20 MiB (the previous file
is kept as ``heal-audit.jsonl.1``). Writing it never fails the step it describes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock

log = logging.getLogger(__name__)

AUDIT_FILE = "heal-audit.jsonl"
MAX_AUDIT_BYTES = 20 << 20


class Audit:
    """Append-only, process-safe, size-bounded."""

    def __init__(self, state_dir: Path | str, clock: Callable[[], float] = time.time):
        self.path = Path(state_dir) / AUDIT_FILE
        self._clock = clock

    def write(self, event: str, incident: str = "", **fields: Any) -> None:
        self.write_many([(event, incident, fields)])

    def write_many(self, events: Sequence[tuple[str, str, Mapping[str, Any]]]) -> None:
        """Several ``(event, incident, fields)`` lines of one step, appended together: one
        open and one write for all (a new incident's ``opened`` and ``gate`` lines were two
        of each, on the hot path of reports that open incidents)."""
        if not events:
            return
        ts = round(self._clock(), 3)
        text = "".join(
            json.dumps({"ts": ts, "event": event, "incident": incident, **fields},
                       sort_keys=True, ensure_ascii=False, default=str) + "\n"
            for event, incident, fields in events)
        try:
            self._rotate_if_full()
            # One O_APPEND write of lines this short lands whole, between other processes'
            # lines: no lock needed (the lock is for rotation only).
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
        except OSError:
            log.exception("could not append to the audit trail %s", self.path)

    def _rotate_if_full(self) -> None:
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return
        if size <= MAX_AUDIT_BYTES:
            return
        with FileLock(str(self.path) + ".lock", timeout=30), \
                contextlib.suppress(FileNotFoundError):
            if os.stat(self.path).st_size > MAX_AUDIT_BYTES:  # nobody rotated meanwhile
                os.replace(self.path, self.path.with_suffix(".jsonl.1"))

    def read(self, incident: str = "", *, limit: int = 0) -> list[dict[str, Any]]:
        """The events (of one incident), oldest first; the newest ``limit`` if given."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            if not line.strip() or (incident and f'"{incident}"' not in line):
                continue  # cheap pre-filter before parsing
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a torn line from a crash mid-append
            if not incident or rec.get("incident") == incident:
                out.append(rec)
        return out[-limit:] if limit else out
