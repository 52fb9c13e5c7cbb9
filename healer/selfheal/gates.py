"""The gates a report passes before a healing agent is dispatched, in the reference order.

1. **no recursion** — a report made by a healing agent is never healed (``recursion``);
2. **enabled** — ``selfheal.enabled`` (``disabled``);
3. **severity** — the verdict (0 critical … 4 info) must be at or below
   ``selfheal.severity_threshold`` (``below_threshold``);
4. **novelty** — one active attempt (or open PR) per fingerprint; a duplicate joins it
   (``already_investigating`` with that attempt's id);
5. **cooldown** — ``selfheal.cooldown_s`` after the fingerprint's last attempt ended;
6. **concurrency cap** — at most ``selfheal.max_concurrent`` attempts investigating;
7. **circuit breaker** — stop when the latest ``selfheal.breaker_window`` finished attempts all
   failed, timed out or were blocked by anonymisation (``unfixable`` does not count); it lets
   one attempt through again ``selfheal.breaker_reset_s`` after the last of them;
8. **model available** — an executor that can run the healing agent (``no_model``).

Gates 4–8 and the claim are one compare-and-set on the admission record
(``heal-admission/gate``), so any number of processes racing with one fingerprint start
exactly one attempt, and the cap holds across processes. Rejections never feed the breaker.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.core.store import FileStore, Store
from healer.selfheal.attempts import (
    ADMISSION,
    BREAKER_FAILURES,
    GATE_KEY,
    empty_admission,
)

ACCEPTED = "accepted"
RECURSION = "recursion"
DISABLED = "disabled"
BELOW_THRESHOLD = "below_threshold"
ALREADY_INVESTIGATING = "already_investigating"
COOLDOWN = "cooldown"
CONCURRENCY_CAP = "concurrency_cap"
CIRCUIT_BREAKER = "circuit_breaker"
NO_MODEL = "no_model"

SEVERITIES = ("critical", "high", "medium", "low", "info")
MEDIUM = 2

# Verdicts from the error itself (the class name without its module); a caller's hint only
# refines a medium verdict.
_INFO_TYPES = re.compile(r"CancelledError|KeyboardInterrupt|SystemExit|GeneratorExit|"
                         r"StopIteration|StopAsyncIteration|\w*Warning")
_LOW_TYPES = re.compile(r"\w*Timeout\w*|\w*TimedOut\w*|ConnectError|ConnectionError|"
                        r"ConnectionResetError|ConnectionRefusedError|BrokenPipeError|"
                        r"RateLimitError|TooManyRequests\w*|ServiceUnavailable\w*|"
                        r"RemoteDisconnected|ReadError|WriteError|NetworkError")
_HIGH_TYPES = re.compile(r"AttributeError|TypeError|NameError|KeyError|IndexError|"
                         r"ImportError|ModuleNotFoundError|NotImplementedError|AssertionError|"
                         r"UnboundLocalError|RecursionError|ZeroDivisionError|\w*IntegrityError|"
                         r"\w*ProgrammingError|Undefined\w*Error|\w*SyntaxError|"
                         r"\w*ViolationError|InternalError|\w*OperationalError")
_LOW_WORDS = ("rate limit", "rate-limit", "ratelimit", "too many requests", " 429",
              "temporarily unavailable", "try again later", "timed out", "timeout")
_CRITICAL_WORDS = ("data loss", "corrupt", "security", "leak", "privilege",
                   "unauthorized access", "unauthorised access", "injection")


def severity_verdict(error_type: str, message: str, hint: str | None = None) -> int:
    """0 critical … 4 info: from the error, then the hint if the verdict is medium."""
    name = error_type.rsplit(".", 1)[-1].strip()
    if _INFO_TYPES.fullmatch(name):
        return 4
    low = message.lower()
    if _LOW_TYPES.fullmatch(name) or any(w in low for w in _LOW_WORDS):
        return 3
    if any(w in low for w in _CRITICAL_WORDS):
        return 0
    verdict = 1 if _HIGH_TYPES.fullmatch(name) else MEDIUM
    if verdict == MEDIUM and hint:
        hint = hint.strip().lower()
        if hint in SEVERITIES:
            return SEVERITIES.index(hint)
    return verdict


@dataclass(frozen=True)
class Limits:
    """The knobs gates 4–8 read (``selfheal.*``)."""

    cooldown_s: float = 3600.0
    max_concurrent: int = 2
    breaker_window: int = 5
    breaker_reset_s: float = 3600.0

    @classmethod
    def from_settings(cls, sh: Any) -> Limits:
        return cls(cooldown_s=sh.cooldown_s, max_concurrent=sh.max_concurrent,
                   breaker_window=sh.breaker_window, breaker_reset_s=sh.breaker_reset_s)


@dataclass(frozen=True)
class Decision:
    """What the gates said. ``attempt_id``: the new attempt, or the one a duplicate joins."""

    reason: str
    message: str
    attempt_id: str = ""

    @property
    def accepted(self) -> bool:
        return self.reason == ACCEPTED


def _minutes(seconds: float) -> str:
    m = max(1, round(seconds / 60))
    return f"{m} min"


def decide(adm: dict[str, Any], fingerprint: str, now: float, limits: Limits,
           model_available: Callable[[], bool]) -> Decision:
    """Gates 4–8 over the admission record; pure, so it can run inside compare-and-set."""
    active = adm["active"].get(fingerprint)
    if active:
        return Decision(ALREADY_INVESTIGATING, "This error is already under investigation",
                        active["attempt_id"])
    pr = adm["open_prs"].get(fingerprint)
    if pr:
        return Decision(ALREADY_INVESTIGATING, "This error is already under investigation: a "
                        "fix PR is open and awaiting review", pr)
    ended = adm["ended"].get(fingerprint)
    if ended is not None and now - ended < limits.cooldown_s:
        return Decision(COOLDOWN, "Cooldown period active: the last attempt for this error "
                        f"ended {_minutes(now - ended)} ago; a new attempt is possible in "
                        f"{_minutes(limits.cooldown_s - (now - ended))}. Continue normally.")
    if len(adm["active"]) >= limits.max_concurrent:
        return Decision(CONCURRENCY_CAP, f"Concurrency cap reached: {len(adm['active'])} "
                        "healing agents are already investigating other errors. Continue "
                        "normally.")
    window = adm["outcomes"][-limits.breaker_window:]
    tripped = len(window) >= limits.breaker_window and all(
        o["status"] in BREAKER_FAILURES for o in window)
    # Half-open: long after the last failure, with nothing running, one attempt may try.
    if tripped and (adm["active"] or now - window[-1]["at"] < limits.breaker_reset_s):
        return Decision(CIRCUIT_BREAKER, f"Circuit breaker open: the last "
                        f"{limits.breaker_window} healing attempts all failed. Continue "
                        "normally; a person has to look first.")
    if not model_available():
        return Decision(NO_MODEL, "No model available to run a healing agent here. Continue "
                        "normally.")
    return Decision(ACCEPTED, "Healing agent dispatched")


class AdmissionReader:
    """Reads the admission record, re-parsing it only when the file changed.

    Every write of a FileStore record is a rename of a new file, so the file's identity
    (inode, mtime, ctime, size) changes with each revision; other stores are simply read.
    A stale read can only reject (the acceptance itself is re-decided under compare-and-set).
    """

    def __init__(self, store: Store):
        self.store = store
        root = getattr(store, "root", None)
        self._path = (Path(root) / "records" / ADMISSION / f"{GATE_KEY}.json"
                      if isinstance(store, FileStore) and root is not None else None)
        self._key: tuple[int, ...] | None = None
        self._data: dict[str, Any] = empty_admission()

    def read(self) -> dict[str, Any]:
        if self._path is not None:
            try:
                st = os.stat(self._path)
            except FileNotFoundError:
                return empty_admission()
            key = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
            if key == self._key:
                return self._data
        rec = self.store.get(ADMISSION, GATE_KEY)
        self._data = rec.data if rec else empty_admission()
        self._key = key if self._path is not None else None
        return self._data


def admit(store: Store, fingerprint: str, new_id: Callable[[], str], now: float, limits: Limits,
          model_available: Callable[[], bool], reader: AdmissionReader | None = None, *,
          record: Callable[[str], object]) -> Decision:
    """Run gates 4–8 and, if they pass, claim the fingerprint and a slot in one atomic write
    for a new attempt (``new_id()`` names it; only called then), then ``record(attempt_id)``.

    Claiming and recording are one step: if ``record`` raises, the slot and the fingerprint
    are released before the error propagates, so a write that fails can never leave a slot
    taken (two such failures would otherwise jam the cap for everyone)."""
    outcome: dict[str, Decision] = {}

    def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
        adm = cur or empty_admission()
        decision = decide(adm, fingerprint, now, limits, model_available)
        outcome["d"] = decision
        if not decision.accepted:
            return None  # nothing to write: rejections leave no trace in the record
        adm["active"][fingerprint] = {"attempt_id": attempt_id, "since": now}
        # Forget cooldowns that are over so the record stays small.
        adm["ended"] = {k: v for k, v in adm["ended"].items()
                        if now - v < limits.cooldown_s and k != fingerprint}
        return adm

    # The hot path (duplicates, cooldowns, a full cap) is one read: no lock, no copy, no write.
    adm = reader.read() if reader is not None else AdmissionReader(store).read()
    first = decide(adm, fingerprint, now, limits, model_available)
    if not first.accepted:
        return first
    attempt_id = new_id()
    store.update(ADMISSION, GATE_KEY, fn)  # decides again on the latest revision, atomically
    d = outcome["d"]
    if not d.accepted:
        return d
    try:
        record(attempt_id)
    except BaseException:
        _release(store, fingerprint, attempt_id)
        raise
    return Decision(d.reason, d.message, attempt_id)


def _release(store: Store, fingerprint: str, attempt_id: str) -> None:
    """Undo a claim whose attempt was never recorded (no cooldown, nothing for the breaker)."""

    def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
        if cur is None or cur["active"].get(fingerprint, {}).get("attempt_id") != attempt_id:
            return None
        del cur["active"][fingerprint]
        return cur

    store.update(ADMISSION, GATE_KEY, fn)
