"""Self-healing that cannot fix an error tells a person: a seed file in .fleet-messages/human/
and a forge issue, one per fingerprint, seen through files, the CLI and HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from selfheal_helpers import TRACEBACK, child_env, wait_status
from selfheal_helpers import serve as api

from healer.core import seeds
from healer.core.store import FileStore
from healer.selfheal.dispatch import Dispatcher
from healer.selfheal.service import SelfHealService
from healer.testing.wait import wait_for

pytestmark = pytest.mark.e2e


def bug_report(repo: Path, **extra: str) -> dict[str, str]:
    return {"error_type": "KeyError", "error_message": "'user_id'",
            "traceback": TRACEBACK.format(root=repo), "tool_name": "lookup_user",
            "context": "Rows from the legacy export have no user_id column.", **extra}


async def heal(svc: SelfHealService, repo: Path, **extra: str) -> dict[str, Any]:
    """Report the bug and run its healing attempt in this process, to the end."""
    out = svc.report(bug_report(repo, **extra))
    assert out["accepted"], out
    return await Dispatcher(svc.settings, svc.store).run(out["attempt_id"])


def human(settings: Any) -> list[Path]:
    return seeds.inbox(settings.fleet_path, seeds.HUMAN)


def issues(settings: Any) -> list[Path]:
    return sorted((settings.state_path / "forge" / "issues").glob("*.md"))


def front(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text().split("---\n")[1]))


def healer_cli(settings: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "healer", *args, "--state-dir", str(settings.state_path),
         "--fleet-dir", str(settings.fleet_path), "--set",
         f"selfheal.repo={settings.selfheal.repo}"],
        cwd=settings.state_path.parent, capture_output=True, text=True, env=child_env(),
        timeout=60)


class TestUnfixable:
    async def test_unfixable_escalates_at_once_with_the_agents_explanation(
            self, service: Any, repo: Path) -> None:
        """An UNFIXABLE note ends the first attempt in one seed file for a person — the agent's
        explanation, the call site, the fingerprint, `healer status <fp>` — and one local
        forge issue; the attempt names the file."""
        svc = service("unfixable")
        att = await heal(svc, repo)
        fp = att["fingerprint"]
        assert att["status"] == "unfixable"
        [seed] = human(svc.settings)
        assert att["escalation"] == str(seed)
        fm = front(seed)
        assert (fm["to"], fm["type"], fm["incident"]) == ("human", "escalation", fp)
        assert "KeyError" in fm["subject"] and fp[:12] in fm["subject"]
        text = seed.read_text()
        assert "upstream payments API returns HTTP 503" in text
        assert "check the provider's status page" in text
        assert "src/app/tools.py:lookup" in text and "**unfixable**" in text
        assert f"healer status {fp}" in text
        assert "## What you should do next" in text
        [issue] = issues(svc.settings)
        assert "upstream payments API returns HTTP 503" in issue.read_text()
        assert att["escalation_issue"] == issue.resolve().as_uri()

    async def test_status_cli_and_http_show_the_escalation(self, service: Any,
                                                           repo: Path) -> None:
        """`healer status <fp>` prints the file, --json and GET /api/v1/healing carry it as
        `escalation`; the status itself is still one of the seven."""
        svc = service("unfixable")
        att = await heal(svc, repo)
        fp, path = att["fingerprint"], att["escalation"]
        table = healer_cli(svc.settings, "status", fp[:12])
        assert table.returncode == 1, table.stderr
        assert f"escalated to a person: {path}" in table.stdout
        data = json.loads(healer_cli(svc.settings, "status", fp, "--json").stdout)
        assert [(a["status"], a["escalation"]) for a in data["attempts"]] == \
            [("unfixable", path)]
        async with api(svc) as c:
            one = (await c.get(f"/api/v1/healing/{fp}")).json()
            latest = (await c.get("/api/v1/healing")).json()
        assert one["attempts"][0]["escalation"] == path
        assert latest["attempts"][0]["escalation"] == path
        # The incident of every kind's list says the same: escalated, with that file.
        async with api(svc) as c:
            [inc] = (await c.get("/api/v1/incidents", params={"kind": "code"})).json()[
                "incidents"]
        assert inc["status"] == "escalated" and inc["escalation"]["seed_file"] == path
        assert "upstream payments API returns HTTP 503" in inc["escalation"]["reason"]
        assert inc["attempts"] == 1 and inc["last_outcome"]["outcome"] == "unfixable"

    async def test_secrets_in_the_note_are_not_published(self, service: Any, repo: Path,
                                                         tmp_path: Path) -> None:
        """A note that quotes a key and an e-mail reaches the seed file and issue scrubbed."""
        svc = service("unfixable")
        script = tmp_path / "agents" / "leaky_note.py"
        script.write_text(textwrap.dedent('''
            import pathlib
            pathlib.Path("UNFIXABLE").write_text(
                "The vendor rejects our key sk-ant-api03-Xy7Qp2Lm9Nv4Rt8Ks1Jd6Fh3Gz5Wb0Cc-AaBb"
                " for account jane.doe@gmail.com: the contract expired. Renew it.\\n")
        '''))
        svc.settings.executor.commands["healing-agent"] = [sys.executable, str(script)]
        att = await heal(svc, repo)
        assert att["status"] == "unfixable"
        published = Path(att["escalation"]).read_text() + issues(svc.settings)[0].read_text()
        assert "the contract expired" in published
        assert "sk-ant-api03" not in published and "jane.doe" not in published


class TestFailures:
    async def test_timeout_escalates(self, service: Any, repo: Path) -> None:
        """A heal over its time limit escalates, saying so and naming the setting."""
        svc = service("hang", timeout_s=2)
        att = await heal(svc, repo)
        assert att["status"] == "timeout"
        [seed] = human(svc.settings)
        text = seed.read_text()
        assert "healing timed out" in text and "selfheal.timeout_s" in text
        assert len(issues(svc.settings)) == 1

    async def test_second_failure_updates_the_same_file_and_issue(self, service: Any,
                                                                  repo: Path) -> None:
        """Two failed heals of one fingerprint: one seed file (rewritten, "escalated 2
        times", both attempts listed) and one issue with a comment — not two of each."""
        svc = service("nothing", cooldown_s=0)
        first = await heal(svc, repo)
        second = await heal(svc, repo)
        assert (first["status"], second["status"]) == ("failed", "failed")
        assert first["fingerprint"] == second["fingerprint"]
        [seed] = human(svc.settings)
        assert first["escalation"] == second["escalation"] == str(seed)
        text = seed.read_text()
        assert "Escalated 2 times" in text
        assert first["attempt_id"] in text and second["attempt_id"] in text
        assert "made no commits" in text
        [issue] = issues(svc.settings)
        assert issue.read_text().count("**Update ") == 1

    async def test_archived_escalation_starts_a_new_one(self, service: Any,
                                                        repo: Path) -> None:
        """Once a person moves the file to archive/, the next failure writes a new file."""
        svc = service("nothing", cooldown_s=0)
        first = await heal(svc, repo)
        seeds.archive(first["escalation"])
        second = await heal(svc, repo)
        [seed] = human(svc.settings)
        assert second["escalation"] == str(seed)
        assert second["attempt_id"] in seed.read_text()
        assert "Escalated 2 times" not in seed.read_text()
        [old] = (seed.parent / "archive").glob("*.md")
        assert first["attempt_id"] in old.read_text()
        assert second["attempt_id"] not in old.read_text()

    async def test_blocked_fix_escalates_on_this_machine_only(self, service: Any,
                                                              repo: Path) -> None:
        """anonymization_failed: a seed file naming what was found, no forge issue, and the
        secret nowhere in it."""
        svc = service("leak")
        att = await heal(svc, repo)
        assert att["status"] == "anonymization_failed"
        text = Path(att["escalation"]).read_text()
        assert "API-KEY" in text and "do not push it" in text
        assert "sk-ant" not in text and "jane.doe" not in text
        assert not (svc.settings.state_path / "forge").exists()

    async def test_escalation_trouble_never_fails_the_run(self, service: Any,
                                                          repo: Path) -> None:
        """With the seed folder unwritable the attempt still ends normally; the issue is
        opened anyway."""
        svc = service("nothing")
        svc.settings.fleet_path.parent.mkdir(parents=True, exist_ok=True)
        svc.settings.fleet_path.write_text("not a folder\n")
        att = await heal(svc, repo)
        assert att["status"] == "failed" and "made no commits" in att["reason"]
        assert len(issues(svc.settings)) == 1

    def test_a_worker_that_cannot_start_is_escalated(self, make_settings: Any,
                                                     repo: Path) -> None:
        """report() whose healing worker fails to start: the attempt is failed and a person
        is told at once."""
        settings = make_settings("fix")

        def broken(_attempt_id: str) -> None:
            raise OSError("no more processes")

        svc = SelfHealService(settings, FileStore(settings.state_path), launcher=broken,
                              env={})
        out = svc.report(bug_report(repo))
        att = svc.attempts.require(out["attempt_id"])
        assert att["status"] == "failed" and "did not start" in att["reason"]
        [seed] = human(settings)
        assert att["escalation"] == str(seed) and "did not start" in seed.read_text()

    async def test_a_pr_is_not_escalated(self, service: Any, repo: Path) -> None:
        """A heal that opens a PR writes nothing for a person."""
        svc = service("fix")
        att = await heal(svc, repo)
        assert att["status"] == "pr_open" and "escalation" not in att
        assert human(svc.settings) == [] and issues(svc.settings) == []


class TestRecovery:
    def test_killed_worker_is_escalated_by_recovery(self, make_settings: Any,
                                                    repo: Path) -> None:
        """kill -9 of the detached worker mid-run: recover() fails the attempt and escalates
        it, saying the worker stopped."""
        settings = make_settings("hang", timeout_s=20)
        svc = SelfHealService(settings, FileStore(settings.state_path), env={})
        out = svc.report(bug_report(repo))
        try:
            att = wait_status(lambda: svc.attempts.get(out["attempt_id"]), {"investigating"})
            os.kill(att["worker"]["pid"], 9)
            _wait_gone(att["worker"]["pid"])
            [settled] = svc.recover()
        finally:
            _kill_hangers(settings)
        assert settled["status"] == "failed"
        [seed] = human(settings)
        assert settled["escalation"] == str(seed)
        assert "the healing worker stopped before finishing" in seed.read_text()
        assert len(issues(settings)) == 1
        assert svc.status(out["fingerprint"])["attempts"][0]["escalation"] == str(seed)
        svc.recover()  # nothing is escalated twice
        assert human(settings) == [seed] and "**Update " not in issues(settings)[0].read_text()

    def test_worker_that_died_before_escalating_is_caught_up(self, service: Any) -> None:
        """An attempt that ended but whose escalation was never written (the worker died in
        between) is escalated by the next recover()."""
        from healer.selfheal import attempts as st

        svc = service()
        a = svc.report({"error_type": "KeyError", "error_message": "x"})["attempt_id"]
        svc.attempts.transition(a, st.INVESTIGATING)
        svc.attempts.transition(a, st.FAILED, reason="the agent crashed")
        assert human(svc.settings) == []
        assert svc.recover() == []
        [seed] = human(svc.settings)
        assert "the agent crashed" in seed.read_text()
        assert svc.status()["attempts"][0]["escalation"] == str(seed)


def _wait_gone(pid: int, timeout: float = 10) -> None:
    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, timeout)


def _kill_hangers(settings: Any) -> None:
    """The hanging agent outlived its killed worker (it has its own session): end it."""
    script = settings.executor.commands["healing-agent"][1]
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError):
            if script in (p / "cmdline").read_bytes().decode(errors="replace"):
                os.kill(int(p.name), 9)
