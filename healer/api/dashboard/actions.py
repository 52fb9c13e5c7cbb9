"""What a person can do from the Needs-a-person view and an incident's page.

- **approve** / **deny** what waits on a code incident (``healer.selfheal.approvals``: start
  its code agent, publish its held fix; or resolve it), recorded as by the logged-in
  session (and the name the person typed), via ``dashboard``;

- **acknowledge** an incident (``Ledger.acknowledge``, via ``dashboard``), **silence** it for an
  hour (a silence of its kind and key), **add** a silence from the Silences page's form and
  **expire** one (``healer.core.silences``);
- **mark handled** moves the escalation file to ``archive/`` beside it (as a person would by
  hand); for a fleet peer that also ends "already with a person";
- **heal again** hands the incident back to healer: the file is archived, the incident goes
  back to ``open`` with the gate's ``cooldown`` reason (the retryable one every kind's retry
  pass looks for), and the cooldowns the escalation started are lifted, so the next pass —
  the fleet sweep, the self-healing retry, the play evaluation — tries it again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from healer.api.dashboard.incidents import seed_path
from healer.config import Settings
from healer.core import gate, seeds
from healer.core.audit import Audit
from healer.core.incidents import HEALING, KINDS, OPEN, Ledger
from healer.core.names import is_safe_name
from healer.core.silences import Matcher, Silences, parse_duration
from healer.core.silences import silence_incident as silence_one
from healer.core.store import Store
from healer.errors import UsageError


def mark_handled(settings: Settings, name: str, *, by: str) -> Path:
    path = seed_path(settings, name)
    dest = seeds.archive(path)
    Audit(settings.state_path).write("seed_handled", "", seed_file=name, by=by)
    return dest


def find_incident(store: Store, seed: seeds.Seed, name: str) -> dict[str, Any] | None:
    """The incident an escalation file is about: by its ``incident`` front matter (an id, or
    a key of some kind), else the escalated incident whose escalation wrote this file."""
    book = Ledger(store)
    ref = seed.incident
    if ref and is_safe_name(ref):
        for iid in (ref, *(f"{kind}-{ref}" for kind in KINDS)):
            found = book.get(iid)
            if found is not None:
                return found
    for inc in book.list(status="escalated", limit=500).items:
        if Path(str((inc.get("escalation") or {}).get("seed_file", ""))).name == name:
            return inc
    return None


def heal_again(settings: Settings, store: Store, name: str, *, by: str) -> dict[str, Any]:
    path = seed_path(settings, name)
    seed = seeds.read(path)
    inc = find_incident(store, seed, name)
    if inc is None:
        raise UsageError("this escalation names no incident healer knows: mark it handled "
                         "instead, and report the problem again if it comes back")
    iid = inc["id"]
    now = time.time()
    book = Ledger(store, audit=Audit(settings.state_path))
    book.set_status(iid, OPEN, "heal_again", unless=frozenset({HEALING}), stop_requested=False,
                    gate={"reason": gate.COOLDOWN, "at": now,
                          "message": f"a person asked to heal again ({by})"})
    for prefix in _cooldown_prefixes(inc):
        gate.clear_cooldowns(store, prefix)
    seeds.archive(path)
    return book.get(iid) or inc


def _cooldown_prefixes(inc: dict[str, Any]) -> list[str]:
    """The gate keys whose cooldowns the escalation of ``inc`` started (each kind's own)."""
    key = str(inc.get("key", ""))
    kind = inc.get("kind")
    if kind == "fleet":
        peer = str((inc.get("detail") or {}).get("peer") or "")
        return [f"fleet.{peer}."] if is_safe_name(peer) else []
    if kind == "play":
        return [f"play.{key}"] if key else []
    return [key] if key else []


def verdict(settings: Settings, store: Store, iid: str, *, approve: bool, by: str,
            comment: str, services: tuple[Any, Any]) -> dict[str, Any]:
    """A person's verdict from the incident page; the heal starts in this server."""
    from healer.selfheal import approvals

    if approve:
        selfheal, context = services
        out = approvals.approve(settings, store, iid, by=by, via="dashboard", comment=comment,
                                selfheal=selfheal, context=context)
    else:
        out = approvals.deny(settings, store, iid, by=by, via="dashboard", comment=comment)
    return out.as_dict()


def acknowledge(settings: Settings, store: Store, iid: str, *, by: str) -> dict[str, Any]:
    return Ledger(store, audit=Audit(settings.state_path)).acknowledge(iid, by=by,
                                                                       via="dashboard")


def silences(store: Store, expired: bool) -> list[dict[str, Any]]:
    book = Silences(store)
    book.reconcile(Ledger(store))
    return book.list(include_expired=expired)


def silence_incident(settings: Settings, store: Store, iid: str, *, by: str) -> dict[str, Any]:
    audit = Audit(settings.state_path)
    return silence_one(store, Ledger(store, audit=audit), iid, seconds=3600.0, author=by,
                       comment="Silence 1 h from the dashboard", audit=audit)


def add_silence(settings: Settings, store: Store, form: dict[str, str], *, by: str
                ) -> dict[str, Any]:
    """A silence from the form: matchers one a line, a duration, an optional ISO start."""
    from datetime import datetime

    matchers = [Matcher.parse(line) for line in form.get("matchers", "").splitlines()
                if line.strip()]
    starts = None
    if form.get("starts", "").strip():
        try:
            starts = datetime.fromisoformat(form["starts"].strip()).timestamp()
        except ValueError:
            raise UsageError("Starts: not an ISO 8601 time (2030-01-05T22:00)") from None
    seconds = parse_duration(form.get("duration", "") or "2h")
    audit = Audit(settings.state_path)
    book = Silences(store, audit=audit)
    made = book.add(matchers, starts_at=starts, ends_at=(starts or time.time()) + seconds,
                    author=by, comment=form.get("comment", "")[:1000])
    book.reconcile(Ledger(store, audit=audit))
    return made


def expire_silence(settings: Settings, store: Store, sid: str, *, by: str) -> dict[str, Any]:
    audit = Audit(settings.state_path)
    book = Silences(store, audit=audit)
    gone = book.expire(sid, by=by)
    book.reconcile(Ledger(store, audit=audit))
    return gone
