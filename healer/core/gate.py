"""The gate every incident passes before an agent is started for it — one for every kind.

In order, each with the reason recorded on the incident when it says no:

1. **no recursion** — trouble reported by a healing agent is never healed (``recursion``);
2. **enabled** — the kind is switched on (``disabled``);
3. **severity** — at or above the kind's threshold (``below_threshold``);
   **silence** — no active silence covers it (``silenced``: recorded and counted, no agent,
   no notification; ``healer.core.silences``);
   **approval** (the code kind) — an incident its trust says needs a person waits for one
   (``awaiting_approval``, retryable; ``healer.core.approval``), then passes once approved;
4. **novelty** — one attempt (or open fix) per novelty key; a duplicate joins it
   (``already_investigating`` with that attempt's id);
5. **cooldown** — the kind's ``cooldown_s`` after the key's last attempt ended;
6. **concurrency** — the kind's cap on attempts running, and ``executor.max_concurrent``
   over every kind together (``concurrency_cap``; the incident stays open and is retried);
7. **circuit breaker, per kind and lane** — when the latest ``breaker_window`` finished
   attempts of the kind in the policy's ``lane`` all failed; one attempt may try again
   ``breaker_reset_s`` after the last. Attempts for anonymous incidents have a lane of their
   own (``healer.core.trust.lane``), so their failures never stop trusted reports;
8. **executor available** — something can run the agent (``no_model``), in a sandbox that
   starts here when it runs commands (``no_sandbox``; ``healer doctor`` says why).

Gates 1–3, the silence and the approval step are the caller's (no admission record needed);
4–8 and the claim are one compare-and-set on the admission record (``heal-admission/gate``),
so any number of processes racing with one key start exactly one attempt and the caps hold
across processes.
Refusals never feed the breaker, and neither does a ``deferred`` outcome (the agent's model
API was rate-limited or overloaded: no attempt was made, so no cooldown starts either).

An attempt **on hold** (healer's own model access is held: a rejected key, a rate limit, a
spent budget) keeps its key (``on_hold``: a duplicate joins it) but no slot, feeds nothing to
the breaker and starts no cooldown; ``resume`` runs gates 5–8 for it again and, if they pass,
makes it active under the same attempt id.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.core.store import FileStore, Store

ADMISSION = "heal-admission"
GATE_KEY = "gate"
MAX_OUTCOMES = 50
KEEP_ENDED_S = 7 * 86400.0

ACCEPTED = "accepted"
RECURSION = "recursion"
DISABLED = "disabled"
BELOW_THRESHOLD = "below_threshold"
ALREADY_INVESTIGATING = "already_investigating"
COOLDOWN = "cooldown"
CONCURRENCY_CAP = "concurrency_cap"
CIRCUIT_BREAKER = "circuit_breaker"
NO_MODEL = "no_model"
NO_SANDBOX = "no_sandbox"
AWAITING_APPROVAL = "awaiting_approval"
# A person's silence covers it (``healer.core.silences``): recorded and counted, no agent.
# Not retryable: the first signal after the silence ends asks the gate again.
SILENCED = "silenced"
REASONS = (ACCEPTED, RECURSION, DISABLED, BELOW_THRESHOLD, SILENCED, AWAITING_APPROVAL,
           ALREADY_INVESTIGATING, COOLDOWN, CONCURRENCY_CAP, CIRCUIT_BREAKER, NO_MODEL,
           NO_SANDBOX)
# Not final: a later pass (or a person's approval) may admit it. The retry passes skip an
# awaiting_approval incident until it is approved (``healer.core.approval.ready``).
RETRYABLE = frozenset({AWAITING_APPROVAL, COOLDOWN, CONCURRENCY_CAP, CIRCUIT_BREAKER, NO_MODEL,
                       NO_SANDBOX})
# An outcome that is not an attempt: the agent run waited out a transient model API failure
# past its time limit (the agent result status ``deferred``). Settled like a released claim.
DEFERRED = "deferred"


@dataclass(frozen=True)
class Policy:
    """What one kind's gates read."""

    kind: str = "code"
    cooldown_s: float = 3600.0
    max_concurrent: int = 2
    breaker_window: int = 5  # 0: this kind has no breaker
    breaker_reset_s: float = 3600.0
    global_max: int = 0  # executor.max_concurrent over every kind; 0 = no global cap
    # False: an attempt of this kind takes no agent slot itself (a fleet episode: the agents
    # it starts take theirs from the dispatcher), so other kinds' global cap leaves it out.
    holds_slot: bool = True
    # The breaker lane ("" trusted, "anonymous"): outcomes of one lane never trip another's.
    lane: str = ""


