"""The detection catalog: the embedded one, user catalogs, and clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from healer.core.schemas import errors as schema_errors
from healer.detect.catalog import EMBEDDED, Catalog, CatalogError

# The play healer seed's patterns (priority 1 pre-flight, 2 runtime, 3 lifecycle).
SEED = {
    "Tool inventory MISMATCH": ("A10", 1), "tool inventory mismatch": ("A10", 1),
    "declared tools.*missing": ("A10", 1), "cto-config.*(missing|invalid)": ("A11", 1),
    "mcp.*failed to initialize": ("A12", 1), "tools-server.*unreachable": ("A12", 1),
    "panicked at|fatal error": ("R1", 2), "timeout": ("R2", 2), "connection refused": ("R2", 2),
    "max retries exceeded": ("R3", 2), "permission denied.*filesystem": ("R4", 2),
    "unauthorized|invalid token": ("R5", 2), "template not found": ("L1", 3),
    "prompt.*missing": ("L2", 3), "role.*undefined": ("L3", 3),
    "task context.*empty": ("L4", 3),
}


def write(tmp_path: Path, data: object, name: str = "mine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


PATTERN = {"id": "oom-killed", "regex": "OOMKilled", "code": "X1", "priority": 2,
           "severity": "critical", "meaning": "The pod ran out of memory.", "action": "Raise it."}


class TestEmbeddedCatalog:
    def test_valid_against_schema(self) -> None:
        """The embedded catalog is valid against schemas/catalog.schema.json."""
        data = yaml.safe_load(Path(EMBEDDED).read_text(encoding="utf-8"))
        assert schema_errors("catalog", data) == []

    def test_holds_every_seed_pattern(self) -> None:
        """Every pattern of the play-healer seed is there, with its code and priority."""
        cat = Catalog.load()
        found = {p.regex: (p.code, p.priority) for p in cat.patterns
                 if not p.generic and not p.failure_class}  # runtime failures: test_failure_classes
        assert found == SEED

    def test_seed_severities(self) -> None:
        """Panics, filesystem and auth are critical; timeouts and retries are high."""
        cat = Catalog.load()
        sev = {p.id: p.severity for p in cat.patterns}
        assert sev["panic-or-fatal"] == sev["filesystem-permission-denied"] == "critical"
        assert sev["auth-broken"] == "critical"
        assert sev["timeout"] == sev["connection-refused"] == sev["max-retries-exceeded"] == "high"

    def test_level_patterns_are_generic(self) -> None:
        """The log-level patterns of REFERENCE.md are there and marked generic."""
        cat = Catalog.load()
        generic = [p.regex for p in cat.patterns if p.generic]
        for needle in ("level=(error", '"(level', r"\[(error", "E\\d{4}", r"error\[E\d{4}\]",
                       "Traceback", "exception:"):
            assert any(needle in rx for rx in generic), needle

    def test_every_pattern_documented(self) -> None:
        """Every pattern says what it means and what to do."""
        for p in Catalog.load().patterns:
            assert p.meaning and p.action, p.id

    def test_preflight_patterns_are_priority_one(self) -> None:
        """A10–A12 are pre-flight (priority 1), so they count only in the start window."""
        for p in Catalog.load().patterns:
            assert (p.priority == 1) == (p.code in ("A10", "A11", "A12")), p.id


class TestUserCatalog:
    def test_extend_adds_patterns(self, tmp_path: Path) -> None:
        """In extend mode a user catalog's patterns come after the embedded ones."""
        cat = Catalog.load(write(tmp_path, {"patterns": [PATTERN]}), "extend")
        assert cat.patterns[-1].id == "oom-killed"
        assert len(cat.patterns) == len(Catalog.load().patterns) + 1
        assert [p.index for p in cat.patterns] == list(range(len(cat.patterns)))

    def test_extend_replaces_same_id(self, tmp_path: Path) -> None:
        """A user pattern with an embedded id replaces it in place."""
        mine = dict(PATTERN, id="timeout", regex="timed out", code="R2")
        cat = Catalog.load(write(tmp_path, {"patterns": [mine]}))
        assert cat.by_id("timeout").regex == "timed out"
        assert len(cat.patterns) == len(Catalog.load().patterns)

    def test_disable_drops_embedded(self, tmp_path: Path) -> None:
        """`disable` removes embedded patterns and suppressions by id."""
        cat = Catalog.load(write(tmp_path, {"disable": ["timeout", "will-retry"]}))
        assert "timeout" not in {p.id for p in cat.patterns}
        assert "will-retry" not in {s.id for s in cat.suppressions}

    def test_replace_uses_only_user_patterns(self, tmp_path: Path) -> None:
        """In replace mode only the user's patterns and suppressions are used."""
        sup = {"id": "ignore-probe", "regex": "probe", "codes": ["X1"]}
        cat = Catalog.load(write(tmp_path, {"patterns": [PATTERN], "suppress": [sup]}),
                           "replace")
        assert [p.id for p in cat.patterns] == ["oom-killed"]
        assert [s.id for s in cat.suppressions] == ["ignore-probe"]

    def test_select_subset(self) -> None:
        """select(generic=False) leaves the seed's sixteen (and the runtime failures)."""
        kept = Catalog.load().select(generic=False).patterns
        assert len([p for p in kept if not p.failure_class]) == 16

    def test_digest_follows_content(self, tmp_path: Path) -> None:
        """The digest changes when a regex changes and not otherwise."""
        a = Catalog.load(write(tmp_path, {"patterns": [PATTERN]}, "a.yaml"))
        b = Catalog.load(write(tmp_path, {"patterns": [PATTERN]}, "b.yaml"))
        c = Catalog.load(write(tmp_path, {"patterns": [dict(PATTERN, regex="OOM")]}, "c.yaml"))
        assert a.digest == b.digest != c.digest

    def test_checked_catalog_is_remembered(self, tmp_path: Path, _private_cache: Path) -> None:
        """A catalog that passed the schema check is cached by content and loads the same."""
        path = write(tmp_path, {"patterns": [PATTERN]})
        first = Catalog.load(path)
        assert list((_private_cache / "detect").glob("catalog-*"))
        assert Catalog.load(path) == first

    def test_a_catalog_whose_regex_fails_is_never_remembered(self, tmp_path: Path,
                                                               _private_cache: Path) -> None:
        """A remembered catalog's regexes are not compiled again to check them, so one that
        passed the schema but not the regex check is not remembered: it fails every time."""
        path = write(tmp_path, {"patterns": [dict(PATTERN, regex="(unclosed")]})
        for _ in range(2):
            with pytest.raises(CatalogError, match="does not compile"):
                Catalog.load(path, "replace")
        assert not list((_private_cache / "detect").glob("catalog-*"))


