"""Per-service verdicts like the original play healer's: how bad is each service's log?

A single alert is evidence; a service is *reported* once its log holds 3 errors or 5 warnings
(REFERENCE.md, play healer). Its band follows the count of both: ≥50 critical, ≥20 high,
≥10 medium, else low. Up to 5 sample lines are kept per service, each cut to 200 characters.

The service is the source a line's prefix names (``pod/NAME/CONTAINER`` from ``kubectl logs
--prefix``, a compose service), else the stream the line came from. An alert is an error when
its line states error or fatal level (``healer.detect.lines``), a warning when it states warn;
a line stating no level counts by the pattern's severity (critical/high: error).

The tally is plain data (``to_dict``/``merge``), so scan workers can each count their region.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NamedTuple
else:
    from healer._runtime_typing import NamedTuple

ERRORS_MIN = 3
WARNINGS_MIN = 5
BANDS = ((50, "critical"), (20, "high"), (10, "medium"))
SAMPLES = 5
SAMPLE_CHARS = 200


class ServiceReport(NamedTuple):
    service: str
    errors: int
    warnings: int
    band: str
    samples: list[str]


def band(count: int) -> str:
    for floor, name in BANDS:
        if count >= floor:
            return name
    return "low"


_ERROR_LEVELS = frozenset(("error", "fatal"))
_ERROR_SEVERITIES = frozenset(("critical", "high"))
_KIND = attrgetter("origin", "source", "level", "severity")


def is_error(level: str, severity: str) -> bool:
    if level:
        return level in _ERROR_LEVELS
    return severity in _ERROR_SEVERITIES


class ServiceTally:
    """Errors, warnings and sample lines per service."""

    def __init__(self) -> None:
        self.rows: dict[str, list[Any]] = {}  # service → [errors, warnings, samples]

    def add(self, alerts: Iterable[Any]) -> None:
        # A scan adds tens of thousands of alerts at once: they are counted by kind (four
        # fields read in C), and walked field by field only until every service has its
        # samples. The engine read each line's level and source (a.level, a.origin). (Not
        # collections.Counter: its first isinstance check against Mapping costs ~50 ms.)
        alerts = alerts if isinstance(alerts, list) else list(alerts)
        kinds: dict[tuple[str, str, str, str], int] = {}
        seen = kinds.get
        for kind in map(_KIND, alerts):
            kinds[kind] = seen(kind, 0) + 1
        self.add_kinds(kinds, alerts)

    def add_kinds(self, kinds: dict[tuple[str, str, str, str], int],
                  alerts: list[Any]) -> None:
        """``add(alerts)``, their count per (origin, source, level, severity) given (counted
        natively by the scan: ``_speedups.alert_counts``)."""
        rows = self.rows
        hungry: set[str] = set()
        for (origin, source, level, severity), n in kinds.items():
            service = origin or source
            row = rows.get(service)
            if row is None:
                row = rows[service] = [0, 0, []]
            if (level in _ERROR_LEVELS) if level else (severity in _ERROR_SEVERITIES):
                row[0] += n
            else:
                row[1] += n
            if len(row[2]) < SAMPLES:
                hungry.add(service)
        for a in alerts if hungry else ():
            service = a.origin or a.source
            if service in hungry:
                samples = rows[service][2]
                samples.append(a.line[:SAMPLE_CHARS])
                if len(samples) >= SAMPLES:
                    hungry.discard(service)
                    if not hungry:
                        break

    def to_dict(self) -> dict[str, list[Any]]:
        return self.rows

    def merge(self, rows: dict[str, list[Any]]) -> None:
        for service, (errors, warnings, samples) in rows.items():
            row = self.rows.setdefault(service, [0, 0, []])
            row[0] += errors
            row[1] += warnings
            row[2].extend(samples[:SAMPLES - len(row[2])])

    def reports(self) -> list[ServiceReport]:
        """The services over a threshold, the worst first."""
        out = [ServiceReport(s, e, w, band(e + w), list(samples))
               for s, (e, w, samples) in self.rows.items()
               if e >= ERRORS_MIN or w >= WARNINGS_MIN]
        return sorted(out, key=lambda r: (-(r.errors + r.warnings), r.service))