@dataclass(frozen=True)
class Decision:
    """What the gate said. ``attempt_id``: the new attempt, or the one a duplicate joins."""

    reason: str
    message: str
    attempt_id: str = ""

    @property
    def accepted(self) -> bool:
        return self.reason == ACCEPTED


def _minutes(seconds: float) -> str:
    return f"{max(1, round(seconds / 60))} min"


def _kind_of(entry: dict[str, Any]) -> str:
    return str(entry.get("kind") or "code")  # records from before kinds were code's


def _failed(outcome: dict[str, Any]) -> bool:
    if outcome.get("status") == DEFERRED:
        return False  # never a failed attempt, whatever wrote it
    if "breaker" in outcome:
        return bool(outcome["breaker"])
    return outcome.get("status") in _OLD_FAILURES  # written before outcomes said so


_OLD_FAILURES = frozenset({"failed", "timeout", "anonymization_failed"})


def decide(adm: dict[str, Any], novelty: str, now: float, policy: Policy,
           available: Callable[[], bool | str], *, resuming: str = "") -> Decision:
    """Gates 4–8 over the admission record; pure, so it can run inside compare-and-set.
    ``available()`` is True, or False (no model), or the reason why not (``NO_SANDBOX``).
    ``resuming``: the attempt on hold for ``novelty`` that asks again (its own hold is no
    duplicate)."""
    active = adm["active"].get(novelty)
    if active:
        return Decision(ALREADY_INVESTIGATING, "This error is already under investigation",
                        active["attempt_id"])
    waiting = adm.get("on_hold", {}).get(novelty)
    if waiting and waiting != resuming:
        return Decision(ALREADY_INVESTIGATING, "This error is already under investigation: "
                        "the attempt waits for healer's model access to come back", waiting)
    held = adm["open_prs"].get(novelty)
    if held:
        return Decision(ALREADY_INVESTIGATING, "This error is already under investigation: a "
                        "fix PR is open and awaiting review", held)
    ended = adm["ended"].get(novelty)
    if ended is not None and now - ended < policy.cooldown_s:
        return Decision(COOLDOWN, "Cooldown period active: the last attempt for this error "
                        f"ended {_minutes(now - ended)} ago; a new attempt is possible in "
                        f"{_minutes(policy.cooldown_s - (now - ended))}. Continue normally.")
    mine = sum(1 for e in adm["active"].values() if _kind_of(e) == policy.kind)
    slots = sum(1 for e in adm["active"].values() if e.get("slot", True))
    if mine >= policy.max_concurrent or (policy.global_max and slots >= policy.global_max):
        return Decision(CONCURRENCY_CAP, f"Concurrency cap reached: {slots} "
                        "healing agents are already investigating other problems. Continue "
                        "normally.")
    window = [o for o in adm["outcomes"] if _kind_of(o) == policy.kind and
              str(o.get("lane") or "") == policy.lane][-policy.breaker_window:]
    tripped = policy.breaker_window > 0 and len(window) >= policy.breaker_window and all(
        _failed(o) for o in window)
    # Half-open: long after the last failure, with nothing of this kind running, one may try.
    if tripped and (mine or now - window[-1]["at"] < policy.breaker_reset_s):
        lane = f" for {policy.lane} incidents" if policy.lane else ""
        return Decision(CIRCUIT_BREAKER, f"Circuit breaker open{lane}: the last "
                        f"{policy.breaker_window} healing attempts all failed. Continue "
                        "normally; a person has to look first.")
    verdict = available()
    if verdict == NO_SANDBOX:
        return Decision(NO_SANDBOX, "No sandbox can start here to run a healing agent in "
                        "(see `healer doctor`); the attempt waits and is tried again. Continue "
                        "normally.")
    if not verdict or isinstance(verdict, str):
        return Decision(NO_MODEL, "No model available to run a healing agent here. Continue "
                        "normally.")
    return Decision(ACCEPTED, "Healing agent dispatched")


def empty_admission() -> dict[str, Any]:
    return {"active": {}, "open_prs": {}, "ended": {}, "outcomes": [], "on_hold": {}}


