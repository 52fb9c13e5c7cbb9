"""Backends: every store/bus behaviour test runs on the file store and on JetStream."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.core.store import FileStore, Store
from healer.testing.nats import NatsServer, jetstream_store

_bucket = itertools.count()


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    with NatsServer(jetstream=True, store_dir=tmp_path_factory.mktemp("nats")) as ns:
        yield ns


@pytest.fixture(params=["file", "jetstream"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """(name, factory) where factory() opens another handle on the same store."""
    if request.param == "file":
        root = tmp_path / "state"
        yield "file", lambda: FileStore(root)
        return
    ns: NatsServer = request.getfixturevalue("nats_server")
    bucket = f"t{next(_bucket)}-{tmp_path.name[-12:].replace('_', '-')}"
    opened: list[Store] = []

    def factory() -> Store:
        s = jetstream_store(ns.url, bucket)
        opened.append(s)
        return s

    yield "jetstream", factory
    for s in opened:
        s.close()
