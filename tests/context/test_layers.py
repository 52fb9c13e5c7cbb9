"""The four layers: loaded from a folder, matched to a failing file, bad files named clearly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.context.impact import build_graph
from healer.context.layers import LayerError, Layers, append_memory


class TestLoading:
    def test_the_shop_layers_load(self, context_dir: Path) -> None:
        """Scenarios, invariants, impact map and incident memory all come in typed."""
        layers = Layers.load(context_dir)
        assert [s.id for s in layers.scenarios] == ["S001"]
        assert [i.id for i in layers.invariants] == ["INV-001", "INV-002", "INV-003"]
        assert layers.invariants[0].check.kind == "forbid"
        assert layers.invariants[1].check.kind == "command"
        assert layers.incidents[0].timestamp == "2024-03-01T09:00:00Z"  # stays a string
        assert "app/payment.py" in layers.impact
        assert len(layers.files_read) == 4

    def test_a_missing_folder_is_empty_layers(self, tmp_path: Path) -> None:
        """No context folder yet: nothing is known, nothing fails."""
        layers = Layers.load(tmp_path / "nope")
        assert layers.scenarios == [] and layers.impact == {} and layers.files_read == []

    def test_the_mapping_forms_load_too(self, tmp_path: Path) -> None:
        """``invariants:`` and ``incidents:`` mappings are accepted as well as lists."""
        (tmp_path / "invariants.yaml").write_text(yaml.safe_dump({"invariants": [
            {"id": "INV-001", "rule": "r", "severity": "warning"}]}))
        (tmp_path / "incident-memory.yaml").write_text(yaml.safe_dump({"incidents": [
            {"id": "INC-1", "error": "boom"}]}))
        layers = Layers.load(tmp_path)
        assert layers.invariants[0].id == "INV-001" and layers.incidents[0].id == "INC-1"


class TestMatching:
    def test_for_file_finds_what_applies(self, context_dir: Path) -> None:
        """The payment file gets its scenario, the invariants about app/*.py and its own, its
        importers as blast radius, and its past incident."""
        fc = Layers.load(context_dir).for_file("app/payment.py")
        assert [s.id for s in fc.scenarios] == ["S001"]
        assert [i.id for i in fc.invariants] == ["INV-001", "INV-002", "INV-003"]
        assert set(fc.affected) == {"app/api.py", "app/jobs.py", "tests/test_payment.py"}
        assert fc.blast_radius == 4
        assert [p.id for p in fc.incidents] == ["INC-001"]

    def test_another_file_gets_only_the_glob_invariant(self, context_dir: Path) -> None:
        """app/util.py has no scenario and no incident; only INV-001 (app/*.py) covers it."""
        fc = Layers.load(context_dir).for_file("app/util.py")
        assert fc.scenarios == () and fc.incidents == ()
        assert [i.id for i in fc.invariants] == ["INV-001"]

    def test_no_substring_matches(self, context_dir: Path) -> None:
        """old_app/payment.py and app/payment.py.orig are not app/payment.py."""
        layers = Layers.load(context_dir)
        assert layers.for_file("old_app/payment.py").scenarios == ()
        assert layers.for_file("app/payment.py.orig").scenarios == ()

    def test_blast_radius_of_a_change(self, context_dir: Path) -> None:
        """Changed files plus their importers, counted once."""
        layers = Layers.load(context_dir)
        assert layers.blast_radius(["app/payment.py", "app/api.py"]) == [
            "app/api.py", "app/jobs.py", "app/payment.py", "tests/test_payment.py"]


class TestBadFiles:
    @pytest.mark.parametrize(("name", "text", "needles"), [
        ("invariants.yaml", "- id: INV-001\n  rule: r\n  severity: fatal\n",
         ["invariants.yaml", "severity", "critical, warning"]),
        ("invariants.yaml", "- id: INV-1\n  rule: r\n  severity: critical\n",
         ["invariants.yaml", "id", "INV-"]),
        ("invariants.yaml", "- id: INV-001\n  rule: r\n  severity: critical\n  chek: x\n",
         ["unknown key", "chek"]),
        ("invariants.yaml", "- id: INV-001\n  rule: r\n  severity: critical\n"
                            "  check: {forbid: '('}\n", ["regular expression", "forbid"]),
        ("impact-map.yaml", "modules:\n  a.py: {change_risk: extreme}\n",
         ["impact-map.yaml", "change_risk"]),
        ("incident-memory.yaml", "- id: INC-1\n", ["incident-memory.yaml", "error"]),
        ("incident-memory.yaml", "- id: INC-1\n  error: x\n  anti_pattern_match: '[a'\n",
         ["anti_pattern_match", "regular expression"]),
        ("invariants.yaml", "- id: INV-001\n  rule: [unclosed\n",
         ["not valid YAML (line ", "column"]),
        ("scenarios/a.scenarios.yaml", "module: m\nfile: a.py\nscenarios:\n  - id: S001\n"
                                       "    name: n\n", ["a.scenarios.yaml", "test_command"]),
    ])
    def test_bad_file_names_file_key_and_expectation(self, tmp_path: Path, name: str,
                                                     text: str, needles: list[str]) -> None:
        """A bad layer file raises LayerError saying which file, which key, what is wrong."""
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
        with pytest.raises(LayerError) as err:
            Layers.load(tmp_path)
        for needle in needles:
            assert needle in str(err.value), str(err.value)

    def test_duplicate_scenario_ids_across_files(self, tmp_path: Path) -> None:
        """S001 in two scenario files is an error naming the other file."""
        (tmp_path / "scenarios").mkdir()
        for name in ("a", "b"):
            (tmp_path / "scenarios" / f"{name}.scenarios.yaml").write_text(yaml.safe_dump(
                {"module": name, "file": f"{name}.py", "scenarios": [
                    {"id": "S001", "name": "n", "test_command": "true"}]}))
        with pytest.raises(LayerError, match=r"S001 is also used in a\.scenarios\.yaml"):
            Layers.load(tmp_path)

    def test_cli_validate_reports_a_bad_file_with_exit_2(self, cli: Any, tmp_path: Path
                                                         ) -> None:
        """`healer context validate` prints one clear line and exits 2, no traceback."""
        folder = tmp_path / "ctx"
        folder.mkdir()
        (folder / "invariants.yaml").write_text("- id: INV-001\n  rule: r\n  severity: x\n")
        res = cli("context", "validate", "--set", f"context.dir={folder}")
        assert res.code == 2, res.err
        assert "invariants.yaml" in res.err and "Traceback" not in res.err


class TestMemory:
    def test_append_keeps_comments_and_validates(self, context_dir: Path) -> None:
        """healer's entry is appended below the people's comments and entries."""
        append_memory(context_dir, {"id": "INC-x1", "error": "boom", "success": True,
                                    "healing_iterations": 2})
        text = (context_dir / "incident-memory.yaml").read_text()
        assert text.startswith("# the shop's incident memory")
        assert [i.id for i in Layers.load(context_dir).incidents] == ["INC-001", "INC-x1"]

    def test_append_creates_the_file(self, tmp_path: Path) -> None:
        """The first entry creates incident-memory.yaml with a header."""
        append_memory(tmp_path, {"id": "INC-1", "error": "boom"})
        assert Layers.load(tmp_path).incidents[0].error == "boom"

    def test_an_invalid_entry_or_broken_file_is_refused(self, context_dir: Path) -> None:
        """A bad entry is refused; a broken memory file is left alone, not overwritten."""
        with pytest.raises(LayerError):
            append_memory(context_dir, {"id": "bad id", "error": "x"})
        (context_dir / "incident-memory.yaml").write_text("- id: [broken\n")
        with pytest.raises(LayerError):
            append_memory(context_dir, {"id": "INC-2", "error": "x"})
        assert (context_dir / "incident-memory.yaml").read_text() == "- id: [broken\n"


class TestImpactMap:
    def test_imports_become_edges(self, project: Path) -> None:
        """`from app.payment import average` and `from app import payment` both point at
        app/payment.py; relative imports resolve; risk follows the importer count."""
        (project / "app" / "rel.py").write_text("from .payment import average\n"
                                                "from . import util\n")
        (project / "app" / "broken.py").write_text("def (:\n")
        graph = build_graph(project)
        doc = graph.impact_map()["modules"]
        assert set(doc["app/payment.py"]["depended_by"]) == {
            "app/api.py", "app/jobs.py", "app/rel.py", "tests/test_payment.py"}
        assert doc["app/rel.py"]["depends_on"] == ["app/payment.py", "app/util.py"]
        assert doc["app/payment.py"]["change_risk"] == "medium"
        assert doc["app/payment.py"]["blast_radius"] == 5
        assert graph.skipped == ["app/broken.py"]

    def test_cli_init_writes_map_and_skeletons_that_load(self, cli: Any, project: Path,
                                                         tmp_path: Path) -> None:
        """`healer context init` maps the repo, writes fill-in skeletons, keeps them on a
        second run, and everything it wrote validates."""
        folder = tmp_path / "newctx"
        args = ("context", "init", "--repo", str(project), "--set", f"context.dir={folder}",
                "--json")
        first = cli(*args)
        assert first.code == 0, first.err
        report = json.loads(first.out)
        assert report["modules"] == 7
        assert (folder / "scenarios" / "app-payment.scenarios.yaml").is_file()
        scen = yaml.safe_load((folder / "scenarios" / "app-payment.scenarios.yaml").read_text())
        assert scen == {"module": "app", "file": "app/payment.py", "scenarios": []}
        second = json.loads(cli(*args).out)
        assert str(folder / "invariants.yaml") in second["kept"]
        assert cli("context", "validate", "--set", f"context.dir={folder}").code == 0
