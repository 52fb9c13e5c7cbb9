"""Living-context incidents: the ``code`` kind's intake for Sentry, Alertmanager, Slack, Loki.

::

    Signal ─► IncidentBook.receive ─► the core ledger, incidents/code-<key> (one per key)
                     │                    open ─► healing ─► fixed ─► (merged, watched) ─► resolved
                     │                      └──────────────► escalated
                     └─► admit: recursion, enabled, severity, a person's silence
                         (healer.core.silences), a file to heal, the source's
                         threshold (gate.thresholds: healer.core.thresholds), a person's
                         approval when its trust needs one (healer.core.approval), then the
                         one gate (healer.core.gate: novelty, cooldown, cap, breaker, model)
                         → a heal-attempts record shared with report_error

* A signal carries its source's trust (the DSN ingest's are anonymous, the signed webhooks'
  and healer's Loki rules' trusted). A NEW incident from an anonymous source is opened only
  within the flood limits (``healer.core.trust``: ``code.new_incidents_per_hour`` per origin,
  ``code.max_open_anonymous``); what they refuse is counted as dropped (receipt ``dropped``).
  Until a trusted source reports it too, an anonymous incident waits for a person
  (``awaiting_approval``) and its repeats are only counted.

* A firing signal for a key that is open, healing, escalated or fixed-but-not-merged is a
  duplicate (counted); an open one that is not being healed goes through the gate again (the
  cooldown may be over, a slot free). For a resolved incident it reopens it; for a fix merged
  less than ``context.watch_s`` ago it is a **regression** once the fix's release is seen
  (``healer.code.aftermerge``: an event in a release first seen after the merge, or any event
  where no release is known): the incident reopens with the regression noted, a draft revert
  PR is prepared and a person is told. An event in a release seen before the merge is old code
  still running: a duplicate.
* A silence that covers the incident (``healer.core.silences``: its kind ``code``, source,
  key, summary, severity, an Alertmanager alert's labels as ``label.<name>``) makes the gate's
  decision ``silenced``: the signal is recorded and counted, the incident carries
  ``silenced_by``, no agent starts and nothing is sent. Once the silence ends, the next signal
  asks the gate again (``silenced`` is not retried by ``retry_held``).
* A resolved signal closes what the key opened (a running heal stops at its next step); one
  for an unknown key is ignored.
* Webhook deliveries are remembered by the SHA-256 of their raw body
  (``context-deliveries``) so a replayed payload is dropped.

Every decision and step is also appended to the audit trail ``<state>/heal-audit.jsonl``.
The records keep the shape this capability always showed (``occurrences``, ``decision``,
``attempts`` as ids) in ``view()``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from healer.code.aftermerge import runs_fix
from healer.context.ingest import FIRING, SEVERITIES, NormalizedError, Signal
from healer.core import about as ab
from healer.core import approval, gate
from healer.core import incidents as core
from healer.core import thresholds as th
from healer.core import trust as tr
from healer.core.audit import Audit
from healer.core.identity import identify
from healer.core.publish.sanitizer import Sanitizer
from healer.core.silences import Silences
from healer.core.store import Store
from healer.errors import ConflictError
from healer.selfheal import gates
from healer.selfheal.attempts import Attempts, new_attempt_id

log = logging.getLogger(__name__)

OLD_INCIDENTS = "context-incidents"  # where these records lived before the core ledger
DELIVERIES = "context-deliveries"
OPEN, HEALING, FIXED, ESCALATED, RESOLVED = (core.OPEN, core.HEALING, core.FIXED,
                                             core.ESCALATED, core.RESOLVED)
STATUSES = core.STATUSES
NO_FILE = "no_file"
FIX_REJECTED = "fix_rejected"
HUMAN_HOLDS = frozenset({FIX_REJECTED})  # decisions only a person undoes
INTAKE = "context"
MAX_USERS = 10_000  # distinct user hashes kept per incident; the count stops there
MAX_TAGS = 50


@dataclass(frozen=True)
class Receipt:
    """What became of one signal."""

    key: str
    # opened | duplicate | reopened | regression | resolved | ignored | dropped | resumed
    action: str
    status: str = ""
    heal: bool = False  # admitted: a healing run should start now
    attempt_id: str = ""
    decision: str = ""
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in ("", None)}


def view(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """A ledger record in the shape this capability's routes and commands always showed."""
    if data is None:
        return None
    return {**data, "occurrences": data.get("count", 1), "decision": data.get("gate") or {},
            "attempts": list(data.get("attempt_ids") or [])}


