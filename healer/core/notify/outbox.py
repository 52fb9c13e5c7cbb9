"""The outbox: one store record per pending delivery, so a receiver that is down delays
nothing else, a restart loses nothing, and on a shared store (``store.backend: jetstream``)
the replica that leads the ``notify`` duty next sends what another one queued.

Records (``healer.core.store``; the file store keeps them under ``<state>/records/``)::

    notify-outbox/<target>--<incident>   {target, notice, tries, next_at, last_error,
                                          claim: {by, until} while it is being sent}
    notify-failed/<target>--<incident>   {target, notice, tries, last_error, failed_at}

1. **Put.** The record holds the latest notice of one incident for one target: a newer
   notice replaces a pending older one (Slack and PagerDuty only need the latest state, and
   a receiver that was down is not flooded with stale ones).
2. **Retry.** Each try that fails with a retryable error waits ``backoff_s × 2^(tries-1)``
   (at most ``max_backoff_s``), written with compare-and-set on the revision the try read:
   a newer notice put meanwhile wins and goes next.
3. **Give up.** After ``max_attempts`` tries, or a final error, the delivery moves to
   ``notify-failed`` (at most ``max_failed``, 200; the oldest dropped), which
   ``healer status`` and ``/metrics`` show (``failures``).
4. **Claim, send, done.** Before a delivery is sent it is claimed: the claim is written at
   the revision that was listed (compare-and-set), so of two senders with one listing (a
   paused leader and its successor, or a listing made before the last send finished) one
   sends. ``due`` skips claimed deliveries. Once sent it is deleted at the claimed revision:
   a newer notice put while it was being sent survives and goes next.
5. **Abandoned.** A claim that outlived its ``until`` belongs to a sender that stopped while
   sending (killed, its host gone): whether the receiver got it is unknown, so it is not
   sent again but given up, with that reason, where a person sees it (``abandoned``).
6. **Upgrade.** Files an older healer left in ``<state>/notify/outbox/`` and
   ``notify/failed/`` are moved into the store once at the loop's start (``adopt_files``),
   so an upgrade loses no pending delivery.

Names are checked safe before they become keys; a key longer than a store key may be
(128 characters) ends in a hash of the incident instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.core.names import is_safe_name
from healer.core.notify.base import Notice
from healer.core.store import Record, Store
from healer.errors import ConflictError, StoreError

log = logging.getLogger(__name__)

OUTBOX, FAILED = "notify-outbox", "notify-failed"
SEP = "--"
MAX_FAILED = 200  # kept for a person to read; the oldest go first
MAX_KEY = 128  # a store key is a safe name: at most 128 characters


@dataclass
class Item:
    """One pending delivery as read from the store, at ``revision``."""

    key: str
    revision: int
    target: str
    notice: Notice
    tries: int = 0
    next_at: float = 0.0
    last_error: str = ""
    claimed_by: str = ""
    claimed_until: float = 0.0  # 0: not claimed


def item_key(target: str, incident: str) -> str:
    """The record key of ``incident``'s delivery to ``target`` (``ValueError`` if unsafe)."""
    if not (is_safe_name(target) and is_safe_name(incident)) or SEP in target:
        raise ValueError(f"unsafe outbox name {target!r}/{incident!r}")
    key = f"{target}{SEP}{incident}"
    if len(key) <= MAX_KEY:
        return key
    tail = hashlib.sha256(incident.encode()).hexdigest()[:16]
    return f"{key[:MAX_KEY - 17]}-{tail}"


