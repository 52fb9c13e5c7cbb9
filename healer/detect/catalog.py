"""The detection catalog: which log lines mean which failure.

A catalog is YAML (``schemas/catalog.schema.json``)::

    version: 1
    patterns:            # what to alert on
      - {id, regex, code, priority, severity, meaning, action, window_s?, case_sensitive?, generic?,
         min_level?}
    suppress:            # known false positives, applied first
      - {id, regex, reason?, codes?, case_sensitive?}
    disable: [id, ...]   # extend mode: drop embedded patterns or suppressions

The embedded catalog (``healer/detect/catalog.yaml``) holds the play healer's seed patterns, the
log-level patterns and the false-positive suppressions. ``Catalog.load(path, "extend")`` adds a
user's catalog to it (a user pattern with an embedded id replaces it); ``"replace"`` uses the
user's alone. Every problem is a ``CatalogError`` naming the file, the pattern and what is wrong.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from healer.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Literal, NamedTuple, TypeAlias
else:
    from healer._runtime_typing import NamedTuple

SEVERITIES = ("info", "low", "warning", "medium", "high", "critical")
SEVERITY_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}
PRIORITY_NAMES = {1: "pre-flight", 2: "runtime", 3: "lifecycle"}
EMBEDDED = os.path.join(os.path.dirname(__file__), "catalog.yaml")

CatalogMode: TypeAlias = 'Literal["extend", "replace"]'


class CatalogError(ConfigError):
    """A catalog is unusable: ``file``, the pattern ``pattern_id`` and the ``problem``."""

    def __init__(self, problem: str, *, file: str, pattern_id: str = "", key: str = ""):
        super().__init__(problem, file=file, key=key)
        self.pattern_id = pattern_id
        self.problem = problem
        where = [file]
        if pattern_id:
            where.append(f"pattern '{pattern_id}'" + (f" ({key})" if key else ""))
        elif key:
            where.append(key)
        self.args = (": ".join([*where, problem]),)


# NamedTuples, not dataclasses: importing dataclasses alone costs ~15 ms of every `healer scan`.


class Pattern(NamedTuple):
    """One thing to alert on. ``index`` is its position in the catalog (stable order)."""

    id: str
    regex: str
    code: str
    priority: int
    severity: str
    meaning: str = ""
    action: str = ""
    window_s: float | None = None
    case_sensitive: bool = False
    generic: bool = False
    source: str = ""
    index: int = 0
    min_level: str = "warn"  # a line stating a lower level never fires it (healer.detect.lines)
    failure_class: str = ""  # an agent runtime failure's class (healer.agents.failures)

    @property
    def flags(self) -> int:
        return 0 if self.case_sensitive else re.IGNORECASE

    def compiled(self) -> re.Pattern[bytes]:
        return re.compile(self.regex.encode("utf-8"), self.flags)


class Suppression(NamedTuple):
    """A known false positive: a matching line raises no alert (of ``codes``, or of any code)."""

    id: str
    regex: str
    reason: str = ""
    codes: tuple[str, ...] = ()
    case_sensitive: bool = False
    source: str = ""

    def compiled(self) -> re.Pattern[bytes]:
        return re.compile(self.regex.encode("utf-8"), 0 if self.case_sensitive else re.IGNORECASE)


class Catalog(NamedTuple):
    """Patterns and suppressions, validated; ``digest`` identifies the content."""

    patterns: tuple[Pattern, ...]
    suppressions: tuple[Suppression, ...] = ()
    sources: tuple[str, ...] = ()
    digest: str = ""

    # -- loading -------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path | None = None, mode: CatalogMode = "extend") -> Catalog:
        """The embedded catalog, extended or replaced by the user's catalog at ``path``."""
        if mode not in ("extend", "replace"):
            raise CatalogError(f"unknown catalog mode {mode!r} (extend or replace)",
                               file=str(path or EMBEDDED))
        if not path:
            return cls.embedded()
        name = str(path)
        user_data, user = _load_checked(_read_bytes(name), name)
        if mode == "replace":
            if not user.patterns:
                raise CatalogError("a replacing catalog needs at least one pattern", file=name)
            return user
        return cls.embedded().extended(user, disable=user_data.get("disable", ()), source=name)

    @classmethod
    def embedded(cls) -> Catalog:
        """healer's own catalog (schema-checked like any other, once per content)."""
        return _embedded()

    @classmethod
    def from_data(cls, data: Any, *, source: str = "<catalog>", check_schema: bool = True,
                  check_regexes: bool = True) -> Catalog:
        """Build a catalog from parsed YAML/JSON, raising ``CatalogError`` on any problem.
        ``check_regexes=False``: the data passed these checks before (compiling every regex to
        check it is a third of the catalog's load)."""
        if not isinstance(data, Mapping):
            raise CatalogError("expected a mapping with `patterns` (and `suppress`)", file=source)
        if check_schema:
            _check_schema(data, source)
        patterns = tuple(_pattern(p, i, source, check_regexes)
                         for i, p in enumerate(data.get("patterns", ())))
        sups = tuple(_suppression(s, i, source, check_regexes)
                     for i, s in enumerate(data.get("suppress", ())))
        _check_unique([p.id for p in patterns], source, "patterns")
        _check_unique([s.id for s in sups], source, "suppress")
        cat = cls(patterns, sups, (source,))
        cat._check_codes()
        return cat._with_digest()

    def extended(self, other: Catalog, *, disable: Iterable[str] = (), source: str = ""
                 ) -> Catalog:
        """This catalog plus ``other``: same ids are replaced, ``disable`` ids dropped."""
        drop = set(disable)
        known = {p.id for p in self.patterns} | {s.id for s in self.suppressions}
        unknown = sorted(drop - known - {p.id for p in other.patterns})
        if unknown:
            raise CatalogError(f"`disable` names unknown id {unknown[0]!r}",
                               file=source or "<catalog>", key="disable")
        theirs = {p.id: p for p in other.patterns}
        patterns = [theirs.pop(p.id, p) for p in self.patterns if p.id not in drop]
        patterns += [p for p in other.patterns if p.id in theirs]
        their_sups = {s.id: s for s in other.suppressions}
        sups = [their_sups.pop(s.id, s) for s in self.suppressions if s.id not in drop]
        sups += [s for s in other.suppressions if s.id in their_sups]
        cat = Catalog(_reindex(patterns), tuple(sups), self.sources + other.sources)
        cat._check_codes()
        return cat._with_digest()

    def select(self, *, priorities: Iterable[int] | None = None, generic: bool | None = None,
               ids: Iterable[str] | None = None) -> Catalog:
        """A sub-catalog (e.g. only the seed's priority 1–3 patterns: ``generic=False``)."""
        keep = list(self.patterns)
        if priorities is not None:
            wanted = set(priorities)
            keep = [p for p in keep if p.priority in wanted]
        if generic is not None:
            keep = [p for p in keep if p.generic == generic]
        if ids is not None:
            wanted_ids = set(ids)
            keep = [p for p in keep if p.id in wanted_ids]
        return Catalog(_reindex(keep), self.suppressions, self.sources)._with_digest()

    # -- views ---------------------------------------------------------------------------------

    @property
    def codes(self) -> list[str]:
        return sorted({p.code for p in self.patterns})

    def by_id(self, pattern_id: str) -> Pattern:
        for p in self.patterns:
            if p.id == pattern_id:
                return p
        raise KeyError(pattern_id)

    def _check_codes(self) -> None:
        codes = {p.code for p in self.patterns}
        for s in self.suppressions:
            for code in s.codes:
                if code not in codes:
                    raise CatalogError(f"suppression lists code {code!r} that no pattern has",
                                       file=s.source or "<catalog>", key=f"suppress '{s.id}'")

    def _with_digest(self) -> Catalog:
        from healer.detect._cache import sha256

        h = sha256()
        for p in self.patterns:
            h.update(repr((p.id, p.regex, p.code, p.priority, p.severity, p.window_s,
                           p.case_sensitive, p.generic, p.min_level, p.failure_class)).encode())
        for s in self.suppressions:
            h.update(repr((s.id, s.regex, s.codes, s.case_sensitive)).encode())
        return self._replace(digest=h.hexdigest())


