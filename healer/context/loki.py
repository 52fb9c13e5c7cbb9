"""The LogQL rule runner, for setups whose Loki has no ruler.

Each rule of ``loki-rules.yaml`` (``schemas/loki-rules.schema.json``) counts the lines its log
query returns over the last ``window_s`` seconds through ``/loki/api/v1/query_range`` (paged,
see ``healer.detect.loki``). Above ``threshold_per_min`` lines per minute the rule fires an
incident ``loki-<name>`` whose error is the latest matching line (the file and line named in
the lines, else the rule's ``file``); once back under the threshold it resolves the incident it
opened. The reference rule is ``{app="service"} |= "ERROR"`` above 5 lines a minute.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer.context import paths
from healer.context.ingest import (
    FIRING,
    MAX_MESSAGE,
    RESOLVED,
    NormalizedError,
    Signal,
    _cut,
    error_type_of,
    locate,
)
from healer.context.layers import LOKI_RULES, check, read_yaml
from healer.core.trust import TRUSTED
from healer.detect.loki import Entry, LokiSource

MAX_COUNTED = 50_000  # lines counted per evaluation; far above any threshold that matters
SAMPLES = 5


@dataclass(frozen=True)
class Rule:
    name: str
    query: str
    threshold_per_min: float = 5.0
    window_s: float = 300.0
    severity: str = "high"
    environment: str = ""
    file: str = ""


@dataclass
class Evaluation:
    rule: Rule
    count: int
    samples: list[Entry] = field(default_factory=list)
    capped: bool = False

    @property
    def rate_per_min(self) -> float:
        return self.count / (self.rule.window_s / 60.0)

    @property
    def firing(self) -> bool:
        return self.rate_per_min > self.rule.threshold_per_min

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule.name, "count": self.count, "capped": self.capped,
                "rate_per_min": round(self.rate_per_min, 3),
                "threshold_per_min": self.rule.threshold_per_min, "firing": self.firing}


def rules_path(settings: Any) -> Path:
    cx = settings.context
    return Path(cx.loki_rules).expanduser() if cx.loki_rules else Path(cx.dir) / LOKI_RULES


def load_rules(path: Path | str) -> list[Rule]:
    """The rules in ``path`` (none if it does not exist); ``LayerError`` if it is invalid."""
    path = Path(path)
    if not path.is_file():
        return []
    data = read_yaml(path)
    if data is None:
        return []
    check("loki-rules", data, str(path))
    names: set[str] = set()
    out = []
    for raw in data["rules"]:
        if raw["name"] in names:
            from healer.context.layers import LayerError

            raise LayerError(f"rule name {raw['name']} is used twice", file=str(path))
        names.add(raw["name"])
        out.append(Rule(name=raw["name"], query=raw["query"],
                        threshold_per_min=float(raw.get("threshold_per_min", 5)),
                        window_s=float(raw.get("window_s", 300)),
                        severity=raw.get("severity", "high"),
                        environment=raw.get("environment", ""),
                        file=paths.clean_pattern(raw.get("file", ""))))
    return out


def evaluate(url: str, rule: Rule, *, now: float, timeout_s: float = 10.0) -> Evaluation:
    """Count ``rule``'s matching lines in ``[now - window, now)``."""
    source = LokiSource(url, rule.query, timeout_s=timeout_s)
    start, end = int((now - rule.window_s) * 1e9), int(now * 1e9)
    count, capped = 0, False
    samples: deque[Entry] = deque(maxlen=SAMPLES)
    for entry in source.query_range(start, end):
        count += 1
        samples.append(entry)
        if count >= MAX_COUNTED:
            capped = True
            break
    return Evaluation(rule, count, list(samples), capped)


def signal_for(ev: Evaluation, root: Path | str | None = None) -> Signal:
    """The signal an evaluation sends: the rule firing with its latest line, or resolved."""
    key = f"loki-{ev.rule.name}"
    if not ev.firing:
        return Signal(key=key, status=RESOLVED, source="loki", detail=ev.as_dict(),
                      trust=TRUSTED)  # healer's own rules, evaluated by healer
    lines = [_cut(s.line, 2000) for s in ev.samples]
    latest = lines[-1].strip() if lines else ev.rule.name
    file, line, func = locate("\n".join(lines), root)
    if not file and ev.rule.file:
        file = ev.rule.file
    head = (f"LogQL rule {ev.rule.name}: {ev.count} matching lines in {ev.rule.window_s:g} s "
            f"({ev.rate_per_min:.1f}/min, threshold {ev.rule.threshold_per_min:g}/min); "
            f"latest lines:")
    labels = ev.samples[-1].labels if ev.samples else {}
    error = NormalizedError(
        message=_cut(latest, MAX_MESSAGE), file=file, line=line,
        stack_trace="\n".join([head, *lines]), severity=ev.rule.severity, source="loki",
        environment=ev.rule.environment or labels.get("env", "") or labels.get("namespace", ""),
        error_type=error_type_of(latest.split("ERROR", 1)[-1].strip(" :]")), function=func)
    return Signal(key=key, status=FIRING, source="loki", error=error, trust=TRUSTED,
                  detail={**ev.as_dict(), "query": ev.rule.query, "labels": dict(labels)})