class AdmissionReader:
    """Reads the admission record, re-parsing it only when the file changed.

    Every write of a FileStore record is a rename of a new file, so the file's identity
    (inode, mtime, ctime, size) changes with each revision; other stores are simply read.
    A stale read can only reject (the acceptance itself is re-decided under compare-and-set).
    """

    def __init__(self, store: Store):
        self.store = store
        root = getattr(store, "root", None)
        self._path = (str(Path(root) / "records" / ADMISSION / f"{GATE_KEY}.json")
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


def admit(store: Store, novelty: str, new_id: Callable[[], str], now: float, policy: Policy,
          available: Callable[[], bool | str], reader: AdmissionReader | None = None, *,
          record: Callable[[str], object]) -> Decision:
    """Run gates 4–8 and, if they pass, claim the key and a slot in one atomic write for a
    new attempt (``new_id()`` names it; only called then), then ``record(attempt_id)``.

    Claiming and recording are one step: if ``record`` raises, the claim is released before
    the error propagates, so a write that fails can never leave a slot taken."""
    outcome: dict[str, Decision] = {}

    def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
        adm = cur or empty_admission()
        decision = decide(adm, novelty, now, policy, available)
        outcome["d"] = decision
        if not decision.accepted:
            return None  # nothing to write: refusals leave no trace in this record
        adm["active"][novelty] = {"attempt_id": attempt_id, "since": now, "kind": policy.kind}
        if not policy.holds_slot:
            adm["active"][novelty]["slot"] = False
        # Forget cooldowns that are over so the record stays small (by a horizon no kind's
        # cooldown exceeds, not this kind's: another kind may cool down longer).
        horizon = max(policy.cooldown_s, KEEP_ENDED_S)
        adm["ended"] = {k: v for k, v in adm["ended"].items()
                        if now - v < horizon and k != novelty}
        return adm

    # The hot path (duplicates, cooldowns, a full cap) is one read: no lock, no copy, no write.
    adm = reader.read() if reader is not None else AdmissionReader(store).read()
    first = decide(adm, novelty, now, policy, available)
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
        release(store, novelty, attempt_id)
        raise
    return Decision(d.reason, d.message, attempt_id)


def resume(store: Store, novelty: str, attempt_id: str, now: float, policy: Policy,
           available: Callable[[], bool | str], *, record: Callable[[str], object]
           ) -> Decision:
    """Ask gates 5–8 again for ``attempt_id``, on hold under ``novelty``; if they pass, make
    it active again (claim and slot, one atomic write), then ``record(attempt_id)`` (a
    failure there puts it back on hold). A refusal leaves it on hold."""
    outcome: dict[str, Decision] = {}

    def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
        adm = cur or empty_admission()
        if adm.get("on_hold", {}).get(novelty) != attempt_id:
            outcome["d"] = Decision(ALREADY_INVESTIGATING, "the attempt is no longer on hold",
                                    attempt_id)
            return None
        decision = decide(adm, novelty, now, policy, available, resuming=attempt_id)
        outcome["d"] = decision
        if not decision.accepted:
            return None
        del adm["on_hold"][novelty]
        adm["active"][novelty] = {"attempt_id": attempt_id, "since": now, "kind": policy.kind}
        return adm

    store.update(ADMISSION, GATE_KEY, fn)
    d = outcome["d"]
    if not d.accepted:
        return d
    try:
        record(attempt_id)
    except BaseException:
        settle(store, novelty, attempt_id, now=now, kind=policy.kind, ended=False,
               on_hold=True)
        raise
    return Decision(d.reason, "Healing agent dispatched (resumed after the hold)", attempt_id)


def holding(adm: dict[str, Any]) -> dict[str, str]:
    """The attempts on hold: novelty key → attempt id."""
    return dict(adm.get("on_hold") or {})


def release(store: Store, novelty: str, attempt_id: str) -> None:
    """Undo a claim whose attempt was never recorded (no cooldown, nothing for the breaker)."""

    def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
        if cur is None or cur["active"].get(novelty, {}).get("attempt_id") != attempt_id:
            return None
        del cur["active"][novelty]
        return cur

    store.update(ADMISSION, GATE_KEY, fn)


def settle(store: Store, novelty: str, attempt_id: str, *, now: float, kind: str,
           ended: bool, outcome: str = "", breaker: bool = False, held: bool = False,
           cooldown: bool = True, lane: str = "", on_hold: bool = False) -> None:
    """Reflect an attempt's change in the admission record.

    ``held``: a fix waits for review (the key stays taken, not running); ``ended``: the
    attempt is over — the cooldown starts (unless ``cooldown`` is false: a kind without one)
    and, unless ``outcome`` is empty, the breaker of the kind's ``lane`` learns it
    (``breaker``: it counts as a failure). A ``DEFERRED`` outcome only frees the key: no
    cooldown, nothing for the breaker (whatever ``breaker`` says), as if the attempt had not
    been made. ``on_hold``: the attempt waits for healer's model access — its key stays
    taken (not running), nothing else changes."""
    if outcome == DEFERRED:
        cooldown = False

    def fn(cur: dict[str, Any] | None) -> dict[str, Any]:
        adm = cur or empty_admission()
        waiting = adm.setdefault("on_hold", {})
        if adm["active"].get(novelty, {}).get("attempt_id") == attempt_id and (
                held or ended or on_hold):
            del adm["active"][novelty]
        if on_hold:
            waiting[novelty] = attempt_id
            return adm
        if waiting.get(novelty) == attempt_id:
            del waiting[novelty]
        if held:
            adm["open_prs"][novelty] = attempt_id
        elif adm["open_prs"].get(novelty) == attempt_id:
            del adm["open_prs"][novelty]
        if ended and cooldown:
            adm["ended"][novelty] = now
            if outcome:
                entry = {"status": outcome, "at": now, "attempt_id": attempt_id, "kind": kind,
                         "breaker": breaker}
                if lane:
                    entry["lane"] = lane
                adm["outcomes"] = [*adm["outcomes"], entry][-MAX_OUTCOMES:]
        return adm

    store.update(ADMISSION, GATE_KEY, fn)


def cool(store: Store, novelties: list[str], *, now: float) -> None:
    """Start the cooldown of each key now without an attempt of the gate's own — a fleet
    problem handed to a person, a repair ladder that ran — so the one cooldown check
    (``decide``, ``cooling``) covers it."""
    if not novelties:
        return

    def fn(cur: dict[str, Any] | None) -> dict[str, Any]:
        adm = cur or empty_admission()
        adm["ended"].update(dict.fromkeys(novelties, now))
        return adm

    store.update(ADMISSION, GATE_KEY, fn)


def clear_cooldowns(store: Store, prefix: str) -> None:
    """End every cooldown whose key starts with ``prefix`` (the problem is fixed)."""

    def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
        if cur is None or not any(k.startswith(prefix) for k in cur["ended"]):
            return None
        cur["ended"] = {k: v for k, v in cur["ended"].items() if not k.startswith(prefix)}
        return cur

    store.update(ADMISSION, GATE_KEY, fn)


def cooling(adm: dict[str, Any], prefix: str, *, now: float, cooldown_s: float
            ) -> dict[str, float]:
    """Keys under ``prefix`` still cooling down (the rest of the key) → seconds to go."""
    return {k[len(prefix):]: cooldown_s - (now - v) for k, v in adm["ended"].items()
            if k.startswith(prefix) and now - v < cooldown_s}


def reconcile(store: Store, statuses: dict[str, str], *, running: frozenset[str],
              held_status: str | frozenset[str] = "", now: float, kind: str = "code",
              on_hold_status: str = "") -> None:
    """Drop ``kind``'s admission entries whose attempts finished or vanished (after a crash).

    ``statuses`` are that kind's attempts: another kind's entries are not judged by them
    (a play remediation or a fleet episode has no code attempt, and outlives 60 s). Held
    keys (fixes awaiting review or a person's approval) are judged only with ``held_status``
    (one status or several), keys on hold only with ``on_hold_status``."""
    held = frozenset({held_status}) if isinstance(held_status, str) else held_status

    def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
        if cur is None:
            return None
        changed = False
        for key, entry in list(cur["active"].items()):
            if _kind_of(entry) != kind:
                continue
            status = statuses.get(entry.get("attempt_id"))
            missing_for_long = status is None and now - entry.get("since", 0) > 60
            if (status is not None and status not in running) or missing_for_long:
                del cur["active"][key]
                changed = True
        for key, aid in list(cur["open_prs"].items() if held - {""} else ()):
            if statuses.get(aid) not in held:
                del cur["open_prs"][key]
                changed = True
        for key, aid in list((cur.get("on_hold") or {}).items() if on_hold_status else ()):
            if statuses.get(aid) != on_hold_status:
                del cur["on_hold"][key]
                changed = True
        return cur if changed else None

    store.update(ADMISSION, GATE_KEY, fn)


def admission(store: Store) -> dict[str, Any]:
    rec = store.get(ADMISSION, GATE_KEY)
    return rec.data if rec else empty_admission()