# -- helpers ------------------------------------------------------------------------------------


def _read_bytes(path: str) -> bytes:
    try:
        if os.path.isdir(path):
            raise CatalogError("is a directory, not a catalog file", file=path)
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise CatalogError("catalog file not found", file=path) from None
    except OSError as exc:
        raise CatalogError(f"cannot read catalog: {exc.strerror}", file=path) from None


def _load_checked(raw: bytes, name: str) -> tuple[Any, Catalog]:
    """Parse, schema-check and build a catalog text: (its data, the catalog). Texts that
    passed every check are remembered by content (as JSON), and are not checked again: the
    schema check needs jsonschema and YAML, whose imports alone cost more than scanning 100 MB
    of log, and the regex check compiles every regex."""
    import json
    import sys

    from healer.detect import _cache
    from healer.resources import bundle_file

    try:
        with open(bundle_file("schemas", "catalog.schema.json"), "rb") as f:
            schema = f.read()
    except OSError:
        schema = b""
    # What `re` accepts may change with Python's version: it is part of the name.
    entry = _cache.key(raw, schema, b"regexes checked", repr(sys.version_info[:2]))
    cached = _cache.get("catalog", entry) if schema else None
    if cached is not None:
        try:
            data = json.loads(cached)
        except ValueError:
            pass
        else:
            return data, Catalog.from_data(data, source=name, check_schema=False,
                                           check_regexes=False)
    data = _parse(raw, name)
    if not isinstance(data, Mapping):
        raise CatalogError("expected a mapping with `patterns` (and `suppress`)", file=name)
    _check_schema(data, name)
    catalog = Catalog.from_data(data, source=name, check_schema=False)
    if schema:
        _cache.put("catalog", entry, json.dumps(data).encode())
    return data, catalog