def migrate(store: Store, ledger: core.Ledger) -> int:
    """Move records from before the core ledger (``context-incidents/<key>``) into it."""
    n = 0
    for rec in list(store.list(OLD_INCIDENTS)):
        old = dict(rec.data)
        iid = core.incident_id("code", rec.key)
        if store.get(core.INCIDENTS, iid) is None:
            status = old.get("status", OPEN)
            data = {**old, "id": iid, "kind": "code", "key": rec.key, "intake": INTAKE,
                    "sources": [old.get("source", "")], "count": old.get("occurrences", 1),
                    "gate": old.get("decision") or {}, "attempt_ids": old.get("attempts", []),
                    "attempts": len(old.get("attempts", [])), "status": OPEN,
                    "severity": (old.get("error") or {}).get("severity", "high"),
                    "summary": str((old.get("error") or {}).get("message", ""))[:500]}
            for k in ("occurrences", "decision"):
                data.pop(k, None)
            store.put(core.INCIDENTS, iid, data)
            ledger.set_status(iid, OPEN, "migrated")  # indexes and counters
            if status != OPEN:
                ledger.set_status(iid, status, "migrated")
        store.delete(OLD_INCIDENTS, rec.key)
        n += 1
    return n


class _KeyedAudit(Audit):
    """The audit trail under the ledger's incident ids, addressed by this capability's keys."""

    def write_many(self, events: Sequence[tuple[str, str, Mapping[str, Any]]]) -> None:
        super().write_many([(event, core.incident_id("code", incident) if incident else "",
                             fields) for event, incident, fields in events])

    def read(self, incident: str = "", *, limit: int = 0) -> list[dict[str, Any]]:
        return super().read(core.incident_id("code", incident) if incident else "",
                            limit=limit)


