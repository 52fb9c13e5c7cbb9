"""The four living-context layers, loaded from ``context.dir`` (default ``.healer/context/``)::

    <dir>/scenarios/<feature>.scenarios.yaml   scenario matrix   (schemas/scenario-matrix)
    <dir>/invariants.yaml                      invariants        (schemas/invariants)
    <dir>/impact-map.yaml                      impact map        (schemas/impact-map)
    <dir>/incident-memory.yaml                 incident memory   (schemas/incident-memory)

Every file is optional; a file that is there must be valid: a bad one raises ``LayerError``
naming the file, the key and what was expected (exit code 2 on the command line). Paths in the
layers are repo-relative and may be globs; ``Layers.for_file`` finds what applies to one
failing file with the path logic of ``healer.context.paths`` (never substring matching).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from filelock import FileLock
from jsonschema.exceptions import best_match

from healer.context import paths
from healer.core.files import atomic_write_text
from healer.core.schemas import describe, validator
from healer.errors import ConfigError

SCENARIOS_DIR = "scenarios"
SCENARIO_SUFFIX = ".scenarios.yaml"
INVARIANTS = "invariants.yaml"
IMPACT_MAP = "impact-map.yaml"
MEMORY = "incident-memory.yaml"
LOKI_RULES = "loki-rules.yaml"
MAX_LAYER_BYTES = 8 << 20
HIGH_RISK_IMPORTERS = 10
MEDIUM_RISK_IMPORTERS = 3


class LayerError(ConfigError):
    """A layer file is unreadable or invalid (``file``, ``key``, ``expected``)."""


# libyaml's parser when PyYAML was built with it (about ten times faster on big impact maps).
_SafeBase: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeBase):  # type: ignore[misc,valid-type]
    """Safe YAML that keeps dates and times as the strings people wrote."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _SafeBase.yaml_implicit_resolvers.items()
}


def read_yaml(path: Path) -> Any:
    """One YAML document, or ``LayerError`` with the line and column of a syntax error."""
    try:
        if path.stat().st_size > MAX_LAYER_BYTES:
            raise LayerError(f"larger than {MAX_LAYER_BYTES >> 20} MiB", file=str(path))
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise LayerError("not UTF-8 text", file=str(path)) from exc
    except OSError as exc:
        raise LayerError(f"cannot read: {exc.strerror or exc}", file=str(path)) from exc
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise LayerError(f"not valid YAML{where}: {problem}", file=str(path)) from exc


def check(schema: str, data: Any, file: str) -> None:
    """Validate ``data`` against ``schemas/<schema>.schema.json``; ``LayerError`` if not."""
    error = best_match(validator(schema).iter_errors(data))
    if error is not None:
        key, message = describe(error)
        raise LayerError(message, file=file, key=key, expected=f"see schemas/{schema}.schema.json")


def _entries(data: Any, key: str) -> list[dict[str, Any]]:
    if data is None:
        return []
    items = data.get(key, []) if isinstance(data, Mapping) else data
    return [dict(i) for i in items]


@dataclass(frozen=True)
class Scenario:
    id: str
    name: str
    test_command: str
    why: str = ""
    constraint: str = ""
    tags: tuple[str, ...] = ()
    module: str = ""
    file: str = ""
    source: str = ""  # the scenario file it came from


@dataclass(frozen=True)
class Check:
    kind: str  # command | forbid | require
    value: str


@dataclass(frozen=True)
class Invariant:
    id: str
    rule: str
    severity: str
    files: tuple[str, ...] = ()
    check: Check | None = None
    category: str = ""

    @property
    def critical(self) -> bool:
        return self.severity == "critical"

    def applies_to(self, path: str) -> bool:
        return not self.files or paths.match_any(self.files, path)


@dataclass(frozen=True)
class ImpactEntry:
    path: str
    depends_on: tuple[str, ...] = ()
    depended_by: tuple[str, ...] = ()
    blast_radius: int = 1
    change_risk: str = "low"


@dataclass(frozen=True)
class PastIncident:
    id: str
    error: str
    file: str = ""
    line: int | None = None
    timestamp: str = ""
    root_cause: str = ""
    fix: str = ""
    lesson: str = ""
    anti_pattern: str = ""
    anti_pattern_match: str = ""
    healing_iterations: int | None = None
    success: bool | None = None

    def about(self, path: str) -> bool:
        return bool(self.file) and paths.match(self.file, path)


