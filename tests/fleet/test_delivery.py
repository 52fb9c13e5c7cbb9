"""send_with_fallback: the channel ladder, reliability order, budget, and self-heal triggers."""

from __future__ import annotations

import json
import socket
import subprocess
from typing import Any

import pytest

from healer.config import NodeEntry
from healer.fleet import messages
from healer.fleet.channels import CHANNELS, FleetContext
from healer.fleet.delivery import (
    ChannelStats,
    Reliability,
    channel_timeout,
    order_channels,
    send_with_fallback,
)
from healer.testing.fleet import Tarpit


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class TestScores:
    def test_score_formula(self) -> None:
        """+2 for a success in the last 60 s, + ok/(ok+fail), − min(0.05 × fail, 1)."""
        assert ChannelStats().score(0) == 0
        st = ChannelStats(ok=3, fail=1, last_ok=100.0)
        assert st.score(150.0) == pytest.approx(2 + 0.75 - 0.05)
        assert st.score(161.0) == pytest.approx(0.75 - 0.05)
        assert ChannelStats(ok=0, fail=40).score(0) == pytest.approx(-1.0)

    def test_reliability_order_prefers_what_worked(self) -> None:
        """With nats failing and http working lately, reliability order puts http first;
        strict order keeps the ladder."""
        clock = Clock()
        stats = Reliability(clock)
        for _ in range(3):
            stats.record("p", "nats", False)
        stats.record("p", "http", True)
        chans = [CHANNELS[n] for n in ("nats", "http", "seed")]
        assert [c.name for c in order_channels(chans, "p", "reliability", stats)] == [
            "http", "seed", "nats"]
        assert [c.name for c in order_channels(chans, "p", "strict", stats)] == [
            "nats", "http", "seed"]
        clock.t += 61  # the recent-success bonus fades
        assert order_channels(chans, "p", "reliability", stats)[0].name == "http"

    def test_unreliable_channel_gets_half_its_timeout(self, tmp_path: Any) -> None:
        """A channel failing more than half the time gets half its timeout."""
        from healer.config import load_settings

        ctx = FleetContext.open(load_settings(env={}, overrides=[
            f"fleet.config={tmp_path / 'none.json'}"]))
        stats = Reliability()
        assert channel_timeout(ctx, CHANNELS["ssh"], "p", stats) == 8.0
        stats.record("p", "ssh", False)
        stats.record("p", "ssh", True)
        assert channel_timeout(ctx, CHANNELS["ssh"], "p", stats) == 8.0
        stats.record("p", "ssh", False)
        assert channel_timeout(ctx, CHANNELS["ssh"], "p", stats) == 4.0


def msg(to: str, type: str = "message") -> dict[str, Any]:
    return messages.make(type, to, "ops", subject=f"test {type}", body="hello",
                         **({"action": "notify"} if type == "repair" else {}))


async def open_ctx(fleet: Any, tmp_path: Any, **extra: Any) -> FleetContext:
    return FleetContext.open(fleet.settings(state_dir=str(tmp_path / "state"),
                                            results_dir=str(tmp_path / "results"), **extra))


