"""One harness for every source of a code error, driving real processes end to end.

``Rig`` holds a small shop repository whose ``average`` divides by zero on an empty basket,
its living context, a scripted Anthropic model on 127.0.0.1 and the environment of healer's
child processes, which run the real Claude Code CLI against that model (``executor: claude``,
in the agent sandbox). ``Rig.drive(source)`` delivers the error the way that source does:

============  =====================================================================
source        how the error reaches healer
============  =====================================================================
report_http   ``POST /api/v1/errors`` with the bearer token, on a real `healer serve`
report_cli    `healer report` (the real CLI, a child process)
sentry        the real sentry-sdk in a child process, its DSN pointed at the serve's
              ingest endpoint; the incident is anonymous, so `healer approve` starts it
alertmanager  ``POST /api/v1/webhooks/alertmanager`` (webhook v4, bearer token)
slack         a signed ``/heal`` slash command on ``/api/v1/webhooks/slack``
loki          a LogQL rule over ``healer.testing.fake_loki``, run by a real `healer loop`
============  =====================================================================

and ``Rig.outcome()`` waits (with a deadline) until the one attempt it started has ended, then
returns what an operator can see of it: the attempt record, the PRs of the local forge and the
incident as `healer status <id> --json` shows it.

The scripted agent (``agent_turns``) does what a model would with its tools, in each case:
``fix`` adds a failing test reproducing the error and the right fix; ``wrong`` adds the test
and a fix that breaks an existing test; ``edits_tests`` makes the error "pass" by rewriting an
existing test and changes no code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from healer.core.incidents import incident_id
from healer.core.store import FileStore
from healer.selfheal.attempts import Attempts
from healer.testing import ScriptedModel, text, tool_use
from healer.testing.api import ServeProcess
from healer.testing.fake_loki import FakeLoki
from healer.testing.git import git
from healer.testing.loop import LoopProcess, healer_env
from healer.testing.wait import wait_for
from healer.testing.webhooks import slack_command, slack_delivery

PY = sys.executable
SOURCES = ("report_http", "report_cli", "sentry", "alertmanager", "slack", "loki")
CASES = ("fix", "wrong", "edits_tests")
# What the record's ``source`` says for each way in (the contract's intake names).
INTAKE = {"report_http": "report_error", "report_cli": "report_error", "sentry": "sentry",
          "alertmanager": "alertmanager", "slack": "slack", "loki": "loki"}

TOKEN = "every-source-api-token"
AM_TOKEN = "every-source-alertmanager-token"
SLACK_SECRET = "every-source-slack-signing-secret"
SENTRY_KEY = "0123456789abcdef0123456789abcdef"

# Fail fast instead of retrying, and never leave the machine: proxies point at a closed
# loopback port; loopback (the scripted model) bypasses them.
CLAUDE_TEST_ENV = {
    "CLAUDE_CODE_MAX_RETRIES": "0", "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
}

# An attempt in one of these has ended, or waits for a person: nothing more happens by itself.
SETTLED = {"pr_open", "pr_merged", "failed", "unfixable", "timeout", "anonymization_failed",
           "awaiting_approval", "held"}

PAYMENT = '''"""Payments."""


def average(total, count):
    """The mean amount, in cents."""
    return total // count
'''
BUGGY_LINE = "    return total // count\n"
GOOD_LINE = "    return total // count if count else 0\n"
WRONG_LINE = "    return 0\n"  # the empty basket passes; every other average breaks

SUITE = '''import unittest

from app.payment import average


class TestAverage(unittest.TestCase):
    def test_average(self):
        self.assertEqual(average(10, 2), 5)
'''
# The reproduction the agent adds: it fails on base with the reported ZeroDivisionError.
REPRO_FILE = "tests/test_empty_basket.py"
REPRO = '''import unittest

from app.payment import average


class TestEmptyBasket(unittest.TestCase):
    def test_empty_basket_averages_to_zero(self):
        self.assertEqual(average(10, 0), 0)
'''
# "Passes" by asserting the bug: the existing test now expects the crash, no code changes.
EDITED_SUITE = SUITE + '''
    def test_empty_basket(self):
        with self.assertRaises(ZeroDivisionError):
            average(10, 0)
'''
EDITED_SUITE = EDITED_SUITE.replace("average(10, 2), 5", "average(10, 5), 2")

TRACEBACK = '''Traceback (most recent call last):
  File "{root}/app/api.py", line 5, in report
    return {{"avg": average(total, count)}}
  File "{root}/app/payment.py", line 6, in average
    return total // count
ZeroDivisionError: integer division or modulo by zero
'''
ERROR_TYPE = "ZeroDivisionError"
ERROR_MESSAGE = "integer division or modulo by zero"

SDK_SCRIPT = """
import sys
import sentry_sdk

