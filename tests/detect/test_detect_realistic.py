"""Detection quality on a realistic merged agent log (``realistic_corpus.py``): every real
failure found with its code, almost no benign line alerted."""

from __future__ import annotations

from pathlib import Path

from realistic_corpus import generate, score, write

from healer.detect.catalog import Catalog
from healer.detect.engine import Engine


def test_every_failure_found_and_benign_lines_left_alone(engine: Engine, tmp_path: Path) -> None:
    corpus = generate(20_000)
    path = tmp_path / "merged.log"
    write(path, corpus)
    s = score(corpus, [(a.line_no, a.code) for a in engine.scan_file(path, workers=1)])
    benign = s.pop("benign")
    assert {c for c, m in s.items() if m["recall"] < 1.0} == set(), s
    assert benign["rate"] <= 0.0005, benign
    assert {c for c, m in s.items() if m["precision"] < 1.0} == set(), s


def test_the_corpus_holds_every_catalog_code() -> None:
    codes = {c for _, want in generate(2_000) for c in want}
    assert codes == {p.code for p in Catalog.load().patterns}
