"""The reconciler: brings each target's message in line with each incident's notice state.

One pass (``Notifier.reconcile``, every ``notify.interval_s`` in the loop)::

    candidates = the ledger's recently changed ring (tail) ∪ active incidents
                 ∪ incidents whose notices are still open (escalated, acknowledged, …)
    for each whose record changed since the last pass (``updated_at``):
        state   = notices.state_of(incident)          silenced → nothing at all
        targets = routes.select(kind, severity, source, labels) ∩ configured
        for each target that wants the state and has not had it queued: mark it queued
        write notify/<incident> (compare-and-set), then outbox.put what was marked
                 (a store record notify-outbox/<target>--<incident>: any replica sends it)

The mark is written before anything is queued, so a pass whose write fails queues nothing
and the next one decides again: a notice is queued at most once per state (a write that
failed after landing loses it — never twice).

``Notifier.deliver(item)`` sends one outbox item — if this replica still leads the duty
(``fence``) and claims the item as it was listed (``Outbox.claim``, compare-and-set: of two
senders one sends) — and records the result: the target's memo (Slack ``channel``/``ts``,
PagerDuty's last action) in ``notify/<incident>``, counters in ``notify-stats/all`` (every
process reads them: ``healer status``, ``/metrics``). Nobody else calls a receiver: other
parts change the incident record (an acknowledgement, a silence, an approval) and the next
pass sends what changed. ``Notifier.due`` lists what to send and gives up, without sending
it again, a delivery whose sender stopped while sending it (its claim ran out).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from healer.core.incidents import ACTIVE, Ledger
from healer.core.notify import notices, routes
from healer.core.notify.base import HEALED, SILENCED, Delivery, Notice, Target
from healer.core.notify.outbox import Item, Outbox
from healer.core.store import Store
from healer.errors import ConflictError

log = logging.getLogger(__name__)

RECORDS, OPEN_INDEX, STATS, STATS_KEY = "notify", "notify-index", "notify-stats", "all"
RING_TAIL = 200
CLAIM_MIN_S, CLAIM_TIMEOUTS = 60.0, 3


class Notifier:
    def __init__(self, settings: Any, store: Store, *,
                 targets: dict[str, Target] | None = None, clock: Callable[[], float] = time.time):
        from healer.core.notify.targets import configured

        n = settings.notify
        self.settings, self.store, self.clock = settings, store, clock
        self.targets = configured(n) if targets is None else targets
        self.routes = routes.parse(n.routes, list(self.targets))
        # In the shared store: the replica leading the notify duty next sends what this one
        # queued.
        self.outbox = Outbox(store, max_attempts=n.max_attempts, backoff_s=n.backoff_s,
                             max_backoff_s=n.max_backoff_s)
        # How long a claimed delivery may take before its sender counts as gone: well past
        # the target's timeout, so only a sender that stopped outlives it.
        self.claim_s = max(CLAIM_MIN_S, CLAIM_TIMEOUTS * n.timeout_s)
        self.ledger = Ledger(store)
        # Called right before a receiver is called; raises ConflictError when this replica no
        # longer leads the ``notify`` duty (the loop sets it: ``Duties.fence``), so a paused
        # leader that wakes up after a takeover sends nothing twice.
        self.fence: Callable[[], object] | None = None

    # --- incidents → outbox ---------------------------------------------------------------------

    def reconcile(self) -> int:
        """One pass; how many deliveries it queued."""
        queued = 0
        for iid in self._candidates():
            try:
                queued += self.consider(iid)
            except ConflictError:
                continue  # written meanwhile (a delivery's outcome): the next pass decides
            except Exception:
                log.exception("notify: incident %s not reconciled", iid)
        return queued

    def _candidates(self) -> list[str]:
        ids = self.ledger.recent()[-RING_TAIL:]  # with this process's unwritten moves
        for status in sorted(ACTIVE):
            ids += self.ledger.ids(status)
        ids += self.store.members(f"{OPEN_INDEX}-open")
        return list(dict.fromkeys(ids))

    def consider(self, iid: str) -> int:
        incident = self.ledger.get(iid)
        if incident is None:
            return 0
        rec = self.store.get(RECORDS, iid)
        mine = dict(rec.data) if rec else {"targets": {}}
        if rec and mine.get("seen_at") == incident.get("updated_at"):
            return 0
        state = notices.state_of(incident)
        chosen: list[str] = []
        if state != SILENCED:
            chosen = routes.select(self.routes, kind=str(incident.get("kind", "")),
                                   severity=str(incident.get("severity", "")),
                                   source=str(incident.get("source", "")),
                                   labels=notices.labels_of(incident))
        notice = notices.build(incident, links_url=self._links_url()) if chosen else None
        due = self._due(state, chosen, mine)
        mine["seen_at"] = incident.get("updated_at")
        # The record first, compare-and-set: a pass whose write fails (the store away) or
        # loses (another replica's pass, a paused leader's late one) queues nothing, and the
        # next pass decides again — queued first, a failed write would queue it twice.
        self.store.put(RECORDS, iid, mine, expected_revision=rec.revision if rec else 0)
        for name in due:
            assert notice is not None
            self.outbox.put(name, notice, now=self.clock())
        if due:
            self._open(iid, state != HEALED)
        return len(due)

    def _links_url(self) -> str:
        """Where a message's dashboard link points: ``notify.links_url``, else the API's
        public address (never a guessed default nobody serves on)."""
        return str(self.settings.notify.links_url or self.settings.api.public_url)

    def _due(self, state: str, chosen: list[str], mine: dict[str, Any]) -> list[str]:
        """The targets to tell of ``state`` now, marked queued in ``mine``."""
        due = []
        per = mine.setdefault("targets", {})
        for name in chosen:
            target = self.targets.get(name)
            done = per.get(name) or {}
            if target is None or not target.wants(state) or done.get("queued") == state:
                continue
            if state == HEALED and not done:
                continue  # never told of it: a "resolved" out of the blue helps nobody
            per[name] = {**done, "queued": state}
            due.append(name)
        return due

    def _open(self, iid: str, still: bool) -> None:
        if still:
            self.store.add_member(f"{OPEN_INDEX}-open", iid)
        else:
            self.store.remove_member(f"{OPEN_INDEX}-open", iid)

    def enqueue(self, notice: Notice, *, kind: str, severity: str, source: str,
                labels: dict[str, str] | None = None) -> list[str]:
        """Queue a notice that has no incident record (an escalation of a fleet repair
        ladder, say) to the targets its routes select; the targets' names."""
        chosen = routes.select(self.routes, kind=kind, severity=severity, source=source,
                               labels=labels or {})
        out = []
        for name in chosen:
            target = self.targets.get(name)
            if target is not None and target.wants(notice.state):
                self.outbox.put(name, notice, now=self.clock())
                out.append(name)
        return out

    # --- outbox → receivers ---------------------------------------------------------------------

    def due(self) -> list[Item]:
        """The outbox items to send now. A delivery whose sender stopped while sending it
        (its claim ran out) is given up here, not sent: whether it went out is unknown."""
        now = self.clock()
        items = self.outbox.items()
        for item in self.outbox.abandoned(items, now):
            detail = (f"its sender {item.claimed_by} stopped while sending it; delivered or "
                      "not, unknown: not sent again")
            self.outbox.failed(item, detail, retryable=False, now=now)
            self._count("failures", item.target, detail=detail)
            log.warning("notify: %s for %s given up: %s", item.target, item.notice.incident,
                        detail)
        return [i for i in items if not i.claimed_until and i.next_at <= now]

    async def deliver(self, item: Item) -> bool:
        """Send one item; True when it went out (or there was nothing to send). The store
        calls before and after the send run off the event loop: on a shared store each is a
        network round trip, and the loop serves the API meanwhile."""
        ready = await asyncio.to_thread(self._ready, item)
        if isinstance(ready, bool):
            return ready
        target, item, memo = ready
        try:
            result = await target.send(item.notice, memo)
        except Exception as exc:  # a bug in a target: recorded like a final failure
            log.exception("notify: %s raised", item.target)
            result = Delivery(False, detail=f"{type(exc).__name__} in the {item.target} target")
        return await asyncio.to_thread(self._delivered, item, memo, result)

    def _ready(self, item: Item) -> tuple[Target, Item, dict[str, Any]] | bool:
        """What sending ``item`` needs — its target, the item as claimed, the target's memo —
        or, when it is not to be sent (by this replica, or at all), what ``deliver`` says."""
        target = self.targets.get(item.target)
        if target is None:  # the target was removed from the settings
            self.outbox.done(item)
            return True
        iid = item.notice.incident
        incident = self.ledger.get(iid)
        if incident is not None and incident.get("silenced_by"):
            self.outbox.done(item)  # silenced since it was queued
            return True
        rec = self.store.get(RECORDS, iid)
        memo = dict(((rec.data.get("targets") or {}).get(item.target) or {}).get("memo") or {}
                    ) if rec else {}
        if self.fence is not None:
            try:
                self.fence()
            except ConflictError:
                log.warning("notify: not sending %s for %s, this replica no longer leads "
                            "the notify duty", item.target, iid)
                return False
        now = self.clock()
        claimed = self.outbox.claim(item, self.settings.node, until=now + self.claim_s, now=now)
        if claimed is None:
            return True  # sent, replaced or taken since it was listed: not this one's to send
        return target, claimed, memo

    def _delivered(self, item: Item, memo: dict[str, Any], result: Delivery) -> bool:
        """Record how sending ``item`` went; True when it went out."""
        iid = item.notice.incident
        if result.ok:
            self.outbox.done(item)
            self._sent(iid, item.target, item.notice.state, result.memo or memo)
            self._count("sent", item.target)
            return True
        kept = self.outbox.failed(item, result.detail, retryable=result.retryable,
                                  now=self.clock())
        self._count("retries" if kept else "failures", item.target, detail=result.detail)
        log.warning("notify: %s for %s failed (try %d%s): %s", item.target, iid,
                    item.tries + 1, ", will retry" if kept else ", gave up", result.detail)
        return False

    def _sent(self, iid: str, target: str, state: str, memo: dict[str, Any]) -> None:
        def fn(cur: dict[str, Any] | None) -> dict[str, Any]:
            cur = cur or {"targets": {}}
            per = cur.setdefault("targets", {})
            per[target] = {**(per.get(target) or {}), "sent": state, "memo": memo,
                           "sent_at": self.clock()}
            return cur

        self.store.update(RECORDS, iid, fn)

    def _count(self, what: str, target: str, *, detail: str = "") -> None:
        now = self.clock()

        def fn(cur: dict[str, Any] | None) -> dict[str, Any]:
            cur = cur or {}
            row = cur.setdefault(what, {})
            row[target] = int(row.get(target, 0)) + 1
            if detail:
                cur.setdefault("last_error", {})[target] = {"at": now, "detail": detail[:300]}
            elif what == "sent":
                cur.setdefault("last_sent", {})[target] = now
            return cur

        self.store.update(STATS, STATS_KEY, fn, durable=False)


def stats(store: Store) -> dict[str, Any]:
    rec = store.get(STATS, STATS_KEY)
    return dict(rec.data) if rec else {}


def status_view(settings: Any, store: Store) -> dict[str, Any]:
    """What ``healer status`` and ``/metrics`` show: per target sent/retries/failures and the
    last error, the queue depth and the deliveries that were given up."""
    from healer.core.notify.targets import configured

    box = Outbox(store)
    counts = stats(store)
    names = sorted(set(configured(settings.notify)) | set(counts.get("sent", {}))
                   | set(counts.get("failures", {})))
    pending = box.items()
    return {
        "targets": {n: {"sent": int(counts.get("sent", {}).get(n, 0)),
                        "retries": int(counts.get("retries", {}).get(n, 0)),
                        "failures": int(counts.get("failures", {}).get(n, 0)),
                        "queued": sum(1 for i in pending if i.target == n),
                        "last_error": (counts.get("last_error") or {}).get(n)} for n in names},
        "queue": len(pending),
        "failed": box.failures()[:20],
    }