sys.path.insert(0, {shop!r})
from app.api import report

sentry_sdk.init(dsn={dsn!r}, shutdown_timeout=10)
try:
    report(10, 0)
except ZeroDivisionError as exc:
    sentry_sdk.capture_exception(exc)
sentry_sdk.flush(10)
"""

LOKI_RULE = {"name": "shop-errors", "query": '{app="shop"} |= "ERROR"',
             "threshold_per_min": 5, "window_s": 60, "severity": "high",
             "environment": "prod"}
LOKI_LINE = ('ERROR ZeroDivisionError: integer division or modulo by zero '
             'File "/srv/shop/app/payment.py", line 6, in average')


class HarnessError(RuntimeError):
    """The rig could not drive a source (not a verdict on healer's flow)."""






def make_shop(root: Path) -> Path:
    """The repository being healed: green suite on main, a crash on an empty basket."""
    repo = root / "shop"
    files = {
        "app/__init__.py": "",
        "app/payment.py": PAYMENT,
        "app/api.py": 'from app.payment import average\n\n\ndef report(total, count):\n'
                      '    return {"avg": average(total, count)}\n',
        "tests/__init__.py": "",
        "tests/test_payment.py": SUITE,
        ".gitignore": "__pycache__/\n",
    }
    for name, body in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(body)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.invalid")
    git(repo, "config", "user.name", "dev")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "shop")
    return repo


def write_context(folder: Path, repo: Path) -> Path:
    """The shop's living context: one scenario (its suite), one critical invariant."""
    from healer.context.impact import build_graph

    (folder / "scenarios").mkdir(parents=True, exist_ok=True)
    (folder / "scenarios" / "payments.scenarios.yaml").write_text(yaml.safe_dump({
        "module": "payments", "file": "app/payment.py", "scenarios": [
            {"id": "S001", "name": "Average of a basket", "why": "receipts show it",
             "constraint": "the mean of a basket, in whole cents",
             "test_command": f"{PY} -m unittest -q tests.test_payment", "tags": ["money"]}]},
        sort_keys=False))
    (folder / "invariants.yaml").write_text(yaml.safe_dump([
        {"id": "INV-001", "rule": "money never goes through float", "files": ["app/*.py"],
         "check": {"forbid": r"float\("}, "severity": "critical", "category": "money"}],
        sort_keys=False))
    (folder / "impact-map.yaml").write_text(yaml.safe_dump(build_graph(repo).impact_map()))
    (folder / "incident-memory.yaml").write_text("[]\n")
    (folder / "loki-rules.yaml").write_text(yaml.safe_dump({"rules": [LOKI_RULE]}))
    return folder


def _result_file() -> Any:
    doc = {"schema_version": 1, "kind": "${kind}", "target": "${target}", "status": "fixed",
           "run_id": "${run_id}", "incident": "${incident}", "executor": "claude",
           "summary": "scripted healing run", "actions_taken": ["edited", "committed"]}
    return tool_use("Write", {"file_path": "${result_path}", "content": json.dumps(doc)})


def _commit(message: str) -> Any:
    return tool_use("Bash", {"command": f"git add -A && git commit -q -m '{message}'",
                             "description": "Commit the change"})


def agent_turns(case: str) -> list[Any]:
    """One iteration of the scripted healing agent, as Claude Code tool calls."""
    if case == "edits_tests":
        return [tool_use("Write", {"file_path": "${cwd}/tests/test_payment.py",
                                   "content": EDITED_SUITE},
                         text="The suite should expect the empty basket to raise."),
                _commit("test: an empty basket raises"), _result_file(), text("Done.")]
    line = {"fix": GOOD_LINE, "wrong": WRONG_LINE}[case]
    return [tool_use("Write", {"file_path": "${cwd}/" + REPRO_FILE, "content": REPRO},
                     text="Reproducing the crash with a test first."),
            tool_use("Write", {"file_path": "${cwd}/app/payment.py",
                               "content": PAYMENT.replace(BUGGY_LINE, line)},
                     text="Guarding the empty basket."),
            _commit("fix: an empty basket averages to 0"), _result_file(), text("Done.")]


def script(case: str, iterations: int = 3) -> list[Any]:
    """The agent's turns for as many iterations as the flow may run (each the same)."""
    return [turn for _ in range(iterations) for turn in agent_turns(case)]


@dataclass
class Outcome:
    """What an operator can see once the attempt settled."""

    attempt: dict[str, Any]
    prs: list[dict[str, Any]]
    incident: dict[str, Any] | None
    status_json: dict[str, Any] | None
    model_turns: int


