"""The LogQL rule runner against a Loki on 127.0.0.1 speaking the real wire format."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.context.layers import LayerError
from healer.context.loki import Rule, evaluate, load_rules, signal_for
from healer.testing.fake_loki import FakeLoki
from healer.testing.loop import LoopProcess

pytestmark = [pytest.mark.e2e]

RULE = {"name": "shop-errors", "query": '{app="shop"} |= "ERROR"', "threshold_per_min": 5,
        "window_s": 60, "severity": "high", "environment": "prod"}
LINE = ('ERROR ZeroDivisionError: division by zero File "/srv/app/app/payment.py", line 6, '
        "in average")


@pytest.fixture
def loki() -> Iterator[FakeLoki]:
    with FakeLoki() as fake:
        yield fake


def push(loki: FakeLoki, n: int, line: str = LINE, *, app: str = "shop", ago_s: float = 1.0
         ) -> None:
    now = time.time_ns()
    for i in range(n):
        loki.push({"app": app, "pod": "web-1"}, now - int(ago_s * 1e9) + i, line)


def write_rules(context_dir: Path, *rules: dict[str, Any]) -> None:
    (context_dir / "loki-rules.yaml").write_text(yaml.safe_dump({"rules": list(rules)}))


class TestEvaluation:
    def test_rate_over_the_window(self, loki: FakeLoki) -> None:
        """Matching lines in the window are counted through query_range (paged past Loki's
        5000 cap); other apps, other text and older lines are not."""
        push(loki, 6)
        push(loki, 50, "INFO all good")
        push(loki, 50, app="other")
        push(loki, 50, ago_s=600)
        ev = evaluate(loki.url, Rule(**RULE), now=time.time())
        assert ev.count == 6 and ev.rate_per_min == 6 and ev.firing
        assert all("query" in r and "start" in r for r in loki.requests)
        push(loki, 5200)
        assert evaluate(loki.url, Rule(**RULE), now=time.time()).count == 5206

    def test_at_the_threshold_it_does_not_fire(self, loki: FakeLoki) -> None:
        """5 lines a minute is not above 5 a minute."""
        push(loki, 5)
        assert not evaluate(loki.url, Rule(**RULE), now=time.time()).firing

    def test_signal_carries_the_latest_line_and_its_file(self, loki: FakeLoki,
                                                         project: Path) -> None:
        """The incident's error is the latest line; its file and line come from the text."""
        push(loki, 8)
        sig = signal_for(evaluate(loki.url, Rule(**RULE), now=time.time()), project)
        assert sig.key == "loki-shop-errors" and sig.status == "firing"
        e = sig.error
        assert (e.file, e.line, e.source, e.environment) == ("app/payment.py", 6, "loki", "prod")
        assert e.error_type == "ZeroDivisionError"
        assert "8 matching lines in 60 s" in e.stack_trace

    def test_bad_rules_file(self, tmp_path: Path) -> None:
        """A rule without a query, or a duplicate name, is a clear LayerError."""
        write_rules(tmp_path, {"name": "x"})
        with pytest.raises(LayerError, match="query"):
            load_rules(tmp_path / "loki-rules.yaml")
        write_rules(tmp_path, RULE, RULE)
        with pytest.raises(LayerError, match="used twice"):
            load_rules(tmp_path / "loki-rules.yaml")


class TestRunner:
    async def test_fires_then_resolves_what_it_opened(self, loki: FakeLoki, service_for: Any,
                                                      context_dir: Path) -> None:
        """Above the threshold the rule opens loki-<name>; once the window is quiet it
        resolves it; a rule that never fired writes nothing."""
        write_rules(context_dir, RULE, {**RULE, "name": "quiet", "query": '{app="none"}'})
        clock = [time.time()]
        svc = service_for(f"context.loki_url={loki.url}", "executor.default=playbook",
                          clock=lambda: clock[0])
        push(loki, 10)
        results = await svc.run_loki_rules()
        assert [r["firing"] for r in results] == [True, False]
        assert results[0]["incident"]["action"] == "opened"
        assert svc.book.get("loki-shop-errors")["status"] == "open"
        assert svc.book.get("loki-quiet") is None
        again = await svc.run_loki_rules()
        assert again[0]["incident"]["action"] == "duplicate"
        clock[0] += 120  # the lines are now older than the window
        later = await svc.run_loki_rules()
        assert later[0]["incident"]["action"] == "resolved"
        assert svc.book.get("loki-shop-errors")["status"] == "resolved"

    def test_the_loop_runs_the_rules(self, loki: FakeLoki, dirs: Any, project: Path,
                                     context_dir: Path) -> None:
        """`healer loop --once` with context.loki_url set evaluates the rules file."""
        write_rules(context_dir, RULE)
        push(loki, 10)
        env = {**dirs.env, "HEALER__CONTEXT__LOKI_URL": loki.url,
               "HEALER__CONTEXT__DIR": str(context_dir), "HEALER__SELFHEAL__REPO": str(project),
               "HEALER__EXECUTOR__DEFAULT": "playbook"}
        loop = LoopProcess(env, "--once").start()
        assert loop.proc is not None and loop.proc.wait(60) == 0, loop.log()
        from healer.core.incidents import Ledger
        from healer.core.store import FileStore

        found = Ledger(FileStore(dirs.state)).find("code", "loki-shop-errors")
        assert found is not None and found["source"] == "loki", loop.log()
