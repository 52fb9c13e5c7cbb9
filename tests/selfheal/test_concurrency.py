"""Many processes reporting at once: one attempt per fingerprint, the cap holds."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from selfheal_helpers import SEED_REPORT, child_env

pytestmark = pytest.mark.e2e

# One reporting process: its own service over the shared state dir; fires at a common start
# time so the processes really race. Accepted runs are not launched (only the gate is tested).
REPORTER = textwrap.dedent('''
    import json, sys, time
    from healer.config import load_settings
    from healer.core.store import FileStore
    from healer.selfheal.service import SelfHealService

    overrides, report, count, distinct, start = json.loads(sys.argv[1])
    settings = load_settings(env={}, overrides=overrides)
    service = SelfHealService(settings, FileStore(settings.state_path),
                              launcher=lambda _id: None, env={})
    while time.time() < start:
        time.sleep(0.001)
    out = []
    for i in range(count):
        r = dict(report)
        if distinct:
            r["call_site"] = f"src/app/{distinct}_{i}.py:handler"
        out.append(service.report(r))
    print(json.dumps(out))
''')


def race(tmp_path: Path, settings: Any, *, procs: int, each: int, distinct: bool
         ) -> list[dict[str, Any]]:
    script = tmp_path / "reporter.py"
    script.write_text(REPORTER)
    overrides = {"state_dir": str(settings.state_path),
                 "selfheal": {"repo": settings.selfheal.repo},
                 "executor": {"default": "command",
                              "commands": dict(settings.executor.commands)}}
    start = time.time() + 3.0  # all interpreters are up and waiting by then
    children = [subprocess.Popen(
        [sys.executable, str(script),
         json.dumps([overrides, SEED_REPORT, each, f"p{n}" if distinct else "", start])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
        cwd=tmp_path) for n in range(procs)]
    results: list[dict[str, Any]] = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        results.extend(json.loads(out))
    return results


class TestRaces:
    def test_200_identical_reports_start_one_attempt(self, tmp_path: Path,
                                                     make_settings: Any) -> None:
        """8 processes × 25 identical reports: exactly one attempt, everyone else joins it."""
        settings = make_settings("fix")
        results = race(tmp_path, settings, procs=8, each=25, distinct=False)
        assert len(results) == 200
        reasons = Counter("accepted" if r["accepted"] else r["reason"] for r in results)
        assert reasons == {"accepted": 1, "already_investigating": 199}
        assert len({r["attempt_id"] for r in results}) == 1
        assert len({r["fingerprint"] for r in results}) == 1
        from healer.core.store import FileStore
        from healer.selfheal.attempts import ATTEMPTS

        assert len(FileStore(settings.state_path).keys(ATTEMPTS)) == 1
        from healer.core.incidents import Ledger

        inc = Ledger(FileStore(settings.state_path)).find("code", results[0]["fingerprint"])
        assert inc is not None and inc["count"] == 200 and inc["attempts"] == 1
        assert inc["rejections"] == {"already_investigating": 199}

    def test_cap_holds_across_processes(self, tmp_path: Path, make_settings: Any) -> None:
        """8 processes × 25 different errors: exactly max_concurrent (2) attempts start."""
        settings = make_settings("fix")
        results = race(tmp_path, settings, procs=8, each=25, distinct=True)
        reasons = Counter("accepted" if r["accepted"] else r["reason"] for r in results)
        assert reasons == {"accepted": 2, "concurrency_cap": 198}
