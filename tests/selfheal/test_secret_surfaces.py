"""No raw secret form reaches disk or a model, whichever surface reported it.

Every corpus form goes in through the real surfaces — ``POST /api/v1/errors`` on a real
uvicorn, ``healer report`` as a subprocess, ``report_error`` on ``healer mcp`` over stdio —
and healing runs go all the way to a PR record. Then every file under the state dir (records,
run folders with the rendered prompts, worker logs, worktrees, forge records), the results
dir and the fleet dir is searched for every raw form; so is everything the scripted model
server received from the real Claude Code CLI.

Reports carry many forms each (a report has a message, a traceback and a context; forms are
dealt over the three), so every form is tested on every surface without a healing run per
form; on HTTP each form is also reported alone (being stored is what matters there).
"""

from __future__ import annotations

import asyncio
import json
import string
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from secret_corpus import FORMS, Form
from selfheal_helpers import child_env, wait_status
from test_http import serve
from test_mcp import connect

from healer.core.store import FileStore
from healer.selfheal.attempts import Attempts
from healer.selfheal.service import SelfHealService

pytestmark = pytest.mark.e2e

BATCHES = 3
# Gates that would refuse many reports at once are opened wide: storing is what is tested.
OPEN_GATES: dict[str, Any] = {"max_concurrent": 500, "breaker_window": 1000, "cooldown_s": 0}
_LOW_WORDS = ("rate limit", "too many requests", " 429", "temporarily unavailable",
              "try again later", "timed out", "timeout")


def reports(n: int = BATCHES, tag: str = "") -> list[dict[str, str]]:
    """The corpus as ``n`` reports: form ``i`` goes to batch ``i % n`` and, within it, to the
    message, the traceback or the context in turn (never a message that would make the
    report look low-severity)."""
    out = []
    for k in range(n):
        fields: dict[str, list[str]] = {"error_message": [], "traceback": [], "context": []}
        for j, f in enumerate(FORMS[k::n]):
            field = ("error_message", "traceback", "context")[j % 3]
            if field == "error_message" and any(w in f.text.lower() for w in _LOW_WORDS):
                field = "traceback"
            fields[field].append(f.text)
        # A KeyError: the bug the scripted fix reproduces, so each batch can end in a PR.
        # The batch's letters keep the fingerprints apart (digits normalise away).
        out.append({"error_type": "KeyError",
                    "error_message": f"secret corpus batch {tag}{string.ascii_lowercase[k]}\n"
                                     + "\n".join(fields["error_message"]),
                    "traceback": "\n".join(fields["traceback"]),
                    "context": "\n".join(fields["context"]),
                    "tool_name": "secret_corpus", "severity_hint": "high"})
    return out


def single(i: int, f: Form) -> dict[str, str]:
    """One form alone, in every field (message only when it keeps the severity)."""
    low = any(w in f.text.lower() for w in _LOW_WORDS)
    return {"error_type": f"corpus.SecretForm{i}Error",
            "error_message": "see traceback" if low else f.text, "traceback": f.text,
            "context": f.text, "severity_hint": "high"}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def leaks_in(text: str, where: str) -> list[str]:
    return [f"{where}: {f.id}" for f in FORMS for s in f.secrets if s in text]


def walk(*roots: Path) -> tuple[int, list[str]]:
    """(files read, leaks found) under ``roots``; JSON files are also read decoded, so a form
    kept behind JSON escapes is found too."""
    files, found = 0, []
    for root in roots:
        if not root.exists():
            continue
        for path in root.rglob("*"):
            if not path.is_file() or path.is_symlink() or "/.git/" in str(path):
                continue
            files += 1
            raw = path.read_bytes().decode("utf-8", "replace")
            found += leaks_in(raw, str(path))
            if path.suffix in (".json", ".jsonl"):
                for line in raw.splitlines() if path.suffix == ".jsonl" else [raw]:
                    try:
                        doc = json.loads(line)
                    except ValueError:
                        continue
                    found += leaks_in("\n".join(_strings(doc)), f"{path} (decoded)")
    return files, sorted(set(found))


def assert_nothing_persisted(settings_dirs: dict[str, Path], *, min_files: int) -> None:
    files, found = walk(*settings_dirs.values())
    assert files >= min_files, f"only {files} files written: the run did not get far"
    assert found == [], "\n".join(found[:40])


