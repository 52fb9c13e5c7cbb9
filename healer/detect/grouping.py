"""Alert grouping: collapse repeats, and give related alerts one incident key.

Two levels, both pure (time is passed in, nothing is stored):

- **Identical alerts** — same code, pattern and target, and the same line once numbers, UUIDs
  and timestamps are masked — collapse into one ``AlertGroup`` with a count and first/last seen.
- **Incidents** — alerts of one code in one workflow family (``play-task-4-impl-x7k2p`` →
  ``play-task-4``) within ``window_s`` (detect.group_window_s, 30 min) of the incident's first
  alert share one ``incident_key``, e.g. ``HEAL-R2-play-task-4-1714557600``. Later alerts open a
  new incident. The play healer uses the key for one forge issue per incident.

Memory is bounded: groups and incidents idle for longer than the window are dropped, and at
most ``max_groups`` of each are kept (the least recently seen go first).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from healer.detect.engine import Alert

_SEGMENT_DIGITS = re.compile(r"^\d+$")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\b")
_TS = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
_WORD_WITH_DIGIT = re.compile(r"\b\w*\d\w*\b")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def family(target: str) -> str:
    """The workflow family of a target: its name up to the first all-digit segment.

    ``play-task-4-impl-x7k2p`` → ``play-task-4``; a name without such a segment is its own
    family.
    """
    parts = target.split("-")
    for i, part in enumerate(parts):
        if i > 0 and _SEGMENT_DIGITS.match(part):
            return "-".join(parts[: i + 1])
    return target


def normalise(line: str) -> str:
    """A line with the parts that change between repeats masked."""
    line = _UUID.sub("<UUID>", line)
    line = _TS.sub("<TS>", line)
    return _WORD_WITH_DIGIT.sub("<ID>", line)


def target_of(alert: Alert) -> str:
    """What an alert is about: its ``target``/``pod``/``job`` label, else its source."""
    for key in ("target", "pod", "play_id", "job", "app"):
        value = alert.labels.get(key)
        if value:
            return value
    return alert.source


@dataclass
class AlertGroup:
    """Identical alerts for one target."""

    alert: Alert
    target: str
    incident_key: str
    count: int = 1
    first_seen: float = 0.0
    last_seen: float = 0.0


@dataclass
class Incident:
    """Alerts of one code in one workflow family within the window."""

    key: str
    code: str
    family: str
    opened: float
    last_seen: float
    count: int = 0
    targets: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Grouped:
    """What ``Grouper.add`` did with an alert."""

    group: AlertGroup
    incident: Incident
    new_group: bool
    new_incident: bool


class Grouper:
    """Collapses alerts and assigns incident keys; feed alerts in roughly time order."""

    def __init__(self, window_s: float = 1800.0, *, max_groups: int = 10_000):
        self.window_s = window_s
        self.max_groups = max_groups
        self._groups: OrderedDict[tuple[str, ...], AlertGroup] = OrderedDict()
        self._incidents: OrderedDict[tuple[str, str], Incident] = OrderedDict()

    def add(self, alert: Alert, *, now: float, target: str | None = None) -> Grouped:
        """Group ``alert`` seen at ``now`` (its own timestamp wins when it has one)."""
        when = alert.ts if alert.ts is not None else now
        tgt = target or target_of(alert)
        fam = family(tgt)
        self.expire(when)

        inc_id = (alert.code, fam)
        incident = self._incidents.get(inc_id)
        new_incident = incident is None or not (
            incident.opened - self.window_s <= when <= incident.opened + self.window_s)
        if incident is None or new_incident:
            key = f"HEAL-{alert.code}-{_UNSAFE.sub('-', fam).strip('-')[:80]}-{int(when)}"
            incident = Incident(key, alert.code, fam, opened=when, last_seen=when)
            self._incidents[inc_id] = incident
        incident.count += 1
        incident.targets.add(tgt)
        incident.last_seen = max(incident.last_seen, when)
        self._incidents.move_to_end(inc_id)

        gid = (alert.code, alert.id, tgt, normalise(alert.line), incident.key)
        group = self._groups.get(gid)
        new_group = group is None
        if group is None:
            group = AlertGroup(alert, tgt, incident.key, count=0, first_seen=when,
                               last_seen=when)
            self._groups[gid] = group
        group.count += 1
        group.first_seen = min(group.first_seen, when)
        group.last_seen = max(group.last_seen, when)
        self._groups.move_to_end(gid)
        self._bound()
        return Grouped(group, incident, new_group, new_incident)

    def expire(self, now: float) -> None:
        """Forget groups and incidents idle for longer than the window."""
        limit = now - self.window_s
        # Both stores are kept in least-recently-seen order, so the stale ones are in front.
        for store in (self._groups, self._incidents):
            while store:
                key, value = next(iter(store.items()))
                if value.last_seen >= limit:
                    break
                del store[key]

    def _bound(self) -> None:
        for store in (self._groups, self._incidents):
            while len(store) > self.max_groups:
                store.popitem(last=False)

    def groups(self) -> list[AlertGroup]:
        return list(self._groups.values())

    def incidents(self) -> list[Incident]:
        return list(self._incidents.values())
