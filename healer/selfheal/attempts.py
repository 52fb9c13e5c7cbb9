"""Healing attempts: the state machine, its records, and recovery after a crash.

::

    dispatch_pending ─► investigating ─► pr_open ─► pr_merged
          │   ▲              │   ▲          └─────► failed
          │   │              │   └── awaiting_approval ─► failed (a person denied)
          └─► failed         ├─► failed | unfixable | anonymization_failed | timeout
              │              │
              └──── held ◄───┘   (resumed through the gate) ─► failed

``held``: the agent run was stopped by healer's own model access, not by the problem — a
rejected API key (X1–X3), a rate limit or overload past the run's time limit, the day's agent
budget (``healer.agents.limits.held_by``). That cause is escalated once, by the runtime; the
attempt itself is not escalated, feeds no breaker and starts no cooldown. Its fingerprint
stays taken (a duplicate report joins it) without a slot, and its incident stays ``healing``.
The retry passes resume it through the gate (``gate.resume``) once the hold is over: the
same attempt goes back to ``dispatch_pending`` and runs again in a fresh clone.

``awaiting_approval``: the fix is done and verified but its diff is sensitive
(``healer.core.publish.policy``: CI, dependencies, healer's configuration, weakened tests);
the branch is kept and nothing is published until a person approves (``healer approve``).
It holds the fingerprint like an open PR does, and is no failure for the breaker.

Records live in the store:

* ``heal-attempts/<attempt_id>`` — one per attempt (the sanitised report, status, history,
  worker, branch, PR, reason);
* ``heal-fingerprints/<fingerprint>`` — the attempt ids of one fingerprint, newest last;
* ``heal-admission/gate`` — the one gate's admission record (``healer.core.gate``): a status
  change here is reflected there (running, a fix held for review, ended: cooldown and
  breaker);
* ``incidents/code-<fingerprint>`` — the incident of a ``report_error`` attempt in the core
  ledger (``healer.core.incidents``), moved with the attempt: healing, fixed (PR open),
  resolved (merged), open again after a failure, escalated when a person was told;
* ``heal-escalations-due`` (a store set) — attempts that still owe a person an escalation.

A transition writes the admission record first and the attempt second — a reader who sees
an attempt's end also sees its slot free; ``recover()`` repairs the admission record if a
crash fell between the two.

**Escalation.** An investigation of a ``report_error`` attempt that ends ``unfixable``,
``failed``, ``timeout`` or ``anonymization_failed`` (``ESCALATES``) is marked
``escalation_due`` in the same write as its status, and joined to the due set. Whoever settled
it (the worker, recovery) then escalates it (``healer.selfheal.escalate``) and records the seed
file as ``escalation``; what a crash left undone is picked up from the due set by the next
``SelfHealService.recover()``. A PR closed without merging (``pr_open`` → ``failed``) is not
escalated: a person closed it. Attempts of living-context incidents (``incident`` set) are
escalated by that capability, not here.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from healer.core import gate
from healer.core import incidents as inc
from healer.core.stamped import StampedRecords
from healer.core.store import Store
from healer.errors import AttemptLostError, ConflictError, NotFoundError, UsageError

ATTEMPTS = "heal-attempts"
FINGERPRINTS = "heal-fingerprints"

DISPATCH_PENDING = "dispatch_pending"
INVESTIGATING = "investigating"
PR_OPEN = "pr_open"
PR_MERGED = "pr_merged"
FAILED = "failed"
UNFIXABLE = "unfixable"
TIMEOUT = "timeout"
ANONYMIZATION_FAILED = "anonymization_failed"
AWAITING_APPROVAL = "awaiting_approval"
HELD = "held"

STATUSES = (DISPATCH_PENDING, INVESTIGATING, PR_OPEN, PR_MERGED, FAILED, UNFIXABLE, TIMEOUT,
            ANONYMIZATION_FAILED, AWAITING_APPROVAL, HELD)
TRANSITIONS: dict[str, frozenset[str]] = {
    DISPATCH_PENDING: frozenset({INVESTIGATING, FAILED}),
    INVESTIGATING: frozenset({PR_OPEN, FAILED, UNFIXABLE, ANONYMIZATION_FAILED, TIMEOUT,
                              AWAITING_APPROVAL, HELD}),
    HELD: frozenset({DISPATCH_PENDING, FAILED}),
    AWAITING_APPROVAL: frozenset({PR_OPEN, FAILED}),
    PR_OPEN: frozenset({PR_MERGED, FAILED}),
}
WAITING_REVIEW = frozenset({PR_OPEN, AWAITING_APPROVAL})  # the fingerprint stays taken
ACTIVE = frozenset({DISPATCH_PENDING, INVESTIGATING})  # count against the concurrency cap
TERMINAL = frozenset({PR_MERGED, FAILED, UNFIXABLE, TIMEOUT, ANONYMIZATION_FAILED})
BREAKER_FAILURES = frozenset({FAILED, TIMEOUT, ANONYMIZATION_FAILED})  # unfixable: not counted
ESCALATES = frozenset({FAILED, UNFIXABLE, TIMEOUT, ANONYMIZATION_FAILED})  # after an investigation
ESCALATIONS_DUE = "heal-escalations-due"
UNFINISHED = "heal-attempts-unfinished"  # store set: dispatch_pending and investigating
INDEXED = ("heal-index", "unfinished")  # marks that UNFINISHED covers every attempt
ESCALATION_CLAIM_S = 600.0  # a claim older than this belonged to a process that died
MAX_ESCALATION_TRIES = 5
WORKTREES = "heal-attempts-worktrees"  # store set: attempts whose worktree is still there
WORKTREES_INDEXED = ("heal-index", "worktrees")
RECENT = ("attempt-index", "recent")  # the newest attempt ids (derived)
RECENT_SIZE = 200
MAX_PER_FINGERPRINT = 50
PENDING_GRACE_S = 300.0  # a dispatch_pending older than this at start-up never got a worker
STALE_GRACE_S = 600.0  # investigating this long past its deadline is over, worker or not

Clock = Callable[[], float]


class TransitionError(UsageError):
    """A status change the state machine does not allow (e.g. ``failed`` → ``pr_open``)."""

    def __init__(self, attempt_id: str, current: str, wanted: str):
        self.attempt_id = attempt_id
        self.current = current
        self.wanted = wanted
        super().__init__(f"attempt {attempt_id}: cannot go from {current} to {wanted}")


def new_attempt_id(now: float) -> str:
    """Sortable by creation time, unique across processes."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + "-" + secrets.token_hex(4)


