"""Property-based run of schemathesis over /openapi.json: no input makes the server fail."""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env

pytestmark = pytest.mark.e2e


def test_no_server_errors(tmp_path: Path) -> None:
    """Whatever schemathesis generates for each operation — valid or not — never gets a 5xx."""
    env = healer_env(tmp_path / "state", tmp_path / "results", tmp_path / "fleet",
                     HEALER_EXECUTOR="playbook", HEALER__PLAY__REEVALUATE_AFTER_S="0",
                     HEALER__PLAY__MAX_ITERATIONS="1")
    server = ServeProcess(env)
    failures: list[str] = []
    try:
        schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
        operations = [r.ok() for r in schema.get_all_operations()]
        assert len(operations) >= 8
        for op in operations:

            @given(case=op.as_strategy())
            @settings(max_examples=25, deadline=None, database=None,
                      phases=[Phase.explicit, Phase.generate],
                      suppress_health_check=list(HealthCheck))
            def call(case) -> None:  # type: ignore[no-untyped-def]
                try:
                    response = case.call(base_url=server.url, timeout=10)
                except Exception as exc:  # a hang or a dropped connection is a failure too
                    failures.append(f"{case.method} {case.formatted_path}: {exc!r}"[:300])
                    return
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.formatted_path}: "
                                    f"{response.status_code} {response.text[:200]}")

            call()
    finally:
        server.close()
    assert failures == []