class IncidentBook:
    """The living-context incidents of one store (in the core ledger), and their gate."""

    def __init__(self, settings: Any, store: Store, *, root: Path | str | None = None,
                 clock: Callable[[], float] = time.time,
                 model_available: Callable[[], bool | str] = lambda: True,
                 audit: Audit | None = None, sanitizer: Sanitizer | None = None):
        self.settings = settings
        self.store = store
        self.root = str(root or "")
        self.clock = clock
        self.model_available = model_available
        base = audit or Audit(settings.state_path, clock)
        self.audit = _KeyedAudit(base.path.parent, clock)
        self.ledger = core.Ledger(store, clock=clock, audit=base,
                                  thresholds=th.parse(settings.gate.thresholds))
        self.sanitizer = sanitizer or Sanitizer(root=root or None,
                                                allowed_hosts=settings.selfheal.allowed_hosts)
        self.attempts = Attempts(store, clock)
        self.policy = gates.policy(settings)
        self.approvals = gates.approval_policy(settings)
        self.floods = gates.flood_policy(settings)
        self._admission = gate.AdmissionReader(store)
        self.silences = Silences(store, clock=clock)
        migrate(store, self.ledger)

    @staticmethod
    def _id(key: str) -> str:
        return core.incident_id("code", key)

    # --- deliveries ---------------------------------------------------------------------------

    def replayed(self, source: str, raw: bytes) -> bool:
        """Whether this exact body was delivered before (and remember it if not)."""
        key = f"{source}-{hashlib.sha256(raw).hexdigest()[:40]}"
        try:
            self.store.create(DELIVERIES, key, {"at": self.clock(), "source": source})
        except ConflictError:
            rec = self.store.get(DELIVERIES, key)
            ttl = self.settings.context.delivery_ttl_s
            if rec is not None and self.clock() - rec.data.get("at", 0) > ttl:
                self.store.put(DELIVERIES, key, {"at": self.clock(), "source": source})
                return False
            return True
        return False

    def prune_deliveries(self) -> int:
        now, ttl, n = self.clock(), self.settings.context.delivery_ttl_s, 0
        for rec in list(self.store.list(DELIVERIES)):
            if now - rec.data.get("at", 0) > ttl:
                self.store.delete(DELIVERIES, rec.key)
                n += 1
        return n

    # --- reading ------------------------------------------------------------------------------

    def get(self, key: str) -> dict[str, Any] | None:
        data = self.ledger.get(self._id(key))
        return view(data) if data and data.get("intake") == INTAKE else None

    def all(self, status: str | None = None) -> list[dict[str, Any]]:
        """This capability's incidents (of one status), most recently seen first."""
        if status in core.ACTIVE:
            found = self.ledger.active("code")
            found = [d for d in found if d.get("status") == status]
        else:
            found = self.ledger.list(kind="code", status=status, limit=500).items
        return [v for d in found if d.get("intake") == INTAKE and (v := view(d))]

    def update(self, key: str, event: str = "", **fields: Any) -> dict[str, Any] | None:
        """Set ``fields`` on an incident (and note ``event`` in its history); a ``status``
        among them is a transition of the ledger's state machine."""
        if "status" in fields:
            status = fields.pop("status")
            return view(self.ledger.set_status(self._id(key), status, event or status,
                                               **fields))
        return view(self.ledger.update(self._id(key), event, **fields))

    def settle(self, key: str, status: str, event: str, **fields: Any) -> None:
        """Move the incident on, unless its source resolved it meanwhile (that stays)."""
        self.ledger.set_status(self._id(key), status, event, unless=frozenset({RESOLVED}),
                               **fields)

    # --- intake -------------------------------------------------------------------------------

    def scrub(self, error: NormalizedError) -> NormalizedError:
        s = self.sanitizer.scrub
        sentry = dict(error.sentry)
        if sentry.get("breadcrumbs"):
            sentry["breadcrumbs"] = [s(b) for b in sentry["breadcrumbs"]]
        for k in ("issue_url", "release", "environment"):
            if isinstance(sentry.get(k), str):
                sentry[k] = s(sentry[k])
        if sentry.get("tags"):
            sentry["tags"] = {s(k): s(v) for k, v in sentry["tags"].items()}
        return replace(error, message=s(error.message), stack_trace=s(error.stack_trace),
                       environment=s(error.environment), function=s(error.function),
                       sentry=sentry)

    def receive(self, signal: Signal) -> Receipt:
        """Record one signal (dedup, resolve, reopen, regression) and admit new work."""
        error = self.scrub(signal.error) if signal.error is not None else None
        if signal.status == FIRING and error is None:
            return Receipt(signal.key, "ignored")
        ident = identify(error.error_type or "Error", error.message, traceback=error.stack_trace,
                         call_site=error.call_site, root=self.root) if error else None
        fields: dict[str, Any] = {}
        severity = "high"
        summary = ""
        if error is not None and ident is not None:
            severity = error.severity if error.severity in core.SEVERITIES else "high"
            # A message that already names its type (Sentry's "RangeError: …") is not prefixed.
            summary = error.message if error.message.startswith(f"{ident.error_type}:") else \
                f"{ident.error_type}: {error.message}"
            fields = {"intake": INTAKE, "error": error.as_dict(),
                      "fingerprint": ident.fingerprint, "error_type": ident.error_type,
                      "call_site": ident.call_site}
        watch_s = self.settings.context.watch_s
        message = error.message if error else ""

        release = str(error.sentry.get("release") or "") if error else ""

        def refire(cur: dict[str, Any], now: float) -> str:
            fix = cur.get("fix") or {}
            merged = fix.get("merged_at")
            if cur.get("status") == FIXED and merged and now - merged <= watch_s:
                if not runs_fix(release, (cur.get("about") or {}).get("releases"), merged):
                    return "duplicate"  # the fix's release is not seen yet: old code runs
                cur["regressions"] = [*cur.get("regressions", []), {
                    "at": now, "pr_url": fix.get("pr_url", ""), "merged_at": merged,
                    "release": release, "message": message[:500]}][-20:]
                return "regression"
            if cur.get("status") == RESOLVED or (cur.get("status") == FIXED and merged):
                return "reopened"
            return "duplicate"

        now = self.clock()
        count = max(1, signal.count)
        about = self._about(error, ident.error_type if ident else "", count, now) \
            if error is not None and signal.status == FIRING else {}
        sig = core.Signal(kind="code", key=signal.key, source=signal.source,
                          status=signal.status, severity=severity, summary=summary,
                          detail=dict(signal.detail), count=count,
                          trust=signal.trust, reporters=signal.reporters(), about=about,
                          delivery=signal.delivery)
        new = signal.status == FIRING and self.ledger.get(sig.id) is None
        if new and signal.trust == tr.ANONYMOUS:
            why = tr.admit_new(self.store, signal.origin or signal.source, self.floods,
                               self.clock())
            if why:  # counted, not stored: the flood stays bounded
                self.ledger.dropped(signal.origin or signal.source, why)
                return Receipt(signal.key, "dropped", decision=why,
                               message=tr.drop_message(why, self.floods))
        if new:
            fields["regressions"] = []
            if signal.users and "error" in fields:
                fields["user_hashes"] = list(dict.fromkeys(signal.users))[:MAX_USERS]
                fields["error"].setdefault("sentry", {})["users"] = len(fields["user_hashes"])
            if error is not None and error.sentry:
                fields["error"].setdefault("sentry", {})["events"] = sig.count
        merge = None
        if error is not None and signal.status == FIRING:
            def merge(cur: dict[str, Any]) -> None:
                _merge_repeat(cur, error, signal.users)
                _tally_release(cur, error, count, now)
        got = self.ledger.receive(sig, fields=fields, refire=refire, merge=merge)
        data = got.incident
        if data is not None and data.get("intake") != INTAKE and signal.status == FIRING:
            self.ledger.update(sig.id, intake=INTAKE, **fields)
        action, status = got.action, got.status
        receipt = Receipt(signal.key, action, status)
        if action in ("opened", "reopened"):
            return self.admit(signal.key, receipt, signal=sig)
        held = ((data or {}).get("gate") or {}).get("reason", "")
        if held == gate.AWAITING_APPROVAL and not approval.ready(data) and \
                approval.needed(self.approvals, core.trust_of(data or {})):
            return receipt  # still waiting for a person: a repeat is only counted
        if action == "duplicate" and status == OPEN and data is not None and \
                held not in HUMAN_HOLDS:
            # Still firing and not being healed: the gate may say yes now (cooldown over,
            # a slot free, a model back).
            return self.admit(signal.key, receipt, signal=sig)
        return receipt

    def _about(self, error: NormalizedError, error_type: str, count: int, now: float
               ) -> dict[str, Any]:
        """What the incident is about (``healer.core.about``): the culprit ``file:function``
        and line, the exception type, release and environment, and the first and last time
        each release showed it. ``error`` is scrubbed already; the file and type are too."""
        s = self.sanitizer.scrub
        culprit = ":".join(p for p in (s(error.file), error.function) if p)
        release = str(error.sentry.get("release") or "")
        about: dict[str, Any] = {
            "culprit": culprit, "line": error.line, "error_type": s(error_type),
            "release": release,
            "environment": error.environment or str(error.sentry.get("environment") or "")}
        if release:
            ab.tally(about, "releases", release, now, count)
        return about

    # --- the gate -----------------------------------------------------------------------------

    def admit(self, key: str, receipt: Receipt | None = None, *,
              signal: core.Signal | None = None) -> Receipt:
        """Run the gates for an open incident; on acceptance create its healing attempt.
        ``signal``: the one just filed for it, whose source's threshold applies
        (``healer.core.thresholds``; a retry or an approval passed it already)."""
        inc = self.get(key)
        base = receipt or Receipt(key, "retry", inc["status"] if inc else "")
        if inc is None or inc.get("status") != OPEN:
            return base
        err = inc["error"]

        level = core.trust_of(inc)

        def record(attempt_id: str) -> None:
            self.attempts.create(attempt_id, {
                "fingerprint": inc["fingerprint"], "error_type": inc["error_type"],
                "call_site": inc["call_site"] or err.get("file", ""),
                "error_message": err["message"], "traceback": err.get("stackTrace", ""),
                "severity": err.get("severity", "high"), "normalised": "",
                "tool_name": f"living-context:{inc['source']}", "incident": key,
                "incident_id": self._id(key), "lane": tr.lane(level)})

        decision = self._decide(inc, record, signal)
        self.ledger.decided(self._id(key), decision)
        if decision.accepted:
            self.ledger.started(self._id(key), decision.attempt_id,
                                "a healing agent is fixing it in a worktree")
        accepted = decision.accepted
        return replace(base, status=HEALING if accepted else OPEN, heal=accepted,
                       attempt_id=decision.attempt_id, decision=decision.reason,
                       message=decision.message)

    def _decide(self, inc: dict[str, Any], record: Callable[[str], None],
                signal: core.Signal | None = None) -> gate.Decision:
        sh, cx = self.settings.selfheal, self.settings.context
        err = inc["error"]
        if os.environ.get("HEALER_HEALING_RUN", "") not in ("", "0"):
            return gate.Decision(gate.RECURSION, "this process is a healing run: no recursion")
        if not (cx.enabled and sh.enabled):
            return gate.Decision(gate.DISABLED,
                                 "healing is disabled (context.enabled / selfheal.enabled)")
        severity = err.get("severity", "high")
        if SEVERITIES.index(severity) > sh.severity_threshold:
            return gate.Decision(gate.BELOW_THRESHOLD, f"severity {severity} is below the "
                                 f"investigation threshold ({SEVERITIES[sh.severity_threshold]})")
        hush = self._silence(inc)
        if hush is not None:
            return hush
        if not err.get("file") and not cx.heal_without_file:
            return gate.Decision(NO_FILE, "the error names no source file to heal; recorded "
                                 "only (context.heal_without_file)")
        if err.get("file") and self.root and not _in_repo(self.root, err["file"]):
            return gate.Decision(NO_FILE, f"the culprit file {err['file']} is not in the "
                                 "repository being healed; recorded only")
        below = self.ledger.below(signal, inc, filed=True) if signal is not None else None
        if below is not None:
            return below  # recorded and counted; the next occurrence asks again
        level = core.trust_of(inc)
        step = approval.run_step(inc, level, self.approvals)
        if step is not None:
            return step
        now = self.clock()
        return gate.admit(self.store, inc["fingerprint"], lambda: new_attempt_id(now), now,
                          replace(self.policy, lane=tr.lane(level)), self.model_available,
                          self._admission, record=record)

    def _silence(self, inc: dict[str, Any]) -> gate.Decision | None:
        """A person's silence: the ``silenced`` decision, the incident marked with it. A mark
        left by a silence that ended is cleared here rather than at the next ``silences``
        pass, so the notices of the run about to start are not held back by it."""
        hush = self.silences.decision(inc)
        iid = self._id(inc["key"])
        if hush is None:
            if inc.get("silenced_by"):
                self.ledger.silence(iid, "")
            return None
        decision, sid = hush
        self.ledger.silence(iid, sid)
        return decision

    def _budget_open(self) -> bool:
        """Whether the code kind's agent budgets have room now (``healer.agents.budget``)."""
        from healer.agents.budget import Budget

        return Budget(self.settings, self.store, clock=self.clock).over("code") is None

    def resume_held(self) -> list[Receipt]:
        """Resume this capability's attempts on hold (healer's own model access was held)
        whose hold is over: the gate admits each again under its own id (back to
        ``dispatch_pending``); a receipt with ``heal`` for each, to start its run."""
        from healer.agents.limits import resumable
        from healer.selfheal import attempts as st

        out = []
        for att in self.attempts.on_hold():
            key = att.get("incident")
            inc = self.get(key) if key else None
            if inc is None or not resumable(att.get("hold") or {}, now=self.clock(),
                                                     budget_open=self._budget_open):
                continue
            aid = att["attempt_id"]
            decision = gate.resume(
                self.store, att["fingerprint"], aid, self.clock(),
                replace(self.policy, lane=str(att.get("lane") or "")), self.model_available,
                record=lambda a: self.attempts.transition(a, st.DISPATCH_PENDING,
                                                          expect=st.HELD, hold=None,
                                                          reason=None))
            if decision.accepted:
                out.append(Receipt(key, "resumed", HEALING, heal=True, attempt_id=aid,
                                   decision=decision.reason, message=decision.message))
        return out

    def retry_held(self) -> list[Receipt]:
        """Admit again the open incidents the gate held back for a while (the cap, the
        cooldown, the breaker, no model)."""
        out = []
        for inc in self.ledger.active("code"):
            if inc.get("intake") != INTAKE or inc.get("status") != OPEN:
                continue
            held = (inc.get("gate") or {}).get("reason")
            if held == gate.AWAITING_APPROVAL and not approval.ready(inc):
                continue  # a person has not approved it (yet)
            if held in gate.RETRYABLE:
                out.append(self.admit(inc["key"]))
        return out