def _parse(raw: bytes, name: str) -> Any:
    import yaml

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CatalogError("catalog is not UTF-8 text", file=name) from None
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise CatalogError(f"not valid YAML{where}: {getattr(exc, 'problem', None) or exc}",
                           file=name) from None
    return {} if data is None else data


_EMBEDDED_CACHE: dict[str, Catalog] = {}


def _embedded() -> Catalog:
    cached = _EMBEDDED_CACHE.get("cat")
    if cached is None:
        _, cached = _load_checked(_read_bytes(EMBEDDED), EMBEDDED)
        _EMBEDDED_CACHE["cat"] = cached
    return cached


def _check_schema(data: Mapping[str, Any], source: str) -> None:
    from healer.core.schemas import errors as schema_errors

    problems = schema_errors("catalog", dict(data))
    if not problems:
        return
    key, message = problems[0]
    pattern_id = ""
    m = re.match(r"(patterns|suppress)\[(\d+)\]", key)
    if m:
        entries = data.get(m.group(1)) or []
        entry = entries[int(m.group(2))] if int(m.group(2)) < len(entries) else None
        if isinstance(entry, Mapping) and isinstance(entry.get("id"), str):
            pattern_id = entry["id"]
    raise CatalogError(message, file=source, pattern_id=pattern_id, key=key)


def _compile_check(regex: str, flags: int, *, source: str, pid: str, key: str) -> None:
    try:
        rx = re.compile(regex.encode("utf-8"), flags)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise CatalogError(f"regex {regex!r} does not compile: {exc.msg}{where}", file=source,
                           pattern_id=pid, key=key) from None
    if rx.search(b"") is not None:
        raise CatalogError(f"regex {regex!r} matches an empty line, so it would match every "
                           "line", file=source, pattern_id=pid, key=key)


def _pattern(raw: Mapping[str, Any], i: int, source: str, check: bool = True) -> Pattern:
    key = f"patterns[{i}]"
    p = Pattern(
        id=raw["id"], regex=raw["regex"], code=raw["code"], priority=int(raw["priority"]),
        severity=raw["severity"], meaning=raw.get("meaning", ""), action=raw.get("action", ""),
        window_s=float(raw["window_s"]) if raw.get("window_s") is not None else None,
        case_sensitive=bool(raw.get("case_sensitive", False)),
        generic=bool(raw.get("generic", False)), source=source, index=i,
        min_level=str(raw.get("min_level", "warn")), failure_class=str(raw.get("class", "")),
    )
    if check:
        _compile_check(p.regex, p.flags, source=source, pid=p.id, key=key)
    return p


def _suppression(raw: Mapping[str, Any], i: int, source: str, check: bool = True
                 ) -> Suppression:
    s = Suppression(
        id=raw["id"], regex=raw["regex"], reason=raw.get("reason", ""),
        codes=tuple(raw.get("codes", ())), case_sensitive=bool(raw.get("case_sensitive", False)),
        source=source,
    )
    if check:
        flags = 0 if s.case_sensitive else re.IGNORECASE
        _compile_check(s.regex, flags, source=source, pid=s.id, key=f"suppress[{i}]")
    return s


def _check_unique(ids: list[str], source: str, where: str) -> None:
    seen: set[str] = set()
    for i, pid in enumerate(ids):
        if pid in seen:
            raise CatalogError("duplicate id", file=source, pattern_id=pid, key=f"{where}[{i}]")
        seen.add(pid)


def _reindex(patterns: Iterable[Pattern]) -> tuple[Pattern, ...]:
    return tuple(p._replace(index=i) for i, p in enumerate(patterns))
