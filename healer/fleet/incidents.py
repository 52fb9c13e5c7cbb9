"""The fleet kind's incidents in the core ledger: one per peer and repair kind.

A healing episode works on ``fleet-<peer>-<problem>[.<problem>…]`` (``diagnosis.incident_id``);
that is the incident's id, so the same fault on the same peer is one incident however many
episodes it takes. Each repair run is an attempt; the episode's end moves the incident:

=============  ===============================================================
episode        incident
=============  ===============================================================
healed         resolved ("repair verified by re-probe")
escalated      escalated, with the seed file a person got
held           stays escalated/open; the gate's ``cooldown`` reason recorded
deferred       open, ``deferred``: another peer's repair comes first
transient      resolved ("cleared before any repair")
=============  ===============================================================

Each incident says what it is about (``healer.core.about``): ``peer``, and ``channel`` — the
broken channels of the episode (``ssh, nats``), or ``heartbeat`` for the watchdog's ladder
(with its ``problem``).

Writing here never fails an episode: an error is logged and the episode goes on.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from healer.core import gate
from healer.core import incidents as inc
from healer.core.store import Store

log = logging.getLogger(__name__)

PREFIX = "fleet-"
HEARTBEAT = "heartbeat"  # the channel the watchdog's repair ladder answers for


class _Attempt(Protocol):
    run_id: str
    agent: str
    kind: str
    status: str
    summary: str


def _signal(episode: Any) -> inc.Signal | None:
    iid = str(episode.incident or "")
    if not iid.startswith(PREFIX):
        return None
    key = inc.digest(iid[len(PREFIX):])
    broken = ", ".join(episode.broken) or "channels"
    return inc.Signal(kind="fleet", key=key, source="fleet-probe", severity="high",
                      summary=f"{episode.peer}: {broken} broken"[:300],
                      detail={"peer": episode.peer, "problems": list(episode.problems),
                              "broken": list(episode.broken)},
                      about={"peer": episode.peer,
                             "channel": ", ".join(episode.broken or episode.problems)})


def dispatched(store: Store, episode: Any, attempt: _Attempt) -> None:
    """A repair run starts: the incident is healing, attempt n+1."""
    try:
        sig = _signal(episode)
        if sig is None:
            return
        book = inc.Ledger(store)
        if book.get(sig.id) is None or book.require(sig.id).get("status") != inc.HEALING:
            book.receive(sig, decision=gate.Decision(gate.ACCEPTED, "repair dispatched"))
        book.started(sig.id, attempt.run_id, f"{attempt.agent} repairing {attempt.kind}")
    except Exception:
        log.exception("could not record the repair of %s as an incident", episode.peer)


def episode_ended(store: Store, episode: Any) -> None:
    """Move the episode's incident to where the episode ended."""
    try:
        _ended(inc.Ledger(store), episode)
    except Exception:
        log.exception("could not record the healing episode of %s as an incident",
                      episode.peer)


def _ended(book: inc.Ledger, episode: Any) -> None:
    sig = _signal(episode)
    state = episode.state
    if sig is None or state in ("elsewhere", "stopped", "healing"):
        return
    if book.get(sig.id) is None:
        if state == "transient":
            return  # a blip seen once and gone: nothing to track
        book.receive(sig)
    for a in episode.attempts:  # attempts of an incident whose id moved mid-episode
        book.started(sig.id, a.run_id, f"{a.agent} repairing {a.kind}")
        book.attempt_ended(sig.id, a.run_id, a.status or "unknown", status=inc.HEALING,
                           reason=str(a.summary or "")[:300])
    if state == "healed":
        book.resolve(sig.id, "repair verified by re-probe")
    elif state == "transient":
        book.resolve(sig.id, "cleared before any repair")
    elif state == "escalated":
        book.escalated(sig.id, seed_file=episode.escalation,
                       reason=f"{', '.join(episode.escalated) or 'repair'} could not be "
                              "healed automatically")
    elif state == "held":
        book.receive(sig, decision=gate.Decision(
            gate.COOLDOWN, "still broken; left to the person it was escalated to "
            "(fleet.repair_cooldown_s)"))
    elif state == "deferred":
        book.receive(sig, decision=gate.Decision(
            "deferred", "waiting for another peer's repair"))
        book.set_status(sig.id, inc.OPEN, "deferred", unless=frozenset({inc.ESCALATED}))


def _ladder_signal(peer: str, problem: str) -> inc.Signal:
    return inc.Signal(kind="fleet", key=inc.digest(f"{peer}-ladder"), source="heartbeat",
                      severity="high", summary=f"{peer}: {problem}"[:300],
                      detail={"peer": peer, "problems": ["ladder"], "problem": problem},
                      about={"peer": peer, "channel": HEARTBEAT, "problem": problem})


def ladder_started(store: Store, peer: str, problem: str, run_id: str) -> None:
    """The watchdog's repair ladder (L1–L5) starts on a peer: one attempt of its incident."""
    try:
        sig = _ladder_signal(peer, problem)
        book = inc.Ledger(store)
        book.receive(sig, decision=gate.Decision(gate.ACCEPTED, "repair ladder started"))
        book.started(sig.id, run_id, f"repair ladder for {problem}")
    except Exception:
        log.exception("could not record the repair ladder of %s as an incident", peer)


def ladder_refused(store: Store, peer: str, problem: str, why: str) -> None:
    try:
        inc.Ledger(store).receive(_ladder_signal(peer, problem),
                                  decision=gate.Decision(gate.COOLDOWN, why))
    except Exception:
        log.exception("could not record the repair ladder of %s as an incident", peer)


def ladder_ended(store: Store, peer: str, problem: str, run_id: str, result: Any) -> None:
    """Repaired → resolved; ran out at L5 → escalated with its seed file; else open."""
    try:
        sig = _ladder_signal(peer, problem)
        book = inc.Ledger(store)
        outcome = "repaired" if result.repaired else ((result.error and "error") or "failed")
        book.attempt_ended(sig.id, run_id, outcome, status=inc.OPEN,
                           reason=result.reason or result.error, level=result.level)
        if result.repaired:
            book.resolve(sig.id, f"repair ladder: {result.reason or result.level}")
        elif result.escalation:
            book.escalated(sig.id, seed_file=result.escalation,
                           reason=result.reason or f"the ladder ran out at {result.level}")
    except Exception:
        log.exception("could not record the repair ladder of %s as an incident", peer)