def worker_identity() -> dict[str, Any]:
    """What identifies this process later, also against pid reuse: host, pid, start tick."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _start_tick(os.getpid())}


def _start_tick(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode(errors="replace")
    except OSError:
        return None
    # The command name may contain spaces or ')'; fields resume after the last ')'.
    fields = raw.rsplit(")", 1)[-1].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def worker_alive(worker: dict[str, Any] | None) -> bool:
    """Whether the process that recorded ``worker`` is still running on this host."""
    if not worker or worker.get("host") != socket.gethostname():
        return False
    pid = worker.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    start = worker.get("start")
    return start is None or _start_tick(pid) in (None, start)


@dataclass
class Attempts:
    """The attempt records of one store.

    ``fences``: attempt id → the owner revision this process's run holds
    (``healer.selfheal.ownership``); every write to such an attempt is refused with
    ``AttemptLostError`` once its record names another owner (a takeover wrote it)."""

    store: Store
    clock: Clock = time.time
    fences: dict[str, int] = field(default_factory=dict)
    _index: StampedRecords = field(init=False, repr=False, compare=False)
    _records: StampedRecords = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._index = StampedRecords(self.store, FINGERPRINTS)
        self._records = StampedRecords(self.store, ATTEMPTS)

    def fence(self, attempt_id: str, revision: int) -> None:
        """From now on, write ``attempt_id`` only while its owner revision is ``revision``."""
        self.fences[attempt_id] = revision

    def _check_owner(self, attempt_id: str, cur: dict[str, Any],
                     expected: int | None = None) -> None:
        want = expected if expected is not None else self.fences.get(attempt_id)
        if want is None:
            return
        have = (cur.get("owner") or {}).get("revision")
        if have != want:
            raise AttemptLostError(attempt_id, want, have)

    # --- reading ------------------------------------------------------------------------------

    def get(self, attempt_id: str) -> dict[str, Any] | None:
        rec = self.store.get(ATTEMPTS, attempt_id)
        return rec.data if rec else None

    def require(self, attempt_id: str) -> dict[str, Any]:
        found = self.get(attempt_id)
        if found is None:
            raise NotFoundError(ATTEMPTS, attempt_id)
        return found

    def for_fingerprint(self, fingerprint: str) -> list[dict[str, Any]]:
        """The attempts of one fingerprint, newest first."""
        rec = self.store.get(FINGERPRINTS, fingerprint)
        ids = rec.data.get("attempts", []) if rec else []
        found = [self.get(i) for i in reversed(ids)]
        return [a for a in found if a is not None]

    def newest_for(self, fingerprint: str) -> dict[str, Any] | None:
        """The newest attempt of one fingerprint, as stored now (read it, never change it).
        Every report asks (``healer.code.aftermerge``), and most fingerprints have no attempt
        yet: the index and the attempt are parsed again only when they changed
        (``healer.core.stamped``), else one stat each."""
        index = self._index.get(fingerprint)
        for aid in reversed(index.get("attempts", []) if index else []):
            found = self._records.get(aid)
            if found is not None:
                return found
        return None

    def latest(self, limit: int = 20) -> list[dict[str, Any]]:
        """The newest ``limit`` attempts (ids sort by creation time) — from the ring of the
        newest ids kept with every creation, so ``healer status`` does not list every
        attempt ever made (a state dir from before the ring gets it built once)."""
        ids = self._recent() if limit <= RECENT_SIZE else self.store.keys(ATTEMPTS)
        out: list[dict[str, Any]] = []
        for key in reversed(ids):
            data = self.get(key)
            if data is not None:
                out.append(data)
            if len(out) >= limit:
                break
        return out

    def _recent(self) -> list[str]:
        rec = self.store.get(*RECENT)
        if rec is not None:
            return list(rec.data.get("ids", []))
        ids = self.store.keys(ATTEMPTS)[-RECENT_SIZE:]
        if ids:
            self.store.put(*RECENT, {"ids": ids}, durable=False)
        return ids

    def all(self) -> Iterator[dict[str, Any]]:
        for rec in self.store.list(ATTEMPTS):
            yield rec.data

    def unfinished(self) -> list[dict[str, Any]]:
        """Attempts not yet ended (and those owing an escalation) — read from their index,
        so recovery costs O(unfinished), not O(every attempt ever made). The first call on
        a state dir from before the index builds it once."""
        def add(rec: Any) -> None:
            if rec.data.get("status") in ACTIVE:
                self.store.add_member(UNFINISHED, rec.key)
            if rec.data.get("escalation_due"):
                self.store.add_member(ESCALATIONS_DUE, rec.key)

        self.store.index_once(INDEXED, ATTEMPTS, add)
        ids = set(self.store.members(UNFINISHED)) | set(self.store.members(ESCALATIONS_DUE))
        out = []
        for aid in sorted(ids):
            att = self.get(aid)
            if att is None:
                continue  # marked by a create still in flight (or one that failed)
            if att.get("status") not in ACTIVE:
                self.store.remove_member(UNFINISHED, aid)
            out.append(att)
        return out

    def admission(self) -> dict[str, Any]:
        return gate.admission(self.store)

    # --- writing ------------------------------------------------------------------------------

    def create(self, attempt_id: str, data: dict[str, Any]) -> dict[str, Any]:
        """Store a new attempt in ``dispatch_pending`` and index it under its fingerprint."""
        now = self.clock()
        record = {
            **data,
            "attempt_id": attempt_id,
            "status": DISPATCH_PENDING,
            "created_at": now,
            "updated_at": now,
            "history": [{"status": DISPATCH_PENDING, "at": now}],
        }
        self.store.add_member(UNFINISHED, attempt_id)  # before the record: recovery sees it
        self.store.create(ATTEMPTS, attempt_id, record)
        fp = data["fingerprint"]

        def index(cur: dict[str, Any] | None) -> dict[str, Any]:
            cur = cur or {"fingerprint": fp, "attempts": []}
            if attempt_id not in cur["attempts"]:
                cur["attempts"] = [*cur["attempts"], attempt_id][-MAX_PER_FINGERPRINT:]
            return cur

        self.store.update(FINGERPRINTS, fp, index)
        if self.store.get(*RECENT) is None:
            self._recent()  # an older state dir: the ring starts from what is there
        self.store.update(*RECENT, lambda cur: {"ids": sorted(
            {*(cur or {}).get("ids", []), attempt_id})[-RECENT_SIZE:]}, durable=False)
        return record

    def update(self, attempt_id: str, **fields: Any) -> dict[str, Any]:
        """Change fields other than ``status`` (worker, branch, notes …)."""
        if "status" in fields:
            raise ValueError("use transition() to change the status")

        def fn(cur: dict[str, Any] | None) -> dict[str, Any]:
            if cur is None:
                raise NotFoundError(ATTEMPTS, attempt_id)
            self._check_owner(attempt_id, cur)
            cur.update(fields)
            cur["updated_at"] = self.clock()
            return cur

        if fields.get("worktree"):
            self.store.add_member(WORKTREES, attempt_id)  # before: a crash leaves it findable
        rec = self.store.update(ATTEMPTS, attempt_id, fn)
        assert rec is not None
        if "worktree_removed_at" in fields:
            self.store.remove_member(WORKTREES, attempt_id)
        return rec.data

    def with_worktree(self) -> list[dict[str, Any]]:
        """Attempts whose worktree is still on disk — from their index, so the reaper costs
        O(worktrees), not O(every attempt ever made); built once for an older state dir."""
        def add(rec: Any) -> None:
            if rec.data.get("worktree") and not rec.data.get("worktree_removed_at"):
                self.store.add_member(WORKTREES, rec.key)

        self.store.index_once(WORKTREES_INDEXED, ATTEMPTS, add)
        out = []
        for aid in self.store.members(WORKTREES):
            data = self.get(aid)
            if data is None or data.get("worktree_removed_at") or not data.get("worktree"):
                self.store.remove_member(WORKTREES, aid)
                continue
            out.append(data)
        return out

    def transition(self, attempt_id: str, to: str, *, expect: str | None = None,
                   owned_by: int | None = None, **fields: Any) -> dict[str, Any]:
        """Move an attempt to ``to`` (atomically); ``TransitionError`` if not allowed.

        ``expect``: also refuse unless the current status is this one (a worker that was
        declared dead must not overwrite what recovery decided). ``owned_by``: also refuse
        (``AttemptLostError``) unless the record's owner revision is this one (a takeover
        ends only the run it found expired); a fenced attempt (``fence``) checks its own.
        ``retry`` in ``fields``: the attempt ends to be run again under a new id (its
        replica died) — no escalation, no cooldown, nothing for the breaker.
        """
        if to not in STATUSES:
            raise ValueError(f"unknown status {to!r}")
        now = self.clock()
        cur = self.get(attempt_id)
        if cur is None:
            raise NotFoundError(ATTEMPTS, attempt_id)
        if (expect and cur["status"] != expect) or to not in TRANSITIONS.get(cur["status"], ()):
            raise TransitionError(attempt_id, cur["status"], to)
        self._check_owner(attempt_id, cur, owned_by)
        if to in ACTIVE:
            self.store.add_member(UNFINISHED, attempt_id)  # resumed: recovery sees it again
        # The admission record first: a reader who sees the attempt's end also sees its slot
        # free (and the cooldown started). A crash between the two writes is repaired by
        # recover() (_reconcile_admission), as is a transition refused below after a race.
        self._settle_gate({**cur, **fields}, cur["status"], to, now)
        previous: dict[str, str] = {}

        def fn(cur: dict[str, Any] | None) -> dict[str, Any]:
            if cur is None:
                raise NotFoundError(ATTEMPTS, attempt_id)
            status = cur["status"]
            if (expect and status != expect) or to not in TRANSITIONS.get(status, ()):
                raise TransitionError(attempt_id, status, to)
            self._check_owner(attempt_id, cur, owned_by)
            previous["status"] = status
            cur.update(fields)
            cur["status"] = to
            cur["updated_at"] = now
            cur["history"] = [*cur.get("history", []), {"status": to, "at": now}]
            if to == HELD:
                cur["held_at"] = now
            elif status == HELD and to not in ACTIVE:
                cur["ended_at"] = now  # given up while on hold: no investigation to escalate
            elif status in ACTIVE and to not in ACTIVE:
                cur["ended_at"] = now
                if to in ESCALATES and not cur.get("incident") and not cur.get("deferred") \
                        and not cur.get("retry"):
                    cur["escalation_due"] = True
            return cur

        try:
            rec = self.store.update(ATTEMPTS, attempt_id, fn)
        except (TransitionError, AttemptLostError):
            self._reconcile_admission()  # the gate was told of an end that did not happen
            raise
        assert rec is not None
        if rec.data.get("escalation_due") and previous["status"] in ACTIVE:
            self.store.add_member(ESCALATIONS_DUE, attempt_id)
        if to not in ACTIVE:
            self.store.remove_member(UNFINISHED, attempt_id)
        att = rec.data
        self._sync_incident(att, to, previous["status"])
        return att

    def _settle_gate(self, att: dict[str, Any], previous: str, to: str, now: float) -> None:
        """The admission record's side of a transition from ``previous`` to ``to``."""
        ended = previous in ACTIVE and to not in ACTIVE and to != HELD
        given_up = previous == HELD and to not in ACTIVE
        # The investigation is over: the cooldown starts, the breaker learns (an UNFIXABLE
        # verdict says nothing about healer's health, so it is not an outcome for it). Given
        # up while on hold: no attempt was made, so neither happens.
        gate.settle(self.store, att["fingerprint"], att["attempt_id"], now=now, kind="code",
                    ended=ended or given_up,
                    outcome=gate.DEFERRED if att.get("deferred") or att.get("retry")
                    or given_up
                    else to if ended and to != UNFIXABLE else "",
                    breaker=to in BREAKER_FAILURES and not att.get("stopped"),
                    held=to in WAITING_REVIEW, lane=str(att.get("lane") or ""),
                    on_hold=to == HELD)

    def on_hold(self) -> list[dict[str, Any]]:
        """The attempts on hold (from the admission record: O(held), not O(attempts))."""
        found = (self.get(aid) for aid in gate.holding(self.admission()).values())
        return [a for a in found if a is not None and a.get("status") == HELD]

    def _sync_incident(self, att: dict[str, Any], to: str, previous: str = "") -> None:
        """Move the attempt's incident with it (living-context attempts move theirs)."""
        iid = att.get("incident_id")
        if not iid or att.get("incident"):
            return
        ledger = inc.Ledger(self.store, clock=self.clock)
        aid = att["attempt_id"]
        if to == INVESTIGATING:
            ledger.update(iid, doing="a healing agent is investigating in a worktree")
        elif to == HELD:
            hold = att.get("hold") or {}
            ledger.update(iid, "attempt_held", doing=f"waiting for healer's model access "
                          f"({hold.get('code', '?')}: {hold.get('title', '')}); resumes by "
                          "itself when that is over"[:300])
        elif previous == HELD and to == DISPATCH_PENDING:
            ledger.update(iid, "attempt_resumed",
                          doing="a healing agent is being dispatched (resumed after a hold)")
        elif to == AWAITING_APPROVAL:
            ledger.held(iid, aid, list((att.get("held") or {}).get("reasons") or []))
        elif to == PR_OPEN:
            ledger.attempt_ended(iid, aid, to, status=inc.FIXED,
                                 links={"pr_url": att.get("pr_url", "")})
        elif to == PR_MERGED:
            ledger.resolve(iid, "fix merged")
        elif att.get("pr_url") and to == FAILED:
            ledger.attempt_ended(iid, aid, to, status=inc.RESOLVED,
                                 reason="the fix PR was closed without merging")
        else:
            ledger.attempt_ended(iid, aid, to, status=inc.OPEN,
                                 reason=str(att.get("reason") or ""))

    # --- escalation bookkeeping ---------------------------------------------------------------

    def escalations_due(self) -> list[str]:
        """Attempt ids that still owe a person an escalation, oldest first."""
        return sorted(self.store.members(ESCALATIONS_DUE))

    def claim_escalation(self, attempt_id: str) -> dict[str, Any] | None:
        """Take the attempt's escalation (one process writes it); None if it is not due,
        already done, or claimed by a live process in the last ``ESCALATION_CLAIM_S``."""
        now = self.clock()
        claimed: dict[str, bool] = {}

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            claimed["ok"] = False
            if cur is None or not cur.get("escalation_due"):
                return None
            if now - float(cur.get("escalation_claim") or 0) < ESCALATION_CLAIM_S:
                return None
            cur["escalation_claim"] = now
            claimed["ok"] = True
            return cur

        rec = self.store.update(ATTEMPTS, attempt_id, fn)
        if rec is None or not claimed.get("ok"):
            if rec is None or not rec.data.get("escalation_due"):
                self.store.remove_member(ESCALATIONS_DUE, attempt_id)
            return None
        return rec.data

    def escalation_done(self, attempt_id: str, *, seed_file: str, issue_url: str) -> None:
        """Record where the attempt's escalation went; it is no longer due."""

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None:
                return None
            cur.pop("escalation_due", None)
            cur.pop("escalation_claim", None)
            cur.update(escalation=seed_file, escalation_issue=issue_url,
                       escalated_at=self.clock())
            return cur

        rec = self.store.update(ATTEMPTS, attempt_id, fn)
        self.store.remove_member(ESCALATIONS_DUE, attempt_id)
        iid = rec.data.get("incident_id") if rec else None
        if iid and seed_file:
            inc.Ledger(self.store, clock=self.clock).escalated(
                iid, seed_file=seed_file, issue_url=issue_url,
                reason=str(rec.data.get("unfixable_reason") or rec.data.get("reason") or
                           rec.data.get("status", "")) if rec else "")

    def escalation_failed(self, attempt_id: str, why: str) -> None:
        """Release the claim; after ``MAX_ESCALATION_TRIES`` stop trying (logged by caller)."""
        gave_up: dict[str, bool] = {}

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None:
                return None
            cur.pop("escalation_claim", None)
            cur["escalation_tries"] = int(cur.get("escalation_tries") or 0) + 1
            cur["escalation_error"] = why[:500]
            gave_up["yes"] = cur["escalation_tries"] >= MAX_ESCALATION_TRIES
            if gave_up["yes"]:
                cur.pop("escalation_due", None)
            return cur

        self.store.update(ATTEMPTS, attempt_id, fn)
        if gave_up.get("yes"):
            self.store.remove_member(ESCALATIONS_DUE, attempt_id)

    # --- recovery -----------------------------------------------------------------------------

    def recover(self, *, timeout_s: float, alive: Callable[[dict[str, Any] | None], bool]
                = worker_alive, leases_decide: bool = False) -> list[dict[str, Any]]:
        """Settle attempts a dead process left behind; return the ones changed.

        * ``investigating`` whose worker is gone → ``timeout`` if its deadline passed, else
          ``failed``; also ``timeout`` when far past the deadline even if something still runs.
          A worker on another host holding the attempt's lease (``owner``) is not judged by
          its pid: its lease decides (``SelfHealService.take_over``). ``leases_decide``
          (replicas share the store): no leased run is judged by its pid, even on this host —
          the takeover ends it with the reason and runs it again, which a pid verdict cannot;
        * ``dispatch_pending`` older than ``PENDING_GRACE_S`` → ``failed`` (no worker started);
        * admission entries that point at finished or missing attempts are dropped;
        * an attempt marked ``escalation_due`` but missing from the due set (a crash between
          the two writes) joins it. The escalations themselves are written by the caller
          (``SelfHealService.recover``), which needs the settings.
        """
        now = self.clock()
        changed: list[dict[str, Any]] = []
        due = set(self.store.members(ESCALATIONS_DUE))
        for att in self.unfinished():
            status = att.get("status")
            aid = att["attempt_id"]
            if att.get("escalation_due") and aid not in due:
                self.store.add_member(ESCALATIONS_DUE, aid)
            try:
                if status == INVESTIGATING:
                    deadline = att.get("deadline") or att["updated_at"] + timeout_s
                    stale = now > deadline + STALE_GRACE_S
                    leased = bool(att.get("owner")) and leases_decide
                    if not stale and (leased or _runs_elsewhere(att)):
                        continue
                    if stale or not alive(att.get("worker")):
                        to = TIMEOUT if now >= deadline else FAILED
                        reason = ("time limit exceeded" if to == TIMEOUT
                                  else "the healing worker stopped before finishing")
                        changed.append(self.transition(aid, to, expect=INVESTIGATING,
                                                       reason=reason))
                elif status == DISPATCH_PENDING and now - att["created_at"] > PENDING_GRACE_S:
                    changed.append(self.transition(
                        aid, FAILED, expect=DISPATCH_PENDING,
                        reason="no healing worker picked the attempt up"))
            except (TransitionError, ConflictError):
                continue  # it moved on while we looked: the newer state wins
        self._reconcile_admission()
        return changed

    def _reconcile_admission(self) -> None:
        adm = gate.admission(self.store)
        ids = {e.get("attempt_id") for e in adm["active"].values()} | set(
            adm["open_prs"].values())
        statuses = {}
        for aid in ids:
            att = self.get(aid) if isinstance(aid, str) and aid else None
            if att is not None:
                statuses[aid] = att["status"]
        ids |= set(gate.holding(adm).values())
        for aid in ids - set(statuses):
            att = self.get(aid) if isinstance(aid, str) and aid else None
            if att is not None:
                statuses[aid] = att["status"]
        gate.reconcile(self.store, statuses, running=ACTIVE, held_status=WAITING_REVIEW,
                       now=self.clock(), on_hold_status=HELD)


