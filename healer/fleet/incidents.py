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
silenced       the gate's ``silenced`` decision recorded and counted,
               ``silenced_by`` set, no (further) repair agent; open
=============  ===============================================================

A person's silence (``healer.core.silences``: ``kind=fleet``, ``node=<peer>``,
``label.channel``, the key or summary) is asked by ``silenced`` before an automatic episode
starts and before each of its rounds dispatches repairs.

Each incident says what it is about (``healer.core.about``): ``peer``, and ``channel`` — the
broken channels of the episode (``ssh, nats``), or ``heartbeat`` for the watchdog's ladder
(with its ``problem``).

Writing here never fails an episode: an error is logged and the episode goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from healer.core import gate
from healer.core import incidents as inc
from healer.core.silences import Silences
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


def signal_of(peer: str, iid: str, problems: list[str], broken: list[str]
              ) -> inc.Signal | None:
    """The signal of incident ``iid`` (``fleet-<peer>-<problem>…``) of ``peer``; None for
    an id of another shape."""
    if not iid.startswith(PREFIX):
        return None
    key = inc.digest(iid[len(PREFIX):])
    return inc.Signal(kind="fleet", key=key, source="fleet-probe", severity="high",
                      summary=f"{peer}: {', '.join(broken) or 'channels'} broken"[:300],
                      detail={"peer": peer, "problems": list(problems), "broken": list(broken)},
                      about={"peer": peer, "channel": ", ".join(broken or problems)})


def _signal(episode: Any) -> inc.Signal | None:
    return signal_of(episode.peer, str(episode.incident or ""), list(episode.problems),
                     list(episode.broken))


def silenced(store: Store, peer: str, iid: str, problems: list[str], broken: list[str],
             clock: Callable[[], float] = time.time) -> str:
    """The id of the silence that covers incident ``iid`` now, its signal recorded and
    counted under the gate's ``silenced`` decision and the incident marked; ``""`` if none
    covers it (a mark a silence that ended left is cleared then). Never raises: a store that
    fails leaves the repair to go on."""
    try:
        sig = signal_of(peer, iid, problems, broken)
        if sig is None:
            return ""
        book = inc.Ledger(store, clock=clock)
        hush = Silences(store, clock=clock).decision(
            {"kind": sig.kind, "key": sig.key, "source": sig.source, "summary": sig.summary,
             "severity": sig.severity, "detail": sig.detail, "about": sig.about})
        if hush is None:
            cur = book.get(sig.id)
            if cur is not None and cur.get("silenced_by"):
                book.silence(sig.id, "")
            return ""
        decision, sid = hush
        book.receive(sig, decision=decision, fields={"silenced_by": sid},
                     merge=lambda cur: cur.update(silenced_by=sid))
        return sid
    except Exception:
        log.exception("could not ask the silences about %s", iid)
        return ""


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
    elif state == "silenced" and episode.attempts:  # silenced between two rounds
        book.set_status(sig.id, inc.OPEN, "silenced",
                        unless=frozenset({inc.ESCALATED, inc.RESOLVED}))
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
