"""The outbox: one file per pending delivery, so a receiver that is down delays nothing else
and a restart loses nothing.

``<state dir>/notify/outbox/<target>--<incident>.json`` holds the latest notice of one
incident for one target: a newer notice replaces a pending older one (Slack and PagerDuty
only need the latest state, and a receiver that was down is not flooded with stale ones).
Each try that fails with a retryable error waits ``backoff_s × 2^(tries-1)`` (at most
``max_backoff_s``); after ``max_attempts`` tries, or a final error, the file moves to
``notify/failed/`` where ``healer status`` and ``/metrics`` show it. Every write is atomic
(``healer.core.files``); names are checked safe before they become paths.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.core.files import atomic_write_json
from healer.core.names import is_safe_name
from healer.core.notify.base import Notice

SEP = "--"
MAX_FAILED = 200  # kept for a person to read; the oldest go first


@dataclass
class Item:
    path: Path
    target: str
    notice: Notice
    tries: int = 0
    next_at: float = 0.0
    last_error: str = ""

    @property
    def key(self) -> str:
        return self.path.name


class Outbox:
    def __init__(self, state_dir: Path, *, max_attempts: int = 8, backoff_s: float = 2.0,
                 max_backoff_s: float = 300.0):
        self.dir = Path(state_dir) / "notify" / "outbox"
        self.failed_dir = Path(state_dir) / "notify" / "failed"
        self.max_attempts, self.backoff_s, self.max_backoff_s = (max_attempts, backoff_s,
                                                                 max_backoff_s)

    def _path(self, folder: Path, target: str, incident: str) -> Path:
        if not (is_safe_name(target) and is_safe_name(incident)) or SEP in target:
            raise ValueError(f"unsafe outbox name {target!r}/{incident!r}")
        return folder / f"{target}{SEP}{incident}.json"

    def put(self, target: str, notice: Notice, *, now: float | None = None) -> Path:
        """Queue ``notice`` for ``target`` (replacing a pending one of the same incident)."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self._path(self.dir, target, notice.incident)
        atomic_write_json(path, {"target": target, "notice": notice.as_dict(), "tries": 0,
                                 "next_at": time.time() if now is None else now,
                                 "last_error": ""}, mode=0o600)
        return path

    def items(self) -> list[Item]:
        out = []
        for path in sorted(self.dir.glob(f"*{SEP}*.json")) if self.dir.is_dir() else []:
            item = _read(path)
            if item is not None:
                out.append(item)
        return out

    def due(self, now: float | None = None) -> list[Item]:
        now = time.time() if now is None else now
        return [i for i in self.items() if i.next_at <= now]

    def done(self, item: Item) -> None:
        _unlink_if_same(item)

    def failed(self, item: Item, detail: str, *, retryable: bool,
               now: float | None = None) -> bool:
        """Count a failed try: back off and keep it, or (``False``) give up on it."""
        now = time.time() if now is None else now
        tries = item.tries + 1
        data = {"target": item.target, "notice": item.notice.as_dict(), "tries": tries,
                "last_error": detail[:300]}
        if retryable and tries < self.max_attempts:
            wait = min(self.backoff_s * 2 ** (tries - 1), self.max_backoff_s)
            current = _read(item.path)
            if current is not None and current.notice != item.notice:
                return True  # a newer notice replaced it meanwhile: that one goes next
            atomic_write_json(item.path, {**data, "next_at": now + wait}, mode=0o600)
            return True
        self.failed_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write_json(self._path(self.failed_dir, item.target, item.notice.incident),
                          {**data, "failed_at": now}, mode=0o600)
        _unlink_if_same(item)
        old = sorted(self.failed_dir.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for p in old[:-MAX_FAILED]:
            p.unlink(missing_ok=True)
        return False

    def failures(self) -> list[dict[str, Any]]:
        out = []
        for path in self.failed_dir.glob("*.json") if self.failed_dir.is_dir() else []:
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(path.read_text())
                out.append({"target": data["target"], "incident": data["notice"]["incident"],
                            "state": data["notice"]["state"], "tries": data["tries"],
                            "error": data.get("last_error", ""),
                            "failed_at": data.get("failed_at")})
        return sorted(out, key=lambda d: d.get("failed_at") or 0, reverse=True)


def _read(path: Path) -> Item | None:
    try:
        data = json.loads(path.read_text())
        return Item(path, str(data["target"]), Notice.from_dict(data["notice"]),
                    int(data.get("tries", 0)), float(data.get("next_at", 0)),
                    str(data.get("last_error", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a half-gone or foreign file: not ours to send


def _unlink_if_same(item: Item) -> None:
    current = _read(item.path)
    if current is not None and current.notice == item.notice:
        item.path.unlink(missing_ok=True)