def _runs_elsewhere(att: dict[str, Any]) -> bool:
    """Whether the attempt's run holds a lease and its worker is on another host."""
    worker = att.get("worker") or {}
    return bool(att.get("owner")) and worker.get("host") != socket.gethostname()


def public_view(att: dict[str, Any]) -> dict[str, Any]:
    """What ``get_healing_status`` shows of an attempt (no worker internals).

    ``owner``: the replica running it (``node``) under which lease revision, while it runs
    and after; ``taken_over``: the replica that stopped renewing and when; ``retry_of``: the
    attempt this one retries after such a takeover; ``superseded_by``: the attempt that
    did a taken-over one's retry instead (a new report of the same error, admitted first).

    ``escalation``: the seed file in ``.fleet-messages/human/`` that told a person about it,
    when it ended without a fix (the file may since have moved to ``archive/``)."""
    keys = ("attempt_id", "fingerprint", "status", "error_type", "call_site", "severity",
            "tool_name", "created_at", "updated_at", "ended_at", "branch", "pr_url", "pr_number",
            "reason", "unfixable_reason", "findings", "escalation", "held", "approved_by",
            "hold", "held_at", "taken_over", "retry_of", "retried_as", "superseded_by",
            "takeovers")
    out = {k: att[k] for k in keys if att.get(k) not in (None, "", [])}
    owner = att.get("owner")
    if isinstance(owner, dict) and owner.get("node"):
        out["owner"] = {k: owner[k] for k in ("node", "lease", "revision") if k in owner}
    # The protocol's statuses; waiting for a worker is part of investigating.
    if out.get("status") == DISPATCH_PENDING:
        out["status"] = INVESTIGATING
    return out


PUBLIC_STATUSES = (INVESTIGATING, PR_OPEN, PR_MERGED, FAILED, UNFIXABLE, TIMEOUT,
                   ANONYMIZATION_FAILED, AWAITING_APPROVAL, HELD)
