"""Routes: which targets hear of which incidents, the way Alertmanager routes alerts.

``notify.routes`` is a list of ``{match: {kind, severity, source, labels}, targets: [...],
continue: false}``. A match key takes one value or a list of values (any of them matches);
``labels`` is a map each of whose entries must equal the incident's label (its ``labels`` and
``about`` fields). Routes are tried in order; the first that matches wins, unless it says
``continue: true``, in which case later routes may add targets. No routes configured: the
default route — severity critical/high to every configured target.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from healer.errors import ConfigError

TARGETS = ("slack", "pagerduty", "webhook", "email", "discord")
MATCH_KEYS = ("kind", "severity", "source", "labels")
DEFAULT_SEVERITIES = ("critical", "high")


@dataclass(frozen=True)
class Route:
    targets: tuple[str, ...]
    match: dict[str, tuple[str, ...]] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    cont: bool = False

    def matches(self, kind: str, severity: str, source: str, labels: dict[str, str]) -> bool:
        have = {"kind": kind, "severity": severity, "source": source}
        if any(have[k] not in want for k, want in self.match.items()):
            return False
        return all(labels.get(k) == v for k, v in self.labels.items())


def parse(raw: list[dict[str, Any]], configured: list[str]) -> list[Route]:
    """``notify.routes`` as Routes; ``ConfigError`` naming the bad entry."""
    if not raw:
        return [Route(tuple(configured), {"severity": DEFAULT_SEVERITIES})] if configured else []
    out = []
    for i, entry in enumerate(raw):
        where = f"notify.routes[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"match", "targets", "continue"}:
            raise ConfigError("a route has `match`, `targets` and `continue` only",
                              file="settings", key=where)
        targets = entry.get("targets") or []
        if not isinstance(targets, list) or not targets or \
                any(t not in TARGETS for t in targets):
            raise ConfigError(f"`targets` must be a non-empty list of {', '.join(TARGETS)}",
                              file="settings", key=where)
        match = entry.get("match") or {}
        if not isinstance(match, dict) or set(match) - set(MATCH_KEYS):
            raise ConfigError(f"`match` takes {', '.join(MATCH_KEYS)}", file="settings",
                              key=where)
        labels = match.get("labels") or {}
        if not isinstance(labels, dict):
            raise ConfigError("`match.labels` must be a map", file="settings", key=where)
        values = {k: tuple(str(x) for x in (v if isinstance(v, list) else [v]))
                  for k, v in match.items() if k != "labels"}
        out.append(Route(tuple(targets), values, {str(k): str(v) for k, v in labels.items()},
                         bool(entry.get("continue", False))))
    return out


def select(routes: list[Route], *, kind: str, severity: str, source: str,
           labels: dict[str, str]) -> list[str]:
    """The targets of the first matching route (and of the ``continue`` ones before it)."""
    chosen: list[str] = []
    for route in routes:
        if route.matches(kind, severity, source, labels):
            chosen += [t for t in route.targets if t not in chosen]
            if not route.cont:
                break
    return chosen