@dataclass(frozen=True)
class FileContext:
    """What the layers say about one failing file."""

    file: str
    scenarios: tuple[Scenario, ...] = ()
    invariants: tuple[Invariant, ...] = ()
    impact: ImpactEntry | None = None
    incidents: tuple[PastIncident, ...] = ()

    @property
    def blast_radius(self) -> int:
        return self.impact.blast_radius if self.impact else (1 if self.file else 0)

    @property
    def affected(self) -> tuple[str, ...]:
        return self.impact.depended_by if self.impact else ()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def risk_for(importers: int) -> str:
    if importers >= HIGH_RISK_IMPORTERS:
        return "high"
    return "medium" if importers >= MEDIUM_RISK_IMPORTERS else "low"


@dataclass
class Layers:
    """All four layers of one context folder."""

    folder: Path
    scenarios: list[Scenario] = field(default_factory=list)
    invariants: list[Invariant] = field(default_factory=list)
    impact: dict[str, ImpactEntry] = field(default_factory=dict)
    incidents: list[PastIncident] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, folder: Path | str) -> Layers:
        """Read every layer file in ``folder`` (a missing folder is empty layers)."""
        layers = cls(Path(folder))
        layers._load_scenarios()
        layers._load_invariants()
        layers._load_impact()
        layers._load_incidents()
        return layers

    def _read(self, name: str, schema: str) -> Any:
        path = self.folder / name
        if not path.is_file():
            return None
        data = read_yaml(path)
        if data is None:
            return None
        check(schema, data, str(path))
        self.files_read.append(str(path))
        return data

    def _load_scenarios(self) -> None:
        folder = self.folder / SCENARIOS_DIR
        seen: dict[str, str] = {}
        for path in sorted(folder.glob(f"*{SCENARIO_SUFFIX}")) if folder.is_dir() else []:
            data = self._read(f"{SCENARIOS_DIR}/{path.name}", "scenario-matrix")
            if data is None:
                continue
            pattern = paths.clean_pattern(data["file"])
            for i, s in enumerate(data["scenarios"]):
                if s["id"] in seen:
                    raise LayerError(f"scenario id {s['id']} is also used in {seen[s['id']]}",
                                     file=str(path), key=f"scenarios[{i}].id",
                                     expected="ids unique across all scenario files")
                seen[s["id"]] = path.name
                self.scenarios.append(Scenario(
                    id=s["id"], name=s["name"], test_command=s["test_command"],
                    why=s.get("why", ""), constraint=s.get("constraint", ""),
                    tags=tuple(s.get("tags", ())), module=data["module"], file=pattern,
                    source=f"{SCENARIOS_DIR}/{path.name}"))

    def _load_invariants(self) -> None:
        data = self._read(INVARIANTS, "invariants")
        seen: set[str] = set()
        for i, raw in enumerate(_entries(data, "invariants")):
            if raw["id"] in seen:
                raise LayerError(f"invariant id {raw['id']} is used twice",
                                 file=str(self.folder / INVARIANTS), key=f"[{i}].id")
            seen.add(raw["id"])
            chk = raw.get("check")
            if isinstance(chk, str):
                chk = Check("command", chk)
            elif isinstance(chk, Mapping):
                (kind, value), = chk.items()
                if kind != "command":
                    _compile_regex(value, str(self.folder / INVARIANTS), f"[{i}].check.{kind}")
                chk = Check(kind, value)
            self.invariants.append(Invariant(
                id=raw["id"], rule=raw["rule"], severity=raw["severity"],
                files=tuple(paths.clean_pattern(f) for f in raw.get("files", ())), check=chk,
                category=raw.get("category", "")))

    def _load_impact(self) -> None:
        data = self._read(IMPACT_MAP, "impact-map")
        for raw_path, entry in ((data or {}).get("modules") or {}).items():
            path = paths.clean_pattern(raw_path)
            by = tuple(paths.clean_pattern(p) for p in entry.get("depended_by", ()))
            self.impact[path] = ImpactEntry(
                path=path, depends_on=tuple(paths.clean_pattern(p)
                                            for p in entry.get("depends_on", ())),
                depended_by=by, blast_radius=int(entry.get("blast_radius", 1 + len(by))),
                change_risk=entry.get("change_risk", risk_for(len(by))))

    def _load_incidents(self) -> None:
        data = self._read(MEMORY, "incident-memory")
        for i, raw in enumerate(_entries(data, "incidents")):
            if raw.get("anti_pattern_match"):
                _compile_regex(raw["anti_pattern_match"], str(self.folder / MEMORY),
                               f"[{i}].anti_pattern_match")
            self.incidents.append(PastIncident(
                id=raw["id"], error=raw["error"],
                file=paths.clean_pattern(raw.get("file") or ""), line=raw.get("line"),
                timestamp=raw.get("timestamp", ""), root_cause=raw.get("root_cause", ""),
                fix=raw.get("fix", ""), lesson=raw.get("lesson", ""),
                anti_pattern=raw.get("anti_pattern", ""),
                anti_pattern_match=raw.get("anti_pattern_match", ""),
                healing_iterations=raw.get("healing_iterations"), success=raw.get("success")))

    # --- lookups ------------------------------------------------------------------------------

    def scenarios_for(self, files: Iterable[str]) -> list[Scenario]:
        wanted = [f for f in files if f]
        return [s for s in self.scenarios if any(paths.match(s.file, f) for f in wanted)]

    def invariants_for(self, files: Iterable[str]) -> list[Invariant]:
        wanted = [f for f in files if f]
        return [i for i in self.invariants
                if not i.files or any(i.applies_to(f) for f in wanted)]

    def incidents_for(self, files: Iterable[str]) -> list[PastIncident]:
        wanted = [f for f in files if f]
        return [i for i in self.incidents if any(i.about(f) for f in wanted)]

    def for_file(self, file: str) -> FileContext:
        """The scenarios, invariants, impact entry and past incidents of ``file``."""
        return FileContext(
            file=file, scenarios=tuple(self.scenarios_for([file])),
            invariants=tuple(self.invariants_for([file])), impact=self.impact.get(file),
            incidents=tuple(self.incidents_for([file])))

    def blast_radius(self, changed: Iterable[str]) -> list[str]:
        """The files a change to ``changed`` touches: those files and their importers."""
        out: set[str] = set()
        for path in changed:
            if not path:
                continue
            out.add(path)
            entry = self.impact.get(path)
            if entry is not None:
                out.update(entry.depended_by)
        return sorted(out)