def project_yaml(d: Path, repo: Path, agent: list[str], **selfheal: Any) -> dict[str, Path]:
    dirs = {"state": d / "state", "results": d / "results", "fleet": d / "fleet"}
    (d / "healer.yaml").write_text(yaml.safe_dump({
        "state_dir": str(dirs["state"]), "results_dir": str(dirs["results"]),
        "fleet_dir": str(dirs["fleet"]), "cto_config": str(d / "none.json"),
        "selfheal": {"repo": str(repo), **OPEN_GATES, **selfheal},
        "executor": {"default": "command", "commands": {"healing-agent": agent}},
    }))
    return dirs


def settled(att: dict[str, Any] | None) -> bool:
    return bool(att) and att["status"] not in ("dispatch_pending", "investigating")


class TestHTTP:
    async def test_each_form_alone_is_stored_scrubbed(self, make_settings: Callable[..., Any],
                                                       tmp_path: Path) -> None:
        """Every form POSTed on its own is accepted and stored — and stored without it."""
        settings = make_settings("fix", **OPEN_GATES)
        svc = SelfHealService(settings, FileStore(settings.state_path), env={},
                              launcher=lambda _a: None)
        async with serve(svc) as c:
            for i, f in enumerate(FORMS):
                res = await c.post("/api/v1/errors", json=single(i, f))
                assert res.status_code == 202, (f.id, res.text)
                assert leaks_in(res.text, "response") == []
        assert len(list(svc.attempts.all())) == len(FORMS)
        assert_nothing_persisted({"state": tmp_path / "state"}, min_files=len(FORMS))

    async def test_batched_reports_heal_without_leaking(
            self, make_settings: Callable[..., Any], tmp_path: Path) -> None:
        """Batched reports run to PR records; state, results, fleet, worktrees and forge
        records hold no raw form."""
        settings = make_settings("fix", worker="task", **OPEN_GATES)
        settings.api.max_body_bytes = 256 * 1024
        svc = SelfHealService(settings, FileStore(settings.state_path), env={})
        async with serve(svc) as c:
            ids = []
            for body in reports(tag="Http"):
                res = await c.post("/api/v1/errors", json=body)
                assert res.status_code == 202, res.text
                ids.append(res.json()["attempt_id"])
            await svc.drain(120)
        for aid in ids:
            att = svc.attempts.require(aid)
            assert att["status"] == "pr_open", (att["status"], att.get("reason"))
        assert (tmp_path / "state" / "forge" / "prs").is_dir()
        assert any((tmp_path / "state" / "worktrees").iterdir())
        assert_nothing_persisted({d: tmp_path / d for d in ("state", "results", "fleet")},
                                 min_files=10)


    async def test_unfixable_runs_escalate_without_leaking(
            self, make_settings: Callable[..., Any], tmp_path: Path) -> None:
        """Runs that end ``unfixable`` are handed to a person (seed files in the fleet dir,
        forge issues): those hold no raw form either."""
        settings = make_settings("unfixable", worker="task", **OPEN_GATES)
        settings.api.max_body_bytes = 256 * 1024
        svc = SelfHealService(settings, FileStore(settings.state_path), env={})
        async with serve(svc) as c:
            ids = []
            for body in reports(tag="Unfixable"):
                res = await c.post("/api/v1/errors", json=body)
                assert res.status_code == 202, res.text
                ids.append(res.json()["attempt_id"])
            await svc.drain(120)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not all(
                    svc.attempts.require(a).get("escalated_at") for a in ids):
                await asyncio.sleep(0.2)  # escalations may follow the run's end
        seeds = list((tmp_path / "fleet").rglob("*.md"))
        assert not seeds or len(seeds) >= len(ids), seeds
        for aid in ids:
            assert svc.attempts.require(aid)["status"] == "unfixable"
        assert_nothing_persisted({d: tmp_path / d for d in ("state", "results", "fleet")},
                                 min_files=10)


def healer(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "healer", *args], cwd=cwd, capture_output=True,
                          text=True, env=child_env(), timeout=120)