@pytest.mark.e2e
class TestLadder:
    async def test_healthy_peer_gets_it_on_p1(self, fleet: Any, fctx: Any) -> None:
        """Everything up: delivered on NATS, nothing else tried."""
        d = await send_with_fallback(fctx, fctx.view.peer("n2"), msg("n2"),
                                     stats=Reliability(), order="strict")
        assert (d.delivered, d.channel, d.level, d.degraded) == (True, "nats", "P1", False)
        assert [a.channel for a in d.attempts if a.status != "skipped"] == ["nats"]

    async def test_nats_down_falls_to_http(self, fleet: Any, fctx: Any) -> None:
        """NATS fails → HTTP direct (P2) delivers; no self-heal needed above P3."""
        fleet.kill_nats("n2")
        d = await send_with_fallback(fctx, fctx.view.peer("n2"), msg("n2"),
                                     stats=Reliability(), order="strict")
        assert (d.delivered, d.channel, d.degraded) == (True, "http", False)
        assert d.attempts[-2].channel == "nats" and d.attempts[-2].status == "failed"

    async def test_dead_daemon_needs_p4_and_triggers_healing(self, fleet: Any,
                                                             fctx: Any) -> None:
        """Daemon dead: NATS, HTTP, tunnel and the chief's relay fail, the seed file (P4)
        delivers, and healing is asked for the channels above."""
        fleet.kill_daemon("n2")
        asked: list[tuple[str, list[str]]] = []
        d = await send_with_fallback(fctx, fctx.view.peer("n2"), msg("n2"),
                                     stats=Reliability(), order="strict",
                                     on_degraded=lambda p, chans: asked.append((p, chans)))
        assert (d.delivered, d.channel, d.level, d.degraded) == (True, "seed", "P4", True)
        assert asked == [("n2", ["nats", "http", "tunnel", "relay"])]
        assert any(p.name.endswith("-from-ops.md") for p in (fleet.fleet_dir / "n2").iterdir())

    async def test_repairs_never_travel_by_git(self, fleet: Any, tmp_path: Any) -> None:
        """With only git left, a normal message is committed (P7); a repair message is not
        delivered and git is never tried for it."""
        ctx = await open_ctx(fleet, tmp_path, **{"fleet.channels": "nats,http,git"})
        try:
            fleet.kill_daemon("n3")
            node = ctx.view.peer("n3")
            normal = await send_with_fallback(ctx, node, msg("n3"), stats=Reliability(),
                                              order="strict")
            assert (normal.delivered, normal.channel) == (True, "git")
            log = subprocess.run(["git", "-C", str(fleet.fleet_dir), "log", "--oneline", "-1"],
                                 capture_output=True, text=True, check=True).stdout
            assert "fleet: message to n3" in log
            repair = await send_with_fallback(ctx, node, msg("n3", "repair"),
                                              stats=Reliability(), order="strict")
            assert not repair.delivered
            assert "git" not in [a.channel for a in repair.attempts]
        finally:
            await ctx.aclose()

    async def test_wake_on_lan_is_sent_to_loopback_and_reported_sent(
            self, fleet: Any, tmp_path: Any) -> None:
        """WoL sends a real magic packet to the configured loopback address, reports "sent"
        (not delivered) and the ladder goes on to the next channel."""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
            listener.bind(("127.0.0.1", 0))
            listener.settimeout(5)
            ctx = await open_ctx(fleet, tmp_path, **{"fleet.channels": "http,wol,seed",
                                                     "fleet.wol_port": listener.getsockname()[1]})
            try:
                fleet.kill_daemon("n2")
                d = await send_with_fallback(ctx, ctx.view.peer("n2"), msg("n2"),
                                             stats=Reliability(), order="strict")
            finally:
                await ctx.aclose()
            packet, sender = listener.recvfrom(1024)
        assert [(a.channel, a.status) for a in d.attempts] == [
            ("http", "failed"), ("wol", "sent"), ("seed", "delivered")]
        assert packet == b"\xff" * 6 + bytes.fromhex("020000000002") * 16
        assert sender[0] == "127.0.0.1"

    async def test_budget_bounds_the_whole_send(self, fleet: Any, tmp_path: Any) -> None:
        """Against a peer that never answers, each try is cut to what is left of the budget
        and the rest are skipped; a channel that failed before gets half its timeout."""
        pit = Tarpit()
        ctx = await open_ctx(fleet, tmp_path, **{
            "fleet.channels": "http,tunnel", "fleet.send_budget_s": 1,
            "fleet.timeouts": json.dumps({"http": 1.5, "tunnel": 1.5})})
        try:
            node = NodeEntry("pit", "127.0.0.1", port=pit.port, tunnel_port=pit.port)
            stats = Reliability()
            d = await send_with_fallback(ctx, node, msg("pit"), stats=stats, order="strict")
            assert [(a.channel, a.status) for a in d.attempts] == [
                ("http", "failed"), ("tunnel", "skipped")]
            assert d.attempts[0].timeout_s == pytest.approx(1.0, abs=0.05)
            assert "budget" in d.attempts[1].detail
            d2 = await send_with_fallback(ctx, node, msg("pit"), stats=stats, order="strict",
                                          budget_s=10)
            assert [a.timeout_s for a in d2.attempts] == [0.75, 1.5]
        finally:
            await ctx.aclose()
            pit.close()

    async def test_undeliverable_emergency_goes_to_discord(self, fleet: Any,
                                                           tmp_path: Any) -> None:
        """An emergency no channel delivered is posted to the Discord webhook (scrubbed)."""
        from healer.testing.receivers import WebhookReceiver

        with WebhookReceiver() as hook:
            ctx = await open_ctx(fleet, tmp_path, **{
                "fleet.channels": "http", "notify.discord_webhook_url": hook.url + "/hook"})
            try:
                fleet.kill_daemon("n2")
                urgent = messages.make("alert", "n2", "ops", subject="disk full",
                                       body="disk full on n2", priority="emergency")
                d = await send_with_fallback(ctx, ctx.view.peer("n2"), urgent,
                                             stats=Reliability())
            finally:
                await ctx.aclose()
        assert not d.delivered and d.attempts[-1].channel == "discord"
        assert d.attempts[-1].status == "sent"
        (post,) = hook.posts
        assert "[fleet → n2] disk full" in post["body"]["content"]