def _compile_regex(value: str, file: str, key: str) -> re.Pattern[str]:
    try:
        return re.compile(value)
    except re.error as exc:
        raise LayerError(f"not a valid regular expression: {exc}", file=file, key=key) from exc


# --- incident memory: healer appends an entry after every healing run ------------------------

MEMORY_HEADER = ("# Incident memory: past incidents, their fixes and the anti-patterns not to "
                 "repeat.\n# healer appends an entry after every healing run "
                 "(schemas/incident-memory.schema.json).\n")


def append_memory(folder: Path | str, entry: Mapping[str, Any]) -> Path:
    """Add ``entry`` to ``incident-memory.yaml`` (kept comments and all, when it is a list).

    Raises ``LayerError`` if the entry is invalid or the existing file is broken (it is then
    left alone rather than overwritten).
    """
    folder = Path(folder)
    path = folder / MEMORY
    check("incident-memory", [dict(entry)], f"{path} (new entry)")
    folder.mkdir(parents=True, exist_ok=True)
    chunk = yaml.safe_dump([dict(entry)], sort_keys=False, allow_unicode=True, width=100)
    with FileLock(str(folder / f".{MEMORY}.lock"), timeout=30):
        data = read_yaml(path) if path.is_file() else None
        if data is not None:
            check("incident-memory", data, str(path))
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        if isinstance(data, list) and data:
            # Appending text keeps the people's comments and formatting above it.
            sep = "" if text.endswith("\n") else "\n"
            atomic_write_text(path, text + sep + chunk)
        elif isinstance(data, Mapping):
            items = [*data.get("incidents", []), dict(entry)]
            atomic_write_text(path, _leading_comments(text) + yaml.safe_dump(
                {**data, "incidents": items}, sort_keys=False, allow_unicode=True, width=100))
        else:
            atomic_write_text(path, (_leading_comments(text) or MEMORY_HEADER) + chunk)
    return path


def _leading_comments(text: str) -> str:
    lines = []
    for line in text.splitlines(keepends=True):
        if not line.startswith("#"):
            break
        lines.append(line)
    return "".join(lines)