class Outbox:
    def __init__(self, store: Store, *, max_attempts: int = 8, backoff_s: float = 2.0,
                 max_backoff_s: float = 300.0, max_failed: int = MAX_FAILED):
        self.store = store
        self.max_attempts, self.backoff_s, self.max_backoff_s = (max_attempts, backoff_s,
                                                                 max_backoff_s)
        self.max_failed = max_failed

    def put(self, target: str, notice: Notice, *, now: float | None = None) -> str:
        """Queue ``notice`` for ``target`` (replacing a pending one of the same incident);
        the record's key."""
        key = item_key(target, notice.incident)
        self.store.put(OUTBOX, key, _data(target, notice, 0, "")
                       | {"next_at": time.time() if now is None else now})
        return key

    def items(self) -> list[Item]:
        return [item for rec in self._records(OUTBOX)
                if (item := _item(rec.key, rec.revision, rec.data)) is not None]

    def _records(self, kind: str) -> list[Record]:
        """Every record of ``kind``; one the store cannot read (a file store's record cut
        short by a power loss) is skipped, so it holds up no other delivery."""
        out = []
        for key in self.store.keys(kind):
            try:
                rec = self.store.get(kind, key)
            except StoreError as exc:
                log.warning("notify: %s/%s unreadable, skipped: %s", kind, key, exc)
                continue
            if rec is not None:  # None: done meanwhile
                out.append(rec)
        return out

    def due(self, now: float | None = None) -> list[Item]:
        """The deliveries to send now: their time has come and nobody is sending them."""
        now = time.time() if now is None else now
        return [i for i in self.items() if not i.claimed_until and i.next_at <= now]

    def claim(self, item: Item, by: str, *, until: float,
              now: float | None = None) -> Item | None:
        """``item`` claimed for sending by ``by`` until ``until``, or None if it changed
        since it was listed (sent, replaced, claimed by another) or is claimed still."""
        now = time.time() if now is None else now
        if item.claimed_until > now:
            return None
        data = _data(item.target, item.notice, item.tries, item.last_error) | {
            "next_at": item.next_at, "claim": {"by": by, "until": until}}
        try:
            rec = self.store.put(OUTBOX, item.key, data, expected_revision=item.revision)
        except ConflictError:
            return None
        return _item(rec.key, rec.revision, rec.data)

    def abandoned(self, items: list[Item], now: float | None = None) -> list[Item]:
        """Those of ``items`` whose sender's claim ran out (it stopped while sending)."""
        now = time.time() if now is None else now
        return [i for i in items if i.claimed_until and i.claimed_until <= now]

    def done(self, item: Item) -> bool:
        """Remove ``item`` if it is still the notice that was read; False if it changed
        (a newer notice was put meanwhile: that one goes next) or is gone."""
        try:
            return self.store.delete(OUTBOX, item.key, expected_revision=item.revision)
        except ConflictError:
            return False

    def failed(self, item: Item, detail: str, *, retryable: bool,
               now: float | None = None) -> bool:
        """Count a failed try: back off and keep it, or (``False``) give up on it."""
        now = time.time() if now is None else now
        tries = item.tries + 1
        data = _data(item.target, item.notice, tries, detail[:300])
        if retryable and tries < self.max_attempts:
            wait = min(self.backoff_s * 2 ** (tries - 1), self.max_backoff_s)
            with contextlib.suppress(ConflictError):  # replaced meanwhile: that one goes next
                self.store.put(OUTBOX, item.key, data | {"next_at": now + wait},
                               expected_revision=item.revision)
            return True
        self.store.put(FAILED, item.key, data | {"failed_at": now})
        self.done(item)
        self._trim_failed()
        return False

    def _trim_failed(self) -> None:
        if len(self.store.keys(FAILED)) <= self.max_failed:
            return
        recs = sorted(self._records(FAILED), key=_failed_at)
        for rec in recs[:len(recs) - self.max_failed]:
            with contextlib.suppress(ConflictError):
                self.store.delete(FAILED, rec.key, expected_revision=rec.revision)

    def failures(self) -> list[dict[str, Any]]:
        out = []
        for rec in self._records(FAILED):
            data = rec.data
            with contextlib.suppress(KeyError, TypeError):
                out.append({"target": data["target"], "incident": data["notice"]["incident"],
                            "state": data["notice"]["state"], "tries": data["tries"],
                            "error": data.get("last_error", ""),
                            "failed_at": data.get("failed_at")})
        return sorted(out, key=lambda d: d.get("failed_at") or 0, reverse=True)

    # --- the upgrade from the file outbox ---------------------------------------------------

    def adopt_files(self, state_dir: Path) -> int:
        """Move the deliveries an older healer left as files in ``<state_dir>/notify/outbox/``
        (and ``notify/failed/``) into the store; how many. A record already in the store
        is newer and stays; a file that cannot be read is left for a person."""
        moved = 0
        for folder, kind in (("outbox", OUTBOX), ("failed", FAILED)):
            root = Path(state_dir) / "notify" / folder
            for path in sorted(root.glob(f"*{SEP}*.json")) if root.is_dir() else []:
                found = _from_file(path, kind)
                if found is None:
                    log.warning("notify: %s is not a delivery healer can read; left in place",
                                path)
                    continue
                with contextlib.suppress(ConflictError):  # the store's record is newer
                    self.store.create(kind, *found)
                path.unlink(missing_ok=True)
                moved += 1
            with contextlib.suppress(OSError):
                root.rmdir()  # only once empty
        with contextlib.suppress(OSError):
            (Path(state_dir) / "notify").rmdir()
        if moved:
            log.info("notify: moved %d deliveries from %s/notify into the store", moved,
                     state_dir)
        return moved


def _from_file(path: Path, kind: str) -> tuple[str, dict[str, Any]] | None:
    """The key and record of an older healer's outbox (or failed) file, or None."""
    try:
        data = json.loads(path.read_text())
        item = _item(path.stem, 0, data)
        if item is None:
            return None
        record = _data(item.target, item.notice, item.tries, item.last_error)
        if kind == OUTBOX:
            record["next_at"] = item.next_at
        else:
            record["failed_at"] = float(data.get("failed_at") or path.stat().st_mtime)
        return item_key(item.target, item.notice.incident), record
    except (OSError, ValueError, TypeError):
        return None


def _failed_at(rec: Record) -> float:
    try:
        return float(rec.data["failed_at"])
    except (KeyError, TypeError, ValueError):
        return rec.updated_at


def _data(target: str, notice: Notice, tries: int, last_error: str) -> dict[str, Any]:
    return {"target": target, "notice": notice.as_dict(), "tries": tries,
            "last_error": last_error}


def _item(key: str, revision: int, data: dict[str, Any]) -> Item | None:
    try:
        claim = data.get("claim") or {}
        return Item(key, revision, str(data["target"]), Notice.from_dict(data["notice"]),
                    int(data.get("tries", 0)), float(data.get("next_at", 0)),
                    str(data.get("last_error", "")), str(claim.get("by", "")),
                    float(claim.get("until", 0)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # a foreign or damaged record: not ours to send