class TestCLI:
    def test_healer_report_stores_and_heals_without_leaking(
            self, tmp_path: Path, repo: Path, agent_script: Callable[[str], list[str]]) -> None:
        """``healer report`` with the forms in --message, --traceback-file and --context:
        the detached healing runs end with PR records, and no raw form is on disk."""
        d = tmp_path / "project"
        d.mkdir()
        dirs = project_yaml(d, repo, agent_script("fix"))
        ids = []
        for k, r in enumerate(reports(tag="Cli")):
            tb = d / f"tb{k}.txt"
            tb.write_text(r["traceback"])
            out = healer(d, "report", "--type", r["error_type"], "--message", r["error_message"],
                         "--traceback-file", str(tb), "--context", r["context"],
                         "--tool-name", r["tool_name"], "--severity-hint", "high", "--json")
            assert out.returncode == 0, out.stderr[-2000:]
            assert leaks_in(out.stdout + out.stderr, "cli output") == []
            ids.append(json.loads(out.stdout)["attempt_id"])
            tb.unlink()  # the caller's own file, not healer's
        attempts = Attempts(FileStore(dirs["state"]))
        for aid in ids:
            att = wait_status(lambda aid=aid: attempts.get(aid), {"pr_open", "failed",
                                                                   "timeout",
                                                                   "anonymization_failed"},
                              timeout=90)
            assert att["status"] == "pr_open", att.get("reason")
        assert_nothing_persisted(dirs, min_files=10)


class TestMCP:
    async def test_report_error_over_stdio_without_leaking(
            self, tmp_path: Path, repo: Path, agent_script: Callable[[str], list[str]]) -> None:
        """``report_error`` on the MCP server started from .mcp.json: tool results carry no
        raw form, healing ends with PR records, and nothing raw is on disk."""
        d = tmp_path / "mcp-project"
        d.mkdir()
        dirs = project_yaml(d, repo, agent_script("fix"))
        async with connect(d) as s:
            fps = []
            for r in reports(tag="Mcp"):
                res = await s.call("report_error", r)
                assert res["accepted"] is True, res
                assert leaks_in(json.dumps(res), "tool result") == []
                fps.append(res["fingerprint"])
            for fp in fps:
                final = await s.wait(fp, {"pr_open", "failed", "timeout",
                                          "anonymization_failed"}, timeout=90)
                assert final["status"] == "pr_open", final
                assert leaks_in(json.dumps(final), "status") == []
        assert_nothing_persisted(dirs, min_files=10)


class TestModelPrompt:
    async def test_the_model_is_sent_no_raw_form(self, make_settings: Callable[..., Any],
                                                  tmp_path: Path) -> None:
        """A healing run with the Claude executor against the scripted model: of everything
        the model server received (system prompt, task prompt, tool results), no raw form."""
        from healer.agents.executors import claude_cli
        from healer.selfheal.dispatch import Dispatcher
        from healer.selfheal.runner import ExecutorRunner
        from healer.testing import ScriptedModel

        settings = make_settings(None, **OPEN_GATES)
        if claude_cli(settings) is None:
            pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")
        from test_claude import CLAUDE_TEST_ENV, healing_script

        (report,) = reports(1, tag="Claude")
        with ScriptedModel(healing_script()) as model:
            runner = ExecutorRunner(settings, executor="claude",
                                    env={**model.env(), **CLAUDE_TEST_ENV})
            svc = SelfHealService(settings, FileStore(settings.state_path), runner=runner,
                                  launcher=lambda _a: None, env={})
            out = svc.report(report)
            assert out["accepted"], out
            att = await Dispatcher(settings, svc.store, runner=runner).run(out["attempt_id"])
        assert att["status"] == "pr_open", att.get("reason")
        sent = [r for r in model.requests if r.method == "POST"]
        assert model.turns, "the model never got the healing prompt"
        first = model.turns[0].user_text()
        assert "secret corpus batch" in first
        found: list[str] = []
        for n, req in enumerate(sent):
            body = req.body if isinstance(req.body, (dict, list)) else str(req.body)
            found += leaks_in(json.dumps(body), f"request {n} (raw)")
            found += leaks_in("\n".join(_strings(body)), f"request {n}")
        assert found == [], "\n".join(sorted(set(found))[:40])
        assert "[REDACTED-" in first
        assert_nothing_persisted({d: tmp_path / d for d in ("state", "results", "fleet")},
                                 min_files=5)


def test_reports_cover_every_form() -> None:
    """Every form is in exactly one batch, whole."""
    joined = ["\n".join((r["error_message"], r["traceback"], r["context"]))
              for r in reports()]
    for f in FORMS:
        assert sum(f.text in j for j in joined) == 1, f.id
    assert all(len(r["error_message"]) < 10_000 for r in reports(1))


# Keep the walk honest: a planted raw form is found (the checks above can fail).
def test_walk_finds_a_planted_form(tmp_path: Path) -> None:
    """A raw form written plainly or JSON-escaped is reported by the walk."""
    form = FORMS[0]
    (tmp_path / "a.txt").write_text(f"x {form.secrets[0]} y")
    (tmp_path / "b.json").write_text(json.dumps({"v": form.text}))
    files, found = walk(tmp_path)
    assert files == 2 and len(found) >= 2
