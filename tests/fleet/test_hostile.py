"""Hostile config: names, hosts and users with shell metacharacters or traversal are refused
before any subprocess runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from healer.agents import AgentTask, PlaybookExecutor
from healer.config import ConfigError, NodeEntry, load_multifleet, load_settings
from healer.errors import UnsafeNameError, UsageError
from healer.fleet.peers import Heartbeats, update_address
from healer.fleet.signing import Verifier, sign
from healer.fleet.ssh import run_remote, ssh_command, tunnel_argv

GOOD = {"host": "127.0.0.2", "user": "fleet", "port": 8855}
HOSTILE = [
    ("name", "../etc", {}),
    ("name", "n1;reboot", {}),
    ("name", "$(id)", {}),
    ("host", "n1", {"host": "-oProxyCommand=touch /tmp/pwned"}),
    ("host", "n1", {"host": "127.0.0.2;reboot"}),
    ("host", "n1", {"host": "$(touch x)"}),
    ("host", "n1", {"host": "a b"}),
    ("host", "n1", {"host": "../../etc/passwd"}),
    ("user", "n1", {"user": "root;reboot"}),
    ("user", "n1", {"user": "-oProxyCommand=x"}),
    ("user", "n1", {"user": "../root"}),
    ("lan_ip", "n1", {"lan_ip": "`id`"}),
    ("nats_url", "n1", {"nats_url": "nats://-oProxy=x:4222"}),
    ("nats_url", "n1", {"nats_url": "nats://127.0.0.1:4222;reboot"}),
]


def write_config(path: Path, name: str, entry: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"nodes": {name: {**GOOD, **entry}}}))
    return path


@pytest.fixture
def spy_bin(tmp_path: Path) -> tuple[Path, Path]:
    """A PATH folder whose ssh, git and nats-server only leave a trace that they ran."""
    folder = tmp_path / "bin"
    folder.mkdir()
    trace = tmp_path / "ran.txt"
    for tool in ("ssh", "git", "nats-server", "sh"):
        script = folder / tool
        script.write_text(f"#!/bin/sh\necho {tool} \"$@\" >> '{trace}'\nexit 1\n")
        script.chmod(0o755)
    return folder, trace


class TestConfigLoader:
    @pytest.mark.parametrize("what,name,entry", HOSTILE)
    def test_hostile_entries_are_refused(self, tmp_path: Path, what: str, name: str,
                                         entry: dict[str, Any]) -> None:
        """Every hostile name, host, user or NATS URL makes the fleet config invalid."""
        cfg = write_config(tmp_path / "fleet.json", name, entry)
        with pytest.raises(ConfigError) as info:
            load_multifleet(cfg)
        assert f"nodes.{name}" in str(info.value) or "nodes" in str(info.value)


def _run_fleet(tmp_path: Path, spy: tuple[Path, Path], cfg: Path,
               command: list[str]) -> subprocess.CompletedProcess[str]:
    folder, _ = spy
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEALER")}
    env.update(PATH=f"{folder}:{os.environ.get('PATH', '')}", HEALER_FLEET_CONFIG=str(cfg),
               HEALER_STATE_DIR=str(tmp_path / "state"), HEALER_NODE_ID="ops",
               HEALER_FLEET_DIR=str(tmp_path / "fleet"),
               HEALER_RESULTS_DIR=str(tmp_path / "results"))
    return subprocess.run([sys.executable, "-m", "healer", "fleet", *command], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)


@pytest.mark.e2e
class TestNothingRuns:
    @pytest.mark.parametrize("what,name,entry", HOSTILE)
    def test_probe_refuses_before_any_subprocess(self, tmp_path: Path, spy_bin: Any,
                                                 what: str, name: str,
                                                 entry: dict[str, Any]) -> None:
        """`healer fleet probe` with a hostile config exits 2 naming the bad entry; no ssh,
        git or shell ever starts."""
        cfg = write_config(tmp_path / "fleet.json", name, entry)
        r = _run_fleet(tmp_path, spy_bin, cfg, ["probe", "n1"])
        assert r.returncode == 2, r.stderr
        assert "key 'nodes." in r.stderr and "Traceback" not in r.stderr
        assert not spy_bin[1].exists(), spy_bin[1].read_text()

    @pytest.mark.parametrize("command", [["status"], ["heal"], ["send", "n1", "hi"],
                                         ["heal", "n1"]])
    def test_every_command_refuses(self, tmp_path: Path, spy_bin: Any,
                                   command: list[str]) -> None:
        """status, heal and send refuse a hostile host the same way."""
        cfg = write_config(tmp_path / "fleet.json", "n1",
                           {"host": "-oProxyCommand=touch /tmp/pwned"})
        r = _run_fleet(tmp_path, spy_bin, cfg, command)
        assert r.returncode == 2 and "not a valid hostname" in r.stderr
        assert not spy_bin[1].exists()


class TestDefenceInDepth:
    @pytest.mark.parametrize("field,value", [
        ("host", "-oProxyCommand=touch /tmp/pwned"), ("host", "h;reboot"),
        ("user", "root;reboot"), ("user", "-v"),
    ])
    async def test_ssh_argv_refuses_hostile_parts(self, spy_bin: Any, field: str,
                                                  value: str, monkeypatch: Any) -> None:
        """A node built without the loader still never reaches ssh's argv."""
        folder, trace = spy_bin
        monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
        node = NodeEntry(**{"node_id": "n1", "host": "127.0.0.2", "user": "fleet",
                            "tunnel_port": 9000, field: value})
        settings = load_settings(env={})
        with pytest.raises(UsageError, match="refusing SSH"):
            ssh_command(settings.fleet, node, ["true"])
        with pytest.raises(UsageError):
            tunnel_argv(settings.fleet, node)
        with pytest.raises(UsageError):
            await run_remote(settings.fleet, node, ["true"], timeout=5)
        assert not trace.exists()

    def test_remote_commands_are_argv_not_shell(self) -> None:
        """A remote argv is quoted word by word: metacharacters stay literal for the remote
        shell, and a shell string is refused outright."""
        settings = load_settings(env={})
        node = NodeEntry("n1", "127.0.0.2", user="fleet")
        argv = ssh_command(settings.fleet, node, ["/opt/restart", "a;b", "$(id)"])
        assert argv[-3:] == ["--", "127.0.0.2", "/opt/restart 'a;b' '$(id)'"]
        with pytest.raises(TypeError):
            ssh_command(settings.fleet, node, "restart; reboot")  # type: ignore[arg-type]

    def test_address_update_refuses_hostile_hosts(self, tmp_path: Path) -> None:
        """The config updater can never write a hostile address; the file stays as it was."""
        cfg = write_config(tmp_path / "fleet.json", "n1", {})
        before = cfg.read_bytes()
        for host in ("-oProxyCommand=x", "a;b", "../x"):
            with pytest.raises(UnsafeNameError):
                update_address(cfg, "n1", host, 8855)
        with pytest.raises(UnsafeNameError):
            update_address(cfg, "../n1", "127.0.0.3", 8855)
        assert cfg.read_bytes() == before
        update_address(cfg, "n1", "127.0.0.3", 9000)
        assert json.loads(cfg.read_text())["nodes"]["n1"]["host"] == "127.0.0.3"

    def test_hostile_heartbeats_are_ignored(self) -> None:
        """A heartbeat announcing a hostile name or address is dropped, not remembered."""
        secret = "a-fleet-secret-for-this-test"
        beats = Heartbeats(Verifier(secret))

        def signed(doc: dict[str, Any]) -> dict[str, Any]:  # even a holder of the secret
            return sign(doc, secret, "heartbeat")

        assert beats.record(signed({"nodeId": "n1", "host": "-oProxyCommand=x",
                                    "port": 1})) is None
        assert beats.record(signed({"nodeId": "../n1", "host": "127.0.0.2", "port": 1})) is None
        assert beats.record(signed({"nodeId": "n1", "host": "127.0.0.2",
                                    "port": "22; x"})) is None
        assert beats.get("n1") is None
        assert beats.record(signed({"nodeId": "n1", "host": "127.0.0.2",
                                    "port": 8855})) is not None

    async def test_discovery_command_output_is_validated(self, tmp_path: Path) -> None:
        """A discovery command answering with a hostile address changes nothing."""
        cfg = write_config(tmp_path / "fleet.json", "n1", {"host": "127.0.0.1", "port": 9})
        before = cfg.read_bytes()
        answer = json.dumps({"host": "-oProxyCommand=touch x", "port": 22})
        settings = load_settings(env={}, overrides=[
            f"fleet.config={cfg}", f"state_dir={tmp_path / 's'}",
            f"results_dir={tmp_path / 'r'}", f"fleet_dir={tmp_path / 'f'}", "node_id=ops",
            "fleet.nats_url=nats://127.0.0.1:9",
            "fleet.discovery_command=" + json.dumps([sys.executable, "-c",
                                                     f"print({answer!r})"])])
        outcome = await PlaybookExecutor(settings).run(AgentTask("config-updater", "n1"))
        assert outcome.status == "failed" and "never scans" in outcome.result["summary"]
        assert cfg.read_bytes() == before
