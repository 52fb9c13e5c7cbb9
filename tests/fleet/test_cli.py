"""`healer fleet status|probe|heal|send` as a user runs them, against the real local fleet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from healer.testing.wait import wait_for


def fleet_cli(env: dict[str, str], *args: str, timeout: float = 90) -> Any:
    return subprocess.run([sys.executable, "-m", "healer", "fleet", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def env(fleet: Any, tmp_path: Path) -> dict[str, str]:
    return fleet.loop_env(state_dir=str(tmp_path / "state"),
                          results_dir=str(tmp_path / "results"))


# Every channel healthy must say ok even on a busy 2-core CI box: three times the default
# timeouts (a healthy channel answers at once, so this costs nothing when all is well).
PATIENT = json.dumps({"nats": 6, "http": 9, "tunnel": 9, "relay": 9, "seed": 6, "ssh": 24,
                      "wol": 9, "git": 30})


@pytest.mark.e2e
class TestStatusAndProbe:
    def test_status_json_lists_every_peer_and_channel(self, env: dict[str, str]) -> None:
        """status --json: every peer with every applicable channel ok, exit 0."""
        env = {**env, "HEALER__FLEET__TIMEOUTS": PATIENT}
        r = fleet_cli(env, "status", "--json")
        assert r.returncode == 0, r.stderr
        data = json.loads(r.stdout)
        assert data["node"] == "ops" and set(data["peers"]) == {"n1", "n2", "n3"}
        assert set(data["peers"]["n2"]["channels"]) == {"nats", "http", "tunnel", "relay",
                                                        "seed", "ssh", "git"}
        assert data["peers"]["n2"]["skipped"] == {"wol": "send-only"}
        assert data["peers"]["n1"]["skipped"]["relay"].startswith("the chief cannot relay")

    def test_status_table_and_watch(self, env: dict[str, str]) -> None:
        """The table has a row per node; --watch --count N refreshes N times and stops."""
        env = {**env, "HEALER__FLEET__TIMEOUTS": PATIENT}
        r = fleet_cli(env, "status")
        assert r.returncode == 0 and all(f"│ {n}" in r.stdout for n in ("n1", "n2", "n3"))
        w = fleet_cli(env, "status", "--watch", "--count", "2", "--interval", "0.2", "--json")
        docs = [json.loads(d) for d in w.stdout.replace("}\n{", "}\n\x00{").split("\x00")]
        assert w.returncode == 0 and len(docs) == 2

    def test_probe_names_the_broken_channel_and_why(self, fleet: Any,
                                                   env: dict[str, str]) -> None:
        """probe PEER shows each channel with its reason and exits 1 when one is broken."""
        fleet.kill_tunnel("n3")
        r = fleet_cli(env, "probe", "n3")
        assert r.returncode == 1
        line = next(ln for ln in r.stdout.splitlines() if " tunnel " in ln)
        assert "FAIL" in line and "connection refused" in line
        assert "ok" in next(ln for ln in r.stdout.splitlines() if " http " in ln)

    @pytest.mark.parametrize("args,message", [
        (["probe", "zz"], "unknown peer 'zz'"),
        (["probe", "n1;reboot"], "unsafe peer name"),
        (["probe", "n1", "--channel", "pigeon"], "unknown channel 'pigeon'"),
        (["send", "../n1", "hi"], "unsafe peer name"),
    ])
    def test_usage_errors_exit_2(self, env: dict[str, str], args: list[str],
                                 message: str) -> None:
        """Unknown or unsafe peers and unknown channels: one line, exit 2."""
        r = fleet_cli(env, *args)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr

    def test_one_bad_node_disables_only_that_node(self, fleet: Any, env: dict[str, str],
                                                  tmp_path: Path) -> None:
        """A fleet config with one invalid node: status --json still probes every real peer
        (all ok) and lists the bad node under "skipped" with why; a warning names it; probe
        and send to the good peers work."""
        doc = json.loads(Path(fleet.config_path).read_text())
        doc["nodes"]["n9"] = {"host": "127.0.0.9", "port": "not-a-port"}
        cfg = tmp_path / "fleet-with-a-bad-node.json"
        cfg.write_text(json.dumps(doc))
        env = {**env, "HEALER__FLEET__CONFIG": str(cfg)}
        r = fleet_cli(env, "status", "--json")
        data = json.loads(r.stdout)
        assert set(data["peers"]) == {"n1", "n2", "n3"}
        # Every real peer is probed on every channel (whether a channel of the shared fleet
        # happens to be up at this moment is the other tests' business).
        assert all(p["channels"] for p in data["peers"].values()), data["peers"]
        assert data["skipped"] == {"n9": "nodes.n9.port: expected integer, got 'not-a-port'"}
        assert r.returncode == 1 and "node 'n9' is disabled" in r.stderr
        # A live probe of the shared fleet may find a channel slow on a loaded machine (exit
        # 1 names it); what counts is that n9 disables nothing of n2: ask until all is ok.
        wait_for(lambda: fleet_cli(env, "probe", "n2").returncode == 0, timeout=60)
        sent = fleet_cli(env, "send", "n3", "still here", "--json")
        assert sent.returncode == 0 and json.loads(sent.stdout)["delivered"] is True
        r = fleet_cli(env, "probe", "n9")
        assert r.returncode == 2 and "peer 'n9' is disabled" in r.stderr

    def test_missing_config_exits_2(self, env: dict[str, str], tmp_path: Path) -> None:
        """Without a fleet config the command says where it looked."""
        r = fleet_cli({**env, "HEALER__FLEET__CONFIG": str(tmp_path / "nope.json")}, "status")
        assert r.returncode == 2 and "no fleet config" in r.stderr


@pytest.mark.e2e
class TestHealAndSend:
    def test_heal_restarts_a_killed_daemon(self, fleet: Any, env: dict[str, str]) -> None:
        """heal (no peer) finds the broken peer and heals it; exit 0."""
        fleet.kill_daemon("n2")
        r = fleet_cli(env, "heal", "--json")
        assert r.returncode == 0, r.stderr[-2000:]
        episodes = json.loads(r.stdout)
        # A loaded box may find another peer slow to answer too: it must be healed as well,
        # or found fine on the diagnosis' second look (transient).
        (ep,) = [e for e in episodes if e["peer"] == "n2"]
        assert (ep["state"], ep["agents"]) == ("healed", ["daemon-restarter"])
        assert all(e["state"] in ("healed", "transient") for e in episodes), episodes

    def test_heal_when_all_is_well(self, env: dict[str, str]) -> None:
        """heal with nothing broken says so and exits 0."""
        env = {**env, "HEALER__FLEET__TIMEOUTS": PATIENT}
        # A peer healed by an earlier test may still be coming up on a busy box: heal is
        # asked once the fleet answers on every channel.
        wait_for(lambda: fleet_cli(env, "status", "--json").returncode == 0, timeout=120,
                 every=1.0)
        r = fleet_cli(env, "heal")
        assert r.returncode == 0 and "every channel to every peer works" in r.stdout

    def test_send_reports_the_channel_used(self, env: dict[str, str]) -> None:
        """send delivers on P1 and reports every attempt; --strict keeps the ladder order."""
        r = fleet_cli(env, "send", "n3", "deploy done", "--subject", "deploy", "--strict",
                      "--json")
        assert r.returncode == 0
        d = json.loads(r.stdout)
        assert (d["delivered"], d["channel"], d["level"]) == (True, "nats", "P1")

    def test_send_to_an_unreachable_peer_exits_1(self, fleet: Any,
                                                 env: dict[str, str]) -> None:
        """A message to a dead node, with only NATS, HTTP and the tunnel enabled, is not
        delivered: exit 1."""
        fleet.kill_daemon("n2")
        r = fleet_cli({**env, "HEALER__FLEET__CHANNELS": "nats,http,tunnel"}, "send", "n2",
                      "hello", "--json")
        assert r.returncode == 1 and json.loads(r.stdout)["delivered"] is False


class TestHelp:
    def test_help_and_bad_action(self) -> None:
        """--help documents the actions and exit codes; an unknown action exits 2."""
        ok = subprocess.run([sys.executable, "-m", "healer", "fleet", "--help"],
                            capture_output=True, text=True, timeout=30)
        assert ok.returncode == 0 and "exit codes" in ok.stdout and "heal" in ok.stdout
        bad = subprocess.run([sys.executable, "-m", "healer", "fleet", "explode"],
                             capture_output=True, text=True, timeout=30)
        assert bad.returncode == 2
