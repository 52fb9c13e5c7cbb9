"""A real `healer serve` process on a free loopback port."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from healer.testing.api import ServeProcess


@pytest.fixture
def serve(dirs) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    servers: list[ServeProcess] = []

    def _start(**env: str) -> ServeProcess:
        # The tests' play actions note their calls in the test's folder: one their sandbox
        # may write to (healer's own dirs in it stay hidden).
        full = {**dirs.env, "HEALER_EXECUTOR": "playbook",
                "HEALER__PLAY__REEVALUATE_AFTER_S": "0.05",
                "HEALER__AGENTS__SANDBOX_WRITE_PATHS": json.dumps([str(dirs.root)]), **env}
        s = ServeProcess(full)
        servers.append(s)
        return s

    yield _start
    for s in servers:
        s.close()
