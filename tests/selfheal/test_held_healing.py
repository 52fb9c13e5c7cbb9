"""A rejected model API key holds the code attempts: one escalation for the cause, none per
attempt, and every attempt resumes to its PR once the key changes.

The real Claude Code CLI runs against the scripted model on 127.0.0.1, which answers 401.
Three report_error reports are being healed: the first run's 401 stops Claude runs on the node
(the runtime's one "Claude runs stopped" escalation), the other two are refused by that stop
marker without calling the model. All three attempts are ``held`` — not failed: no "healing
failed" seed file, no escalation audit event, nothing for the breaker, no cooldown, and their
incidents stay ``healing``. A duplicate report joins its held attempt. When the key changes,
the retry pass resumes each attempt through the gate under its own id, and each opens its PR
on the local forge.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from healer.agents import limits
from healer.core import gate, seeds
from healer.core.audit import Audit
from healer.core.incidents import HEALING, Ledger
from healer.core.store import FileStore
from healer.selfheal.dispatch import Dispatcher
from healer.selfheal.runner import ExecutorRunner
from healer.selfheal.service import SelfHealService

pytestmark = [pytest.mark.e2e]

# Three different bugs in three modules of the repository (three fingerprints).
MODULES = ("alpha", "beta", "gamma")


def report(name: str) -> dict[str, str]:
    return {"error_type": "KeyError", "error_message": f"'{name}_id'",
            "traceback": "Traceback (most recent call last):\n"
                         f'  File "src/app/{name}.py", line 2, in lookup\n'
                         f"KeyError: '{name}_id'\n",
            "call_site": f"src/app/{name}.py:lookup"}


def fix_script(name: str) -> list[Any]:
    """What a model does for one module: a reproduction, the edit, commit both, write the
    result, stop."""
    from test_claude import result

    from healer.testing import text, tool_use

    test = (f"import sys, pathlib\n"
            f"sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / 'src'))\n"
            f"from app.{name} import lookup\n\n\n"
            f"def test_a_row_without_{name}_id():\n    assert lookup({{}}) is None\n")
    return [tool_use("Write", {"file_path": f"${{cwd}}/tests/test_{name}_repro.py",
                               "content": test}),
            tool_use("Edit", {"file_path": f"${{cwd}}/src/app/{name}.py",
                              "old_string": f'return row["{name}_id"]',
                              "new_string": f'return row.get("{name}_id")'}),
            tool_use("Bash", {"command": f"git add src/app/{name}.py tests && git commit -q -m "
                                         f"'fix: tolerate rows without {name}_id'",
                              "description": "Commit the test and the fix"}),
            result("fixed"), text("Committed.")]


def human_seeds(settings: Any) -> list[Path]:
    return sorted((settings.fleet_path / seeds.HUMAN).glob("*.md"))


async def test_a_rejected_key_holds_the_attempts_and_they_resume_when_it_changes(
        make_settings: Callable[..., Any], repo: Path) -> None:
    from test_claude import CLAUDE_TEST_ENV

    from healer.agents.executors import claude_cli
    from healer.testing import ScriptedModel, http_error
    from healer.testing.git import git

    for name in MODULES:
        (repo / "src" / "app" / f"{name}.py").write_text(
            f'def lookup(row):\n    return row["{name}_id"]\n')
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "three modules")
    settings = make_settings(None, max_concurrent=3, breaker_window=1, cooldown_s=3600)
    if claude_cli(settings) is None:
        pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")
    script = [http_error(401, "authentication_error", "invalid x-api-key", times=1)]
    for name in MODULES:
        script += fix_script(name)
    with ScriptedModel(script) as model:
        runner = ExecutorRunner(settings, executor="claude",
                                env={**model.env(), **CLAUDE_TEST_ENV})
        store = FileStore(settings.state_path)
        svc = SelfHealService(settings, store, runner=runner, launcher=lambda _a: None, env={})
        ids = []
        for name in MODULES:
            out = svc.report(report(name))
            assert out["accepted"], out
            ids.append(out["attempt_id"])

        # The three runs meet the rejected key: the first calls the model (401), the other
        # two are refused by the stop marker it left.
        ended = [await Dispatcher(settings, store, runner=runner).run(aid) for aid in ids]
        assert [a["status"] for a in ended] == ["held"] * 3, [a.get("reason") for a in ended]
        assert all(a["hold"]["code"] == "X1" and a["hold"]["until"] is None for a in ended)
        assert not any(a.get("escalation_due") or a.get("escalation") for a in ended)
        assert len([r for r in model.requests if r.method == "POST"]) >= 1
        asked = len(model.requests)
        assert limits.read_disabled(settings)["code"] == "X1"

        # Exactly one escalation: the runtime's, for the cause.
        (only,) = human_seeds(settings)
        assert "Claude runs stopped" in only.read_text() and "(X1)" in only.read_text()
        assert [e for e in Audit(settings.state_path).read() if e["event"] == "escalated"] == []
        adm = gate.admission(store)
        assert adm["outcomes"] == [] and adm["ended"] == {}  # no breaker, no cooldown
        assert adm["active"] == {} and sorted(gate.holding(adm).values()) == sorted(ids)
        ledger = Ledger(store)
        for a in ended:
            inc = ledger.get(a["incident_id"])
            assert inc["status"] == HEALING and "model access" in inc["doing"], inc

        # What get_healing_status shows, and a duplicate joining its held attempt.
        shown = svc.status(ended[0]["fingerprint"])["attempts"][0]
        assert shown["status"] == "held" and shown["hold"]["code"] == "X1"
        again = svc.report(report(MODULES[0]))
        assert not again["accepted"] and again["reason"] == gate.ALREADY_INVESTIGATING
        assert again["attempt_id"] == ids[0]

        # Still the same key: nothing resumes, the model is not called.
        assert svc.resume_held(launch=False) == []
        assert len(model.requests) == asked

        # The key changes: the retry pass resumes each attempt through the gate.
        svc.runner = ExecutorRunner(settings, executor="claude", env={
            **model.env(), **CLAUDE_TEST_ENV, "ANTHROPIC_API_KEY": "sk-ant-scripted-rotated"})
        resumed = svc.resume_held(launch=False)
        assert sorted(resumed) == sorted(ids)
        final = [await Dispatcher(settings, store, runner=svc.runner).run(aid) for aid in ids]
    assert [a["status"] for a in final] == ["pr_open"] * 3, [a.get("reason") for a in final]
    assert [a["attempt_id"] for a in final] == ids
    prs = sorted(json.loads(p.read_text())["title"]
                 for p in (settings.state_path / "forge" / "prs").glob("*.json"))
    assert len(prs) == 3 and all("KeyError" in t for t in prs)
    assert len(human_seeds(settings)) == 1
    assert not limits.disabled_path(settings).exists()
    for a in final:
        assert "hold" not in svc.status(a["fingerprint"])["attempts"][0]
        assert ledger.get(a["incident_id"])["status"] == "fixed"
