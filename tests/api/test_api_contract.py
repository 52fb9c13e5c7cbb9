"""schemathesis against a real `healer serve`: every answer matches /openapi.json, none is a 5xx.

The CLI runs its coverage phase (boundary values, unsupported methods — 405 must carry
``Allow`` — missing bodies, wrong types) and then generated cases for each operation, with
every check it has: 50 in ``make test``, 300 in ``make test-all`` (a few minutes). A fixed
seed keeps a CI failure reproducible with the printed command. One worker: with several,
CPython 3.11 can fail inside schemathesis' own code generation ("AST constructor recursion
depth mismatch"), which says nothing about healer.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from healer.testing.api import ServeProcess
from healer.testing.loop import healer_env

# A few minutes on a busy 2-core machine: more than the suite-wide 300 s timeout.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1200)]

SEED = "20261201"
# 413 (too large), 415 (not JSON) and 421 are the guard's honest answers to invalid input;
# schemathesis' default list for rejected data predates them.
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "421", "422"]

# A schema-valid tools_server whose host is outside play.tools_server_hosts is refused by
# policy, not by shape: 400 naming the setting (healer never dials it).
[[operations]]
include-path = "/api/v1/session/start"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "400", "401", "403", "404",
                                                     "409", "429", "5xx"]
"""


def _schemathesis() -> str:
    found = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("schemathesis is part of the test extra: pip install -e '.[test]'")
    return found


@pytest.mark.parametrize("examples", [50, pytest.param(300, marks=pytest.mark.exhaustive)])
def test_api_matches_its_openapi_contract(tmp_path: Path, examples: int) -> None:
    """All operations, the coverage phase and ``examples`` generated cases each: zero
    failures."""
    env = healer_env(tmp_path / "state", tmp_path / "results", tmp_path / "fleet",
                     HEALER_EXECUTOR="playbook", HEALER__PLAY__REEVALUATE_AFTER_S="0",
                     HEALER__PLAY__MAX_ITERATIONS="1",
                     # Generated tools-server URLs must not make healer resolve or dial them.
                     HEALER__PLAY__TOOLS_SERVER_HOSTS="127.0.0.1")
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    server = ServeProcess(env)
    try:
        proc = subprocess.run(
            [_schemathesis(), "--config-file", str(config), "--no-color", "run",
             f"{server.url}/openapi.json", "--checks", "all", "--phases", "coverage,fuzzing",
             "--max-examples", str(examples), "--seed", SEED,
             "--request-timeout", "60"],
            capture_output=True, text=True, timeout=1100, cwd=tmp_path,
            env={**os.environ, "SCHEMATHESIS_HOOKS": ""})
        alive = server.http.get("/health")
    finally:
        server.close()
    report = proc.stdout[-12000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, report
    tested = re.search(r"Tested: (\d+)", proc.stdout)
    assert tested and int(tested.group(1)) >= 16, report
    assert alive.status_code == 200
