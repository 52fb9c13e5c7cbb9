"""Play agents never edit healer's own checkout, and a session cannot make healer a probe.

Through a real `healer serve`: a session naming a ``tools_server`` host outside
``play.tools_server_hosts`` (default: loopback) is refused with 400 naming the setting, and
nothing is connected to; the evaluation agent runs read-only in an empty folder; a remediation
that changes code works in its own checkout of the play's repository (``play.checkouts``), on
a branch of its own — and the checkout healer runs from is never touched. The agent is a real
command (``executor.commands``) that records where it ran and commits what it can.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from test_play_api import start_body

from healer.config import load_settings
from healer.core.store import FileStore
from healer.play.service import PlayService
from healer.testing.api import ServeProcess
from healer.testing.git import git
from healer.testing.receivers import WebhookReceiver

pytestmark = pytest.mark.e2e


# An agent that notes where it ran (and what it was told), edits app.py and commits when its
# working directory is a git checkout, and writes its result.
AGENT = r'''
import json, os, subprocess, sys
prompt, result, log = sys.argv[1], sys.argv[2], sys.argv[3]
cwd = os.getcwd()
text = open(prompt).read()
entry = {"agent": os.environ["HEALER_AGENT"], "cwd": cwd,
         "read_only": os.environ.get("HEALER_READ_ONLY"),
         "says_read_only": "cannot be written" in text,
         "says_checkout": "a checkout of the play's repository made for this" in text,
         "commit_on_current_branch": "Commit your change on the current branch" in text}
if os.path.isdir(os.path.join(cwd, ".git")) or os.path.isfile(os.path.join(cwd, ".git")):
    with open(os.path.join(cwd, "app.py"), "a") as fh:
        fh.write("# fixed by the remediation\n")
    git = ["git", "-c", "user.name=agent", "-c", "user.email=agent@example.invalid"]
    subprocess.run(git + ["commit", "-qam", "fix: the remediation"], cwd=cwd, check=True)
    entry["committed"] = True
with open(log, "a") as fh:
    fh.write(json.dumps(entry) + "\n")
status = "diagnosed" if os.environ["HEALER_KIND"] == "evaluation" else "fixed"
doc = {"schema_version": 1, "kind": os.environ["HEALER_KIND"],
       "target": os.environ["HEALER_TARGET"], "run_id": os.environ["HEALER_RUN_ID"],
       "status": status, "summary": "scripted", "notes": "the cause"}
if os.environ.get("HEALER_INCIDENT"):
    doc["incident"] = os.environ["HEALER_INCIDENT"]
open(result, "w").write(json.dumps(doc))
'''


def git_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "test@example.invalid")
    git(path, "config", "user.name", "test")
    (path / "app.py").write_text("def total(items):\n    return sum(items) + 1\n")
    git(path, "add", "app.py")
    git(path, "commit", "-q", "-m", "init")
    return path




@pytest.fixture
def serve_in(dirs: Any) -> Any:
    servers: list[ServeProcess] = []

    def start(cwd: Path, **env: str) -> ServeProcess:
        s = ServeProcess({**dirs.env, "HEALER__PLAY__REEVALUATE_AFTER_S": "0.05", **env},
                         cwd=cwd)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def command_agent(dirs: Any) -> tuple[dict[str, str], Path]:
    script = dirs.root / "agent.py"
    script.write_text(AGENT)
    # The agent's own record of its runs, in the one folder its sandbox may write besides
    # its checkout and run folder.
    (dirs.root / "agent-log").mkdir(exist_ok=True)
    log = dirs.root / "agent-log" / "runs.jsonl"
    commands = {"*": [sys.executable, str(script), "{prompt_file}", "{result_file}", str(log)]}
    return {"HEALER_EXECUTOR": "command",
            "HEALER__EXECUTOR__COMMANDS": json.dumps(commands),
            "HEALER__AGENTS__SANDBOX_WRITE_PATHS": json.dumps([str(log.parent)])}, log


def runs(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def missing_tools(s: ServeProcess) -> None:
    """A tool mismatch (critical): evaluation, then a fix_config remediation."""
    assert s.http.post("/api/v1/session/start", json=start_body()).status_code == 200
    s.http.post("/api/v1/session/play-task-4-abc/inventory",
                json={"agent": "rex", "tools": ["github_create_pull_request", "read_file",
                                                "write_file"]})


class TestToolsServerHosts:
    def test_another_host_is_refused_at_start_and_never_contacted(self, serve_in: Any,
                                                                  dirs: Any) -> None:
        """Default loopback only: a session naming 127.0.0.2 (where something listens) is
        refused with 400 naming the setting; nothing is stored and nothing is contacted."""
        with WebhookReceiver(host="127.0.0.2") as target:
            s = serve_in(dirs.root)
            r = s.http.post("/api/v1/session/start",
                            json=start_body(tools_server=f"{target.url}/health"))
            assert r.status_code == 400
            body = r.json()
            assert "play.tools_server_hosts" in body["error"] and "127.0.0.2" in body["error"]
            assert body["setting"] == "play.tools_server_hosts"
            assert s.http.get("/api/v1/session/play-task-4-abc").status_code == 404
            # A start that is allowed afterwards is probed (so the probe was not just slow).
            ok = s.http.post("/api/v1/session/start", json=start_body(
                play_id="p2", tools_server=f"{s.url}/health"))
            assert ok.status_code == 200
            s.wait_for(lambda: s.http.get("/api/v1/session/p2").json()["session"][
                "preflight"].get("tools_server_reachable"))
            assert target.posts == [] and target.requests == []

    def test_user_info_and_look_alike_hosts_are_refused(self, serve_in: Any,
                                                         dirs: Any) -> None:
        """A loopback address in user info or before a backslash is not the host: refused
        (by the body's schema, or by the host list), and nothing is stored."""
        s = serve_in(dirs.root)
        for url in ("http://127.0.0.1:80@169.254.169.254/latest/meta-data/",
                    "http://127.0.0.1\\@10.0.0.1/", "http://localhost.evil.example/",
                    "http://10.0.0.1/"):
            r = s.http.post("/api/v1/session/start", json=start_body(tools_server=url))
            assert r.status_code == 400, url
            assert s.http.get("/api/v1/session/play-task-4-abc").status_code == 404
        assert "play.tools_server_hosts" in r.json()["error"]

    def test_both_url_parsers_must_agree(self) -> None:
        """What the probe would connect to is what is checked."""
        from healer.play.sessions import tools_server_refusal

        loopback = ["127.0.0.1", "::1", "localhost"]
        assert tools_server_refusal("http://127.0.0.1:9/health", loopback) == ""
        assert tools_server_refusal("http://[::1]:9/", loopback) == ""
        assert "user info" in tools_server_refusal("http://localhost@localhost/", loopback)
        for url in ("http://127.0.0.1@10.0.0.1/", "http://127.0.0.1\\@10.0.0.1/",
                    "http://0x7f000001/", "http://127.1/", "http://localhost./", "http://"):
            assert tools_server_refusal(url, loopback), url
        assert tools_server_refusal("http://tools.cto.svc/", [".cto.svc"]) == ""
        assert tools_server_refusal("http://evilcto.svc/", [".cto.svc"])
        assert tools_server_refusal("http://10.0.0.1/", ["*"]) == ""
        assert "none" in tools_server_refusal("http://127.0.0.1/", [])

    def test_a_listed_host_is_probed(self, serve_in: Any, dirs: Any) -> None:
        """The operator lists the host: the session starts and the pre-flight asks it."""
        with WebhookReceiver(host="127.0.0.2") as target:
            s = serve_in(dirs.root, HEALER__PLAY__TOOLS_SERVER_HOSTS='["127.0.0.2"]')
            r = s.http.post("/api/v1/session/start",
                            json=start_body(tools_server=f"{target.url}/health"))
            assert r.status_code == 200, r.text
            s.wait_for(lambda: target.requests)
            assert target.requests[0]["path"] == "/health"

    async def test_a_stored_session_outside_the_list_is_not_probed(self, dirs: Any) -> None:
        """The pre-flight checks the host again (a session may predate the setting): outside
        the list it connects to nothing and sends no agent after it."""
        with WebhookReceiver(host="127.0.0.2") as target:
            settings = load_settings(env={"HEALER_EXECUTOR": "playbook"}, overrides={
                "state_dir": str(dirs.state), "results_dir": str(dirs.results),
                "fleet_dir": str(dirs.fleet)})
            svc = PlayService(settings, FileStore(dirs.state))
            svc.registry.start({**start_body(), "tools_server": f"{target.url}/health"})
            item = await svc.check_tools_server("play-task-4-abc")
            assert item is not None and item["ok"] is False
            assert "not probed" in item["detail"] and "play.tools_server_hosts" in item["detail"]
            assert target.requests == []
            assert svc.registry.require("play-task-4-abc")["issues"] == []


class TestWhereAgentsWork:
    def test_evaluation_is_read_only_and_remediation_gets_its_own_checkout(
            self, serve_in: Any, dirs: Any) -> None:
        """Evaluation: an empty folder, read-only. The code-changing remediation: a checkout
        of the play's repository on a healing branch, its commit there; healer's own
        checkout (the server's working directory) and the repository's main stay as they
        were."""
        healer_checkout = git_repo(dirs.root / "healer-checkout")
        play_repo = git_repo(dirs.root / "play-repo")
        env, log = command_agent(dirs)
        s = serve_in(healer_checkout, **env,
                     HEALER__PLAY__CHECKOUTS=json.dumps({"5dlabs/cto": str(play_repo)}))
        missing_tools(s)
        s.wait_for(lambda: s.http.get("/api/v1/session/play-task-4-abc").json()["session"][
            "issues"][0].get("resolved"), timeout=60)
        evaluation, remediation = runs(log)
        assert evaluation["agent"] == "evaluation-agent"
        assert evaluation["read_only"] == "1" and evaluation["says_read_only"]
        assert Path(evaluation["cwd"]).parent == dirs.state.resolve() / "play" / "workspaces"
        assert not Path(evaluation["cwd"]).exists()  # removed after the run
        assert remediation["agent"] == "remediation-agent" and remediation["read_only"] == "0"
        assert remediation["says_checkout"] and not remediation["commit_on_current_branch"]
        assert remediation.get("committed")
        cwd = Path(remediation["cwd"])
        assert cwd.parent == dirs.state.resolve() / "worktrees"
        # The change is on its own branch of a clone of the play's repository …
        branch = git(cwd, "rev-parse", "--abbrev-ref", "HEAD").strip()
        assert branch.startswith("healer/")
        assert "fix: the remediation" in git(cwd, "log", "--format=%s", branch)
        assert git(play_repo, "log", "--format=%s", "main").split() == ["init"]
        assert git(play_repo, "branch", "--format=%(refname:short)").split() == ["main"]
        # … and healer's own checkout is untouched.
        assert git(healer_checkout, "status", "--porcelain") == ""
        assert git(healer_checkout, "log", "--format=%s").split() == ["init"]
        assert git(healer_checkout, "branch", "--format=%(refname:short)").split() == ["main"]
        rec = json.loads(next((dirs.state / "records" / "remediations").glob("*.json"))
                         .read_text())["data"]
        assert rec["checkouts"][0]["branch"] == branch

    def test_without_a_checkout_the_remediation_gets_an_empty_folder(
            self, serve_in: Any, dirs: Any) -> None:
        """No ``play.checkouts`` entry: the remediation works in a scratch folder and is
        told it cannot change code there; healer's checkout stays clean."""
        healer_checkout = git_repo(dirs.root / "healer-checkout")
        env, log = command_agent(dirs)
        s = serve_in(healer_checkout, **env)
        missing_tools(s)
        s.wait_for(lambda: len(runs(log)) >= 2, timeout=60)
        remediation = runs(log)[1]
        assert Path(remediation["cwd"]).parent == dirs.state.resolve() / "play" / "workspaces"
        assert not remediation["says_checkout"] and not remediation.get("committed")
        assert git(healer_checkout, "status", "--porcelain") == ""