@dataclass
class Rig:
    """The shop, its context, the scripted model and healer's child processes for one test."""

    root: Path
    case: str
    repo: Path = field(init=False)
    state: Path = field(init=False)
    env: dict[str, str] = field(init=False)
    model: ScriptedModel = field(init=False)
    _stack: ExitStack = field(init=False, default_factory=ExitStack)
    _server: ServeProcess | None = field(init=False, default=None)
    _loop: LoopProcess | None = field(init=False, default=None)
    _attempt_id: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.repo = make_shop(self.root)
        context = write_context(self.root / "context", self.repo)
        self.state = self.root / "state"
        for d in ("state", "results", "fleet"):
            (self.root / d).mkdir(exist_ok=True)
        self.model = self._stack.enter_context(ScriptedModel(script(self.case)))
        self.env = healer_env(self.state, self.root / "results", self.root / "fleet", **{
            **self.model.env(), **CLAUDE_TEST_ENV,
            "HEALER__SELFHEAL__REPO": str(self.repo), "HEALER__CONTEXT__DIR": str(context),
            "HEALER__EXECUTOR__DEFAULT": "claude",
            "HEALER_ALERTMANAGER_TOKEN": AM_TOKEN, "HEALER_SLACK_SECRET": SLACK_SECRET,
            "HEALER_SENTRY_KEY": SENTRY_KEY,
            # One iteration per attempt keeps each case to one agent run.
            "HEALER__CODE__MAX_ITERATIONS": "1", "HEALER__CONTEXT__MAX_ITERATIONS": "1",
        })

    def close(self) -> None:
        self._stack.close()

    # --- the processes ------------------------------------------------------------------

    @property
    def server(self) -> ServeProcess:
        """A real `healer serve`; callers with the token are trusted."""
        if self._server is None:
            self._server = ServeProcess({**self.env, "HEALER_TOKEN": TOKEN}, token=TOKEN)
            self._stack.callback(self._server.close)
        return self._server

    def cli(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """The real `healer` command with the rig's settings."""
        return subprocess.run([PY, "-m", "healer", *args], env=self.env, cwd=self.root,
                              input=input, capture_output=True, text=True, timeout=120)

    # --- the sources --------------------------------------------------------------------

    def drive(self, source: str) -> None:
        """Deliver the shop's ZeroDivisionError the way ``source`` does."""
        getattr(self, f"_drive_{source}")()

    def _report(self) -> dict[str, str]:
        return {"error_type": ERROR_TYPE, "error_message": ERROR_MESSAGE,
                "traceback": TRACEBACK.format(root=self.repo),
                "context": "The checkout crashed while averaging an empty basket."}

    def _drive_report_http(self) -> None:
        resp = self.server.http.post("/api/v1/errors", json=self._report())
        body = _json(resp)
        if resp.status_code not in (200, 202) or not body.get("accepted"):
            raise HarnessError(f"report_error over HTTP refused: {resp.status_code} {body}")
        self._attempt_id = body["attempt_id"]

    def _drive_report_cli(self) -> None:
        tb = self.root / "traceback.txt"
        tb.write_text(self._report()["traceback"])
        done = self.cli("report", "--type", ERROR_TYPE, "--message", ERROR_MESSAGE,
                        "--traceback-file", str(tb), "--context",
                        self._report()["context"], "--json")
        if done.returncode != 0:
            raise HarnessError(f"healer report exited {done.returncode}: "
                               f"{done.stdout}{done.stderr}")
        self._attempt_id = json.loads(done.stdout)["attempt_id"]

    def _drive_sentry(self) -> None:
        srv = self.server
        dsn = re.sub(r"^http://", f"http://{SENTRY_KEY}@", srv.url.rstrip("/")) + "/4"
        # cwd: the SDK counts frames under its project root (the cwd) as in-app.
        sdk = subprocess.run([PY, "-c", SDK_SCRIPT.format(shop=str(self.repo), dsn=dsn)],
                             cwd=self.repo,
                             capture_output=True, text=True, timeout=120)
        if sdk.returncode != 0:
            raise HarnessError(f"the sentry-sdk script failed: {sdk.stderr[-2000:]}")
        # The DSN key is public: the incident is anonymous and waits for a person.
        inc = until(lambda: next((i for i in _incidents(srv)
                                  if ERROR_TYPE in i.get("summary", "")), None), 60,
                    "the sentry-sdk's incident", srv.log)
        done = self.cli("approve", inc["id"], "--by", "alice", "--comment",
                        "the trace is ours")
        if done.returncode != 0:
            raise HarnessError(f"healer approve exited {done.returncode}: "
                               f"{done.stdout}{done.stderr}")

    def _drive_alertmanager(self) -> None:
        body = {"version": "4", "status": "firing", "receiver": "healer",
                "groupKey": '{}:{alertname="PaymentErrors"}', "truncatedAlerts": 0,
                "groupLabels": {"alertname": "PaymentErrors"}, "commonLabels": {},
                "commonAnnotations": {}, "externalURL": "http://127.0.0.1:9093",
                "alerts": [{
                    "status": "firing", "fingerprint": "c0ffee0123456789",
                    "labels": {"alertname": "PaymentErrors", "severity": "critical",
                               "env": "prod"},
                    "annotations": {"summary": f"{ERROR_TYPE}: {ERROR_MESSAGE}",
                                    "file": "app/payment.py", "line": "6"},
                    "startsAt": "2026-01-01T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                    "generatorURL": "http://127.0.0.1:9090/graph"}]}
        resp = self.server.http.post("/api/v1/webhooks/alertmanager", json=body,
                                     headers={"Authorization": f"Bearer {AM_TOKEN}"})
        if resp.status_code != 202:
            raise HarnessError(f"the Alertmanager webhook answered {resp.status_code}: "
                               f"{resp.text}")

    def _drive_slack(self) -> None:
        form = slack_command(f"app/payment.py:6 {ERROR_TYPE}: {ERROR_MESSAGE} on an empty "
                             "basket")
        raw, headers = slack_delivery(form, secret=SLACK_SECRET)
        resp = self.server.http.post("/api/v1/webhooks/slack", content=raw, headers=headers)
        if resp.status_code != 200 or "`" not in resp.json().get("text", ""):
            raise HarnessError(f"the Slack command answered {resp.status_code}: {resp.text}")

    def _logs(self) -> str:
        """What healer's processes logged, and the attempts so far (for a harness error)."""
        parts = [json.dumps(self._attempts())[-3000:]]
        if self._server is not None:
            parts.append(self._server.log()[-4000:])
        if self._loop is not None:
            parts.append(self._loop.log()[-4000:])
        return "\n".join(parts)

    def _drive_loki(self) -> None:
        loki = self._stack.enter_context(FakeLoki())
        now = time.time_ns()
        for i in range(8):
            loki.push({"app": "shop", "pod": "web-1"}, now - 1_000_000_000 + i, LOKI_LINE)
        loop = LoopProcess({**self.env, "HEALER__CONTEXT__LOKI_URL": loki.url,
                            "HEALER__CONTEXT__LOKI_INTERVAL_S": "1"}, cwd=self.root)
        self._loop = self._stack.enter_context(loop)

    # --- the outcome --------------------------------------------------------------------

    def _attempts(self) -> list[dict[str, Any]]:
        attempts = Attempts(FileStore(self.state))
        if self._attempt_id:
            one = attempts.get(self._attempt_id)
            return [one] if one else []
        return attempts.latest()

    def outcome(self, timeout: float = 150.0) -> Outcome:
        """Wait until the source's one attempt settled; what an operator sees of it."""
        att = until(lambda: next((a for a in self._attempts()
                                  if a.get("status") in SETTLED), None), timeout,
                    "a settled attempt", self._logs)
        if len(self._attempts()) != 1:
            raise HarnessError(f"expected one attempt, found {self._attempts()}")
        prs = [json.loads(p.read_text()) for p in
               sorted((self.state / "forge" / "prs").glob("*.json"))]
        iid = att.get("incident_id") or (incident_id("code", att["incident"])
                                         if att.get("incident") else "")
        status_json = None
        incident = None
        if iid:
            shown = self.cli("status", iid, "--json")
            if shown.stdout.strip():
                status_json = json.loads(shown.stdout)
                incident = status_json.get("incident")
        return Outcome(att, prs, incident, status_json, len(self.model.turns))


def until(cond: Callable[[], Any], timeout: float, what: str, logs: Callable[[], str]) -> Any:
    """``wait_for``, failing as a harness error with the processes' logs."""
    try:
        return wait_for(cond, timeout)
    except AssertionError as exc:
        raise HarnessError(f"{what}: none within {timeout:.0f} s\n{logs()}") from exc


def _json(resp: httpx.Response) -> dict[str, Any]:
    try:
        data = resp.json()
    except ValueError:
        return {"raw": resp.text}
    return data if isinstance(data, dict) else {"raw": data}


def _incidents(srv: ServeProcess) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = srv.http.get("/api/v1/incidents").json()["incidents"]
    return found


@contextmanager
def rig(root: Path, case: str) -> Iterator[Rig]:
    """A rig for one case, its processes stopped afterwards."""
    r = Rig(root, case)
    try:
        yield r
    finally:
        r.close()


