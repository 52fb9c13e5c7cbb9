"""Fixtures for the detection tests: the corpus, both engines, a private cache, fake Loki."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from healer.detect.catalog import Catalog
from healer.detect.engine import Engine

sys.path.insert(0, str(Path(__file__).parent))  # detect_helpers, detect_fake_loki

from detect_helpers import CORPUS

from healer.testing.fake_loki import FakeLoki


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Compiled databases and checked catalogs are cached under the test's tmp dir."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("HEALER_CACHE_DIR", str(cache))
    return cache


@dataclass
class Corpus:
    path: Path
    expected: dict[int, set[str]]

    @property
    def data(self) -> bytes:
        return self.path.read_bytes()


@pytest.fixture(scope="session")
def corpus() -> Corpus:
    expected: dict[int, set[str]] = {}
    for row in (CORPUS / "expected.tsv").read_text().splitlines():
        if row and not row.startswith("#"):
            n, codes = row.split("\t")
            expected[int(n)] = set(codes.split(","))
    return Corpus(CORPUS / "agent.log", expected)


@pytest.fixture(params=["re", "hyperscan"])
def engine(request: pytest.FixtureRequest) -> Engine:
    return Engine(Catalog.load(), engine=request.param)


@pytest.fixture
def fake_loki() -> Iterator[FakeLoki]:
    with FakeLoki() as loki:
        yield loki