class TestCatalogErrors:
    def expect(self, tmp_path: Path, data: object, *needles: str) -> CatalogError:
        path = write(tmp_path, data)
        with pytest.raises(CatalogError) as info:
            Catalog.load(path)
        text = str(info.value)
        assert str(path) in text
        for needle in needles:
            assert needle in text, text
        assert info.value.exit_code == 2
        return info.value

    def test_regex_that_does_not_compile(self, tmp_path: Path) -> None:
        """A bad regex names the file, the pattern id and the compile error."""
        err = self.expect(tmp_path, {"patterns": [dict(PATTERN, regex="oom(killed")]},
                          "pattern 'oom-killed'", "does not compile", "missing )")
        assert err.pattern_id == "oom-killed"

    def test_regex_matching_everything(self, tmp_path: Path) -> None:
        """A regex that matches an empty line is refused."""
        self.expect(tmp_path, {"patterns": [dict(PATTERN, regex="x*")]}, "matches an empty line")

    def test_missing_field(self, tmp_path: Path) -> None:
        """A pattern without a code is refused, naming the pattern."""
        bad = {k: v for k, v in PATTERN.items() if k != "code"}
        self.expect(tmp_path, {"patterns": [bad]}, "oom-killed", "'code' is a required")

    def test_bad_priority(self, tmp_path: Path) -> None:
        """Priority must be 1, 2 or 3."""
        self.expect(tmp_path, {"patterns": [dict(PATTERN, priority=7)]}, "priority")

    def test_unknown_key(self, tmp_path: Path) -> None:
        """A misspelt key is refused rather than ignored."""
        self.expect(tmp_path, {"patterns": [dict(PATTERN, severty="high")]}, "severty")

    def test_duplicate_id(self, tmp_path: Path) -> None:
        """Two patterns with one id in a file are refused."""
        self.expect(tmp_path, {"patterns": [PATTERN, PATTERN]}, "duplicate id")

    def test_suppression_for_unknown_code(self, tmp_path: Path) -> None:
        """A suppression limited to a code no pattern has is refused."""
        sup = {"id": "s", "regex": "x", "codes": ["NOPE"]}
        self.expect(tmp_path, {"suppress": [sup]}, "NOPE")

    def test_disable_unknown(self, tmp_path: Path) -> None:
        """Disabling an id that does not exist is refused."""
        self.expect(tmp_path, {"disable": ["no-such-pattern"]}, "no-such-pattern")

    def test_yaml_syntax(self, tmp_path: Path) -> None:
        """Broken YAML names the line."""
        self.expect(tmp_path, "patterns: [\n  - {id: x\n", "not valid YAML", "line")

    def test_not_a_mapping(self, tmp_path: Path) -> None:
        """A top-level list is refused with a hint."""
        self.expect(tmp_path, "- just\n- a list\n", "mapping")

    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing catalog file is a clear error."""
        with pytest.raises(CatalogError, match=re.escape("catalog file not found")):
            Catalog.load(tmp_path / "nope.yaml")

    def test_replace_needs_patterns(self, tmp_path: Path) -> None:
        """Replacing the catalog with one that has no patterns is refused."""
        with pytest.raises(CatalogError, match="at least one pattern"):
            Catalog.load(write(tmp_path, {"suppress": []}), "replace")