def _merge_repeat(cur: dict[str, Any], error: NormalizedError, users: tuple[str, ...]) -> None:
    """Fold a repeat into its incident: the distinct users (hashes), the latest breadcrumbs,
    release and environment, the tags, and the event count in the Sentry block."""
    if users:
        known = list(cur.get("user_hashes") or [])
        seen = set(known)
        for u in users:
            if len(known) >= MAX_USERS:
                break
            if u not in seen:
                seen.add(u)
                known.append(u)
        cur["user_hashes"] = known
    if not isinstance(cur.get("error"), dict) or not (error.sentry or users):
        return
    block = dict(cur["error"].get("sentry") or {})
    new = error.sentry
    for k in ("breadcrumbs", "release", "environment"):
        if new.get(k):
            block[k] = new[k]
    if new.get("tags"):
        tags = {**(block.get("tags") or {}), **new["tags"]}
        block["tags"] = dict(list(tags.items())[-MAX_TAGS:])
    if cur.get("user_hashes"):
        block["users"] = len(cur["user_hashes"])
    block["events"] = int(cur.get("count", 1))
    cur["error"] = {**cur["error"], "sentry": block}


def _tally_release(cur: dict[str, Any], error: NormalizedError, count: int, now: float
                   ) -> None:
    """One more sighting of the incident in the release ``error`` names (``about.releases``:
    release → first, last, count; the most recent releases kept)."""
    release = str(error.sentry.get("release") or "")
    if release:
        about = dict(cur.get("about") or {})
        ab.tally(about, "releases", release, now, count)
        cur["about"] = about


def _in_repo(root: str, file: str) -> bool:
    """Whether ``file`` (repo-relative or absolute) names a file inside the repository."""
    base = Path(root)
    path = Path(file)
    target = path if path.is_absolute() else base / path
    try:
        target.resolve().relative_to(base.resolve())
    except ValueError:
        return False
    return target.is_file()
