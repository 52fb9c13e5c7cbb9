"""The fault suite: on a real local fleet (real NATS, real sshd), each fault is healed by the
right agent; a fault that cannot be healed ends in exactly three attempts and one escalation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fleet_helpers import human_seeds, result_files, results

from healer.core.store import FileStore
from healer.fleet.channels import probe_peer
from healer.fleet.heal import HealLoop

pytestmark = pytest.mark.e2e


async def heal(fctx: Any, settings: Any, peer: str) -> Any:
    loop = HealLoop(fctx, FileStore(settings.state_path))
    return loop, await loop.heal(peer, "fault test")


class TestFaultsAreHealed:
    async def test_killed_daemon_is_restarted(self, fleet: Any, fleet_settings: Any,
                                              fctx: Any) -> None:
        """A killed node daemon is brought back by the daemon restarter over SSH."""
        old_pid = fleet.pid("n2")
        fleet.kill_daemon("n2")
        _, ep = await heal(fctx, fleet_settings, "n2")
        assert ep.state == "healed" and ep.agents == ["daemon-restarter"]
        assert {"http", "nats"} <= set(ep.broken)
        done = results(fleet_settings, "daemon", "n2")
        assert [r["status"] for r in done] == ["healed"]
        assert any("restart.sh over SSH: exit 0" in a for a in done[0]["actions_taken"])
        assert fleet.pid("n2") not in (None, old_pid)
        assert (await probe_peer(fctx, fctx.view.peer("n2"))).ok

    async def test_killed_tunnel_is_reestablished(self, fleet: Any, fleet_settings: Any,
                                                  fctx: Any) -> None:
        """A killed SSH tunnel is started again (ssh -f -N -L) and verified through it."""
        fleet.kill_tunnel("n3")
        _, ep = await heal(fctx, fleet_settings, "n3")
        assert ep.state == "healed" and ep.agents == ["tunnel-establisher"]
        assert ep.broken == ["tunnel"]
        done = results(fleet_settings, "tunnel", "n3")[-1]
        assert done["status"] == "healed" and done["channels"]["tunnel"]["ok"]
        assert fleet.health("n3", "127.0.0.1", fleet.node("n3").tunnel_port) is not None

    async def test_moved_node_gets_its_config_updated(self, fleet: Any, fleet_settings: Any,
                                                      fctx: Any) -> None:
        """A node on a new address and port is found from its heartbeat; the config is
        rewritten atomically and the stale tunnel follows."""
        before = json.loads(fleet.config_path.read_text())
        host, port = fleet.move_node("n3")
        _, ep = await heal(fctx, fleet_settings, "n3")
        assert ep.state == "healed"
        assert ep.agents[0] == "config-updater" and "daemon-restarter" not in ep.agents
        after = json.loads(fleet.config_path.read_text())
        assert (after["nodes"]["n3"]["host"], after["nodes"]["n3"]["port"]) == (host, port)
        assert after["nodes"]["n3"]["lan_ip"] == host
        before["nodes"]["n3"].update(host=host, port=port, lan_ip=host)
        assert after == before  # nothing else changed
        change = results(fleet_settings, "config", "n3")[0]
        assert change["data"]["new_host"] == host and change["data"]["source"] == "its heartbeat"

    async def test_killed_nats_server_is_restarted(self, fleet: Any, fleet_settings: Any,
                                                   fctx: Any) -> None:
        """A node whose NATS server died gets it restarted by the NATS reconnector."""
        fleet.kill_nats("n2")
        _, ep = await heal(fctx, fleet_settings, "n2")
        assert ep.state == "healed" and ep.agents == ["nats-reconnector"]
        assert ep.broken == ["nats"]
        actions = results(fleet_settings, "nats", "n2")[-1]["actions_taken"]
        assert any("nats-restart.sh over SSH: exit 0" in a for a in actions)

    async def test_dropped_route_is_restored(self, fleet: Any, fleet_settings: Any,
                                             fctx: Any) -> None:
        """A NATS server restarted without its cluster routes: its daemon is connected, pings
        do not arrive; the reconnector restarts the server with its routes."""
        fleet.drop_route("n3")
        _, ep = await heal(fctx, fleet_settings, "n3")
        assert ep.state == "healed" and ep.agents == ["nats-reconnector"]
        actions = results(fleet_settings, "nats", "n3")[-1]["actions_taken"]
        assert "the daemon says its NATS link is up" in actions

    async def test_unwritable_inbox_is_repaired(self, fleet: Any, fleet_settings: Any,
                                                fctx: Any) -> None:
        """A file where the seed inbox should be is moved aside and the inbox recreated."""
        box = fleet.block_inbox("n2")
        _, ep = await heal(fctx, fleet_settings, "n2")
        assert ep.state == "healed" and ep.agents == ["inbox-repairer"]
        assert box.is_dir()
        kept = list(box.parent.glob(".n2.blocked-*"))
        assert kept and kept[-1].read_text() == "not an inbox\n"


class TestUnhealable:
    async def test_three_attempts_then_one_escalation(self, fleet: Any, fleet_settings: Any,
                                                      fctx: Any) -> None:
        """A restart command that fails: exactly three attempts, then one human seed file
        naming the peer, the channels, every attempt and the commands to run."""
        seen = set(human_seeds(fleet_settings))
        fleet.break_restart("n3", "unit file missing")
        _, ep = await heal(fctx, fleet_settings, "n3")
        assert ep.state == "escalated"
        attempts = results(fleet_settings, "daemon", "n3")
        assert [a["status"] for a in attempts] == ["failed"] * 3
        assert all("unit file missing" in a["error"] for a in attempts)
        new = [p for p in human_seeds(fleet_settings) if p not in seen]
        assert len(new) == 1 and str(new[0]) == ep.escalation
        text = new[0].read_text()
        assert "type: escalation" in text and "Target:** `n3`" in text
        assert "http" in text and "nats" in text
        assert text.count("daemon-restarter (attempt ") == 3
        assert "unit file missing" in text
        assert f"-- {fleet.node('n3').host} {fleet.node('n3').dir}/restart.sh" in text
        assert "healer fleet heal n3" in text

    async def test_cooldown_blocks_a_repair_storm(self, fleet: Any, fleet_settings: Any,
                                                  fctx: Any) -> None:
        """After an escalation the peer is left alone: requests are refused, no new runs."""
        fleet.break_restart("n3")
        loop, ep = await heal(fctx, fleet_settings, "n3")
        assert ep.state == "escalated"
        runs = len(result_files(fleet_settings, "daemon", "n3"))
        assert "cooling down" in loop.blocked("n3")
        assert [loop.request("n3", "storm") for _ in range(20)] == [False] * 20
        fresh = HealLoop(fctx, FileStore(fleet_settings.state_path))  # also across restarts
        assert fresh.request("n3", "storm") is False
        assert len(result_files(fleet_settings, "daemon", "n3")) == runs == 3

    async def test_interactive_session_gets_a_notice_not_a_restart(
            self, fleet: Any, fleet_settings: Any, fctx: Any) -> None:
        """While a person's interactive session is active on the node, its daemon is not
        restarted: a notice is left in its inbox and a person is told once."""
        fleet.set_interactive("n2")
        fleet.kill_daemon("n2")
        seen = set((fleet.fleet_dir / "n2").glob("*.md"))
        _, ep = await heal(fctx, fleet_settings, "n2")
        assert ep.state == "escalated" and len(ep.attempts) == 1
        assert results(fleet_settings, "daemon", "n2")[0]["data"]["interactive_session"]
        assert fleet.pid("n2") is None
        notices = [p for p in (fleet.fleet_dir / "n2").glob("*.md") if p not in seen]
        notices += list((fleet.fleet_dir / "n2" / "archive").glob("*.md"))
        assert any("type: notice" in p.read_text() for p in notices)


class TestWhatIsNotAnAgentsJob:
    async def test_relay_waits_for_the_chief(self, fleet: Any, fleet_settings: Any,
                                             fctx: Any) -> None:
        """With the chief down, a worker's relay channel is broken but nothing is run for the
        worker: the episode is deferred to the chief's own."""
        fleet.kill_daemon("n1")
        _, ep = await heal(fctx, fleet_settings, "n2")
        assert ep.state == "deferred" and ep.attempts == [] and ep.broken == ["relay"]

    async def test_a_person_fixing_it_ends_the_cooldown(self, fleet: Any, fleet_settings: Any,
                                                        fctx: Any) -> None:
        """After an escalation, a person repairs the restart command and heals by hand: the
        peer is no longer left alone."""
        fleet.break_restart("n3")
        loop, ep = await heal(fctx, fleet_settings, "n3")
        assert ep.state == "escalated" and loop.cooling("n3") > 0
        fleet.repair_restart("n3")
        again = await loop.heal("n3", "healer fleet heal")
        assert again.state == "healed" and loop.cooling("n3") == 0 and loop.blocked("n3") == ""


class TestMasterHealer:
    async def test_master_healer_playbook_heals_every_peer(self, fleet: Any,
                                                           fleet_settings: Any) -> None:
        """`master-healer` run as an agent heals two faults on two peers in one run."""
        from healer.agents import AgentTask, PlaybookExecutor

        fleet.kill_tunnel("n3")
        fleet.block_inbox("n2")
        outcome = await PlaybookExecutor(fleet_settings).run(AgentTask("master-healer", "fleet"))
        assert outcome.status == "healed", outcome.result
        assert outcome.result["channels"]["n3/tunnel"]["ok"]
        assert outcome.result["channels"]["n2/seed"]["ok"]
        assert any(a.startswith("n3: healed") for a in outcome.result["actions_taken"])
