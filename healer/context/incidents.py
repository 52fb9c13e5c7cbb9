"""Living-context incidents: one record per dedup key, admitted through the shared gate.

::

    Signal ─► IncidentBook.receive ─► context-incidents/<key>  (create-only: one per key)
                     │                    open ─► healing ─► fixed ─► (merged, watched) ─► resolved
                     │                      └──────────────► escalated
                     └─► admit: recursion, enabled, severity, a file to heal, then
                         healer.selfheal.gates.admit (novelty, cooldown, cap, breaker, model)
                         → a heal-attempts record shared with report_error

* A firing signal for a key that is open, healing, escalated or fixed-but-not-merged is a
  duplicate (counted); an open one that is not being healed goes through the gate again (the
  cooldown may be over, a slot free). For a resolved incident it reopens it; for a fix merged
  less than ``context.watch_s`` ago it is a **regression**: the incident reopens with the
  regression noted (and a person is told).
* A resolved signal closes what the key opened; one for an unknown key is ignored.
* Webhook deliveries are remembered by the SHA-256 of their raw body
  (``context-deliveries``) so a replayed payload is dropped.

Everything about an incident — every decision and step — is also appended to the audit trail
``<state>/heal-audit.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from filelock import FileLock

from healer.context.ingest import FIRING, SEVERITIES, NormalizedError, Signal
from healer.core.identity import identify
from healer.core.publish.sanitizer import Sanitizer
from healer.core.store import Store
from healer.errors import ConflictError
from healer.selfheal import gates
from healer.selfheal.attempts import Attempts, new_attempt_id

log = logging.getLogger(__name__)

INCIDENTS = "context-incidents"
DELIVERIES = "context-deliveries"
OPEN, HEALING, FIXED, ESCALATED, RESOLVED = "open", "healing", "fixed", "escalated", "resolved"
STATUSES = (OPEN, HEALING, FIXED, ESCALATED, RESOLVED)
NO_FILE = "no_file"
FIX_REJECTED = "fix_rejected"
HUMAN_HOLDS = frozenset({FIX_REJECTED})  # decisions only a person undoes
MAX_HISTORY = 100
AUDIT_FILE = "heal-audit.jsonl"
MAX_AUDIT_BYTES = 20 << 20


class Audit:
    """The audit trail: one JSON object per line, appended under a lock, rotated at 20 MiB."""

    def __init__(self, state_dir: Path | str, clock: Callable[[], float] = time.time):
        self.path = Path(state_dir) / AUDIT_FILE
        self._clock = clock

    def write(self, event: str, incident: str = "", **fields: Any) -> None:
        record = {"ts": round(self._clock(), 3), "event": event, "incident": incident, **fields}
        line = (json.dumps(record, sort_keys=True, ensure_ascii=False, default=str) + "\n")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(self.path) + ".lock", timeout=30):
                if self.path.exists() and self.path.stat().st_size > MAX_AUDIT_BYTES:
                    os.replace(self.path, self.path.with_suffix(".jsonl.1"))
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
        except OSError:
            log.exception("could not append to the audit trail %s", self.path)

    def read(self, incident: str = "") -> list[dict[str, Any]]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = [json.loads(x) for x in lines if x.strip()]
        return [r for r in out if not incident or r.get("incident") == incident]


@dataclass(frozen=True)
class Receipt:
    """What became of one signal."""

    key: str
    action: str  # opened | duplicate | reopened | regression | resolved | ignored
    status: str = ""
    heal: bool = False  # admitted: a healing run should start now
    attempt_id: str = ""
    decision: str = ""
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in ("", None)}


def _hist(rec: dict[str, Any], at: float, event: str, **detail: Any) -> None:
    rec["history"] = [*rec.get("history", []), {"at": at, "event": event, **detail}][
        -MAX_HISTORY:]


class IncidentBook:
    """The incident records of one store, and the gate they pass through."""

    def __init__(self, settings: Any, store: Store, *, root: Path | str | None = None,
                 clock: Callable[[], float] = time.time,
                 model_available: Callable[[], bool] = lambda: True,
                 audit: Audit | None = None, sanitizer: Sanitizer | None = None):
        self.settings = settings
        self.store = store
        self.root = str(root or "")
        self.clock = clock
        self.model_available = model_available
        self.audit = audit or Audit(settings.state_path, clock)
        self.sanitizer = sanitizer or Sanitizer(root=root or None,
                                                allowed_hosts=settings.selfheal.allowed_hosts)
        self.attempts = Attempts(store, clock)
        self.limits = gates.Limits.from_settings(settings.selfheal)
        self._admission = gates.AdmissionReader(store)

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
        rec = self.store.get(INCIDENTS, key)
        return rec.data if rec else None

    def all(self, status: str | None = None) -> list[dict[str, Any]]:
        out = [r.data for r in self.store.list(INCIDENTS)
               if status is None or r.data.get("status") == status]
        return sorted(out, key=lambda d: d.get("last_seen", 0), reverse=True)

    def update(self, key: str, event: str = "", **fields: Any) -> dict[str, Any] | None:
        """Set ``fields`` on an incident (and note ``event`` in its history)."""
        now = self.clock()

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None:
                return None
            cur.update(fields)
            if event:
                _hist(cur, now, event)
            return cur

        rec = self.store.update(INCIDENTS, key, fn)
        return rec.data if rec else None

    # --- intake -------------------------------------------------------------------------------

    def scrub(self, error: NormalizedError) -> NormalizedError:
        s = self.sanitizer.scrub
        sentry = dict(error.sentry)
        if sentry.get("breadcrumbs"):
            sentry["breadcrumbs"] = [s(b) for b in sentry["breadcrumbs"]]
        for k in ("issue_url", "release", "environment"):
            if isinstance(sentry.get(k), str):
                sentry[k] = s(sentry[k])
        return replace(error, message=s(error.message), stack_trace=s(error.stack_trace),
                       environment=s(error.environment), function=s(error.function),
                       sentry=sentry)

    def receive(self, signal: Signal) -> Receipt:
        """Record one signal (dedup, resolve, reopen, regression) and admit new work."""
        now = self.clock()
        error = self.scrub(signal.error) if signal.error is not None else None
        ident = identify(error.error_type or "Error", error.message, traceback=error.stack_trace,
                         call_site=error.call_site, root=self.root) if error else None
        outcome: dict[str, str] = {}

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if signal.status == FIRING:
                return self._firing(cur, signal, error, ident, now, outcome)
            return self._resolved(cur, signal, now, outcome)

        rec = self.store.update(INCIDENTS, signal.key, fn)
        action = outcome.get("action", "ignored")
        status = rec.data["status"] if rec else ""
        self.audit.write(action, signal.key, source=signal.source, status=status,
                         signal=signal.status,
                         **({"fingerprint": ident.fingerprint} if ident else {}))
        receipt = Receipt(signal.key, action, status)
        if action in ("opened", "reopened"):
            return self.admit(signal.key, receipt)
        if action == "duplicate" and status == OPEN and rec is not None and (
                rec.data.get("decision") or {}).get("reason") not in HUMAN_HOLDS:
            # Still firing and not being healed: the gate may say yes now (cooldown over,
            # a slot free, a model back).
            return self.admit(signal.key, receipt)
        return receipt

    def _firing(self, cur: dict[str, Any] | None, signal: Signal, error: NormalizedError | None,
                ident: Any, now: float, out: dict[str, str]) -> dict[str, Any] | None:
        if error is None:
            out["action"] = "ignored"
            return None
        if cur is None:
            out["action"] = "opened"
            rec = {"key": signal.key, "source": signal.source, "status": OPEN,
                   "error": error.as_dict(), "fingerprint": ident.fingerprint,
                   "error_type": ident.error_type, "call_site": ident.call_site,
                   "occurrences": 1, "first_seen": now, "last_seen": now,
                   "detail": dict(signal.detail), "attempts": [], "regressions": []}
            _hist(rec, now, "opened")
            return rec
        cur["occurrences"] = cur.get("occurrences", 0) + 1
        cur["last_seen"] = now
        status = cur.get("status")
        fix = cur.get("fix") or {}
        merged = fix.get("merged_at")
        if status == FIXED and merged and now - merged <= self.settings.context.watch_s:
            out["action"] = "regression"
            cur["regressions"] = [*cur.get("regressions", []), {
                "at": now, "pr_url": fix.get("pr_url", ""), "merged_at": merged,
                "message": error.message[:500]}][-20:]
            cur["status"] = OPEN
            _hist(cur, now, "regression", pr_url=fix.get("pr_url", ""))
        elif status == RESOLVED or (status == FIXED and merged):
            out["action"] = "reopened"
            cur.update(status=OPEN, error=error.as_dict(), fingerprint=ident.fingerprint,
                       error_type=ident.error_type, call_site=ident.call_site,
                       reopened=cur.get("reopened", 0) + 1, resolved_at=None)
            _hist(cur, now, "reopened")
        else:
            out["action"] = "duplicate"
        return cur

    def _resolved(self, cur: dict[str, Any] | None, signal: Signal, now: float,
                  out: dict[str, str]) -> dict[str, Any] | None:
        if cur is None:
            out["action"] = "ignored"  # a resolution of something never seen here
            return None
        if cur.get("status") == RESOLVED:
            out["action"] = "duplicate"
            return None
        out["action"] = "resolved"
        cur.update(status=RESOLVED, resolved_at=now, resolved_by=signal.source)
        _hist(cur, now, "resolved", by=signal.source)
        return cur

    # --- the gate -----------------------------------------------------------------------------

    def admit(self, key: str, receipt: Receipt | None = None) -> Receipt:
        """Run the gates for an open incident; on acceptance create its healing attempt."""
        inc = self.get(key)
        base = receipt or Receipt(key, "retry", inc["status"] if inc else "")
        if inc is None or inc.get("status") != OPEN:
            return base
        err = inc["error"]

        def record(attempt_id: str) -> None:
            self.attempts.create(attempt_id, {
                "fingerprint": inc["fingerprint"], "error_type": inc["error_type"],
                "call_site": inc["call_site"] or err.get("file", ""),
                "error_message": err["message"], "traceback": err.get("stackTrace", ""),
                "severity": err.get("severity", "high"), "normalised": "",
                "tool_name": f"living-context:{inc['source']}", "incident": key})

        reason, message, attempt_id = self._decide(inc, record)
        if reason == gates.ACCEPTED:

            def claim(cur: dict[str, Any] | None) -> dict[str, Any] | None:
                if cur is None:
                    return None
                cur.update(status=HEALING, attempt_id=attempt_id,
                           attempts=[*cur.get("attempts", []), attempt_id][-50:],
                           decision={"reason": reason, "message": message})
                _hist(cur, self.clock(), "healing", attempt_id=attempt_id)
                return cur

            self.store.update(INCIDENTS, key, claim)
        else:
            self.update(key, decision={"reason": reason, "message": message,
                                       "attempt_id": attempt_id, "at": self.clock()})
        self.audit.write("gate", key, decision=reason, message=message, attempt_id=attempt_id)
        accepted = reason == gates.ACCEPTED
        return replace(base, status=HEALING if accepted else OPEN, heal=accepted,
                       attempt_id=attempt_id, decision=reason, message=message)

    def _decide(self, inc: dict[str, Any], record: Callable[[str], None]
                ) -> tuple[str, str, str]:
        sh, cx = self.settings.selfheal, self.settings.context
        err = inc["error"]
        if os.environ.get("HEALER_HEALING_RUN", "") not in ("", "0"):
            return gates.RECURSION, "this process is a healing run: no recursion", ""
        if not (cx.enabled and sh.enabled):
            return gates.DISABLED, "healing is disabled (context.enabled / selfheal.enabled)", ""
        severity = err.get("severity", "high")
        if SEVERITIES.index(severity) > sh.severity_threshold:
            return (gates.BELOW_THRESHOLD, f"severity {severity} is below the investigation "
                    f"threshold ({SEVERITIES[sh.severity_threshold]})", "")
        if not err.get("file") and not cx.heal_without_file:
            return (NO_FILE, "the error names no source file to heal; recorded only "
                    "(context.heal_without_file)", "")
        now = self.clock()
        d = gates.admit(self.store, inc["fingerprint"], lambda: new_attempt_id(now), now,
                        self.limits, self.model_available, self._admission, record=record)
        return d.reason, d.message, d.attempt_id

    def retry_held(self) -> list[Receipt]:
        """Admit again the open incidents the concurrency cap held back."""
        out = []
        for inc in self.all(OPEN):
            if (inc.get("decision") or {}).get("reason") == gates.CONCURRENCY_CAP:
                out.append(self.admit(inc["key"]))
        return out
