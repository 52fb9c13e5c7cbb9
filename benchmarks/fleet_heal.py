"""Fleet healing speed on a real local fleet (real NATS, real sshd, three node daemons).

1. Time to heal per fault kind: healer's loop (dispatch the agent, re-probe as soon as its
   result lands) against the naive loop of the original seed (dispatch, wait a fixed 30 s,
   re-probe). Targets: daemon down <= 15 s, tunnel dead <= 10 s, each at least 2x faster
   than the naive loop.
2. Time to heal with detection: the fleet service's sweep finds the fault on its own.
3. Probe fan-out: 50 peers x every channel, every one of them a tarpit that accepts and never
   answers (each probe runs into its timeout). Target: <= 1.5x the largest single channel
   timeout, not 50 x channels x timeout.

Each figure is printed beside its target; exit 1 when one is missed. ``--smoke``: one run of
"daemon down", no naive loop, no detection run, 5 peers in the fan-out.

    .venv/bin/python benchmarks/fleet_heal.py [--runs 3] [--no-naive] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import Bench, add_smoke_flag, bench_for

from healer.core.store import FileStore
from healer.fleet.channels import FleetContext, probe_fleet, probe_peer
from healer.fleet.diagnosis import plan
from healer.fleet.heal import HealLoop
from healer.fleet.service import FleetService
from healer.testing.fleet import LocalFleet, Tarpit

FAULTS = {  # kind → (LocalFleet method, peer)
    "daemon down": ("kill_daemon", "n2"),
    "tunnel dead": ("kill_tunnel", "n3"),
    "NATS server down": ("kill_nats", "n2"),
    "node moved": ("move_node", "n3"),
    "seed inbox unwritable": ("block_inbox", "n2"),
}
TARGETS = {"daemon down": 15.0, "tunnel dead": 10.0}
NAIVE_WAIT_S = 30.0


async def healer_loop(fleet: LocalFleet, settings: Any, fault: str) -> float:
    """Inject, then run one healing episode; seconds until every channel works."""
    method, peer = FAULTS[fault]
    await asyncio.to_thread(getattr(fleet, method), peer)
    ctx = FleetContext.open(settings)
    try:
        start = time.monotonic()
        ep = await HealLoop(ctx, FileStore(settings.state_path)).heal(peer, "benchmark")
        took = time.monotonic() - start
        if ep.state != "healed":
            raise RuntimeError(f"{fault}: {ep.state}")
        return took
    finally:
        await ctx.aclose()


async def naive_loop(fleet: LocalFleet, settings: Any, fault: str) -> float:
    """The seed's loop: diagnose, spawn the agent, wait(30 s), re-probe — until healthy."""
    method, peer = FAULTS[fault]
    await asyncio.to_thread(getattr(fleet, method), peer)
    ctx = FleetContext.open(settings)
    loop = HealLoop(ctx, FileStore(settings.state_path))
    spawned: set[asyncio.Future[Any]] = set()
    try:
        start = time.monotonic()
        for _ in range(5):
            probe = await probe_peer(ctx, ctx.view.peer(peer))
            if probe.ok:
                return time.monotonic() - start
            for r in plan(probe).repairs:
                from healer.agents.task import AgentTask

                spawned.add(asyncio.ensure_future(loop.run_agent(AgentTask(
                    r.agent, peer, kind=r.kind, timeout_s=30,
                    context=loop._context(ctx.view.peer(peer), probe, r.why)))))
            await asyncio.sleep(NAIVE_WAIT_S)
        raise RuntimeError(f"naive loop did not heal {fault}")
    finally:
        await asyncio.gather(*spawned, return_exceptions=True)
        await ctx.aclose()


async def with_detection(fleet: LocalFleet, settings: Any, fault: str,
                         sweep_s: float) -> float:
    """The loop's fleet service sweeping every ``sweep_s``: injection → healthy again."""
    svc = FleetService(settings, FileStore(settings.state_path))
    await svc.start()
    try:
        method, peer = FAULTS[fault]
        start = time.monotonic()
        await asyncio.to_thread(getattr(fleet, method), peer)
        while time.monotonic() - start < 120:
            await svc.sweep_once()
            ep = svc.healer.episodes.get(peer)
            if ep and ep.state == "healed" and svc.probes[peer].ok:
                return time.monotonic() - start
            await asyncio.sleep(sweep_s)
        raise RuntimeError(f"not healed with detection: {fault}")
    finally:
        await svc.stop()


async def fan_out(fleet: LocalFleet, root: Path, peers: int) -> dict[str, float]:
    """``peers`` tarpit peers × every channel, probed at once."""
    import nats

    pit = Tarpit()
    nodes = {f"p{i:02d}": {"host": "127.0.0.1", "port": pit.port, "ssh_port": pit.port,
                           "tunnel_port": pit.port, "user": fleet.user,
                           "nats_url": fleet.node("n1").nats_url} for i in range(peers)}
    nodes["chief"] = {"host": "127.0.0.1", "port": pit.port, "role": "chief"}
    cfg = root / "fanout.json"
    cfg.write_text(json.dumps({"chief": {"nodeId": "chief"}, "nodes": nodes}))
    settings = fleet.settings(**{"fleet.config": str(cfg), "state_dir": str(root / "fo"),
                                 "fleet.timeouts": json.dumps(
                                     {"nats": 2.0, "http": 3.0, "tunnel": 3.0, "relay": 3.0,
                                      "seed": 2.0, "ssh": 8.0, "wol": 3.0, "git": 10.0})})
    async def never_answer(m: Any) -> None:
        return None

    silent = await nats.connect(fleet.node("n1").nats_url, user=fleet.nats_user,
                                password=fleet.nats_password)
    await silent.subscribe("fleet.*.ping", cb=never_answer)
    ctx = FleetContext.open(settings)
    try:
        await ctx.nats().wait_connected(5)
        targets = [n for n in ctx.view.peers if n.node_id != "chief"]
        start = time.monotonic()
        found = await probe_fleet(ctx, targets)
        took = time.monotonic() - start
    finally:
        await ctx.aclose()
        await silent.close()
        pit.close()
    probed = {c for p in found.values() for c in p.channels}
    timed_out = sum(1 for p in found.values() for o in p.channels.values() if not o.ok)
    largest = max(settings.fleet.timeouts[c] for c in probed if
                  any(not p.channels[c].ok for p in found.values() if c in p.channels))
    serial = sum(settings.fleet.timeouts[c] for p in found.values() for c in p.channels
                 if not p.channels[c].ok)
    return {"seconds": took, "probes": sum(len(p.channels) for p in found.values()),
            "failed": timed_out, "largest_timeout": largest, "serial_estimate": serial}


def _stats(xs: list[float]) -> str:
    return (f"median {statistics.median(xs):5.2f} s  min {min(xs):5.2f}  max {max(xs):5.2f}"
            f"  (n={len(xs)})")


async def main(bench: Bench, runs: int, naive: bool, peers: int, faults: list[str],
               detection: bool = True) -> int:
    with tempfile.TemporaryDirectory(prefix="healer-bench-fleet-") as tmp:
        root = Path(tmp)
        fleet = await asyncio.to_thread(LocalFleet(root / "fleet").start)
        try:
            settings = fleet.settings(**{"fleet.heal_wait_s": NAIVE_WAIT_S})
            print(f"fleet up: 3 nodes, NATS cluster, sshd on :{fleet.ssh_port}\n")
            print(f"1. time to heal, from the start of healing (healer: re-probe when the "
                  f"agent's result lands; naive: fixed {NAIVE_WAIT_S:g} s wait)")
            ours: dict[str, list[float]] = {}
            for fault in faults:
                ours[fault] = []
                for _ in range(runs):
                    ours[fault].append(await healer_loop(fleet, settings, fault))
                    await asyncio.to_thread(fleet.reset)
                print(f"   {fault:<22} healer {_stats(ours[fault])}")
            for fault, target in TARGETS.items():
                if fault not in ours:
                    continue
                med = statistics.median(ours[fault])
                bench.judge(f"{fault}: time to heal, median", med, "s", at_most=target)
                if naive:
                    took = await naive_loop(fleet, settings, fault)
                    await asyncio.to_thread(fleet.reset)
                    print(f"   {fault:<22} naive  {took:5.2f} s")
                    bench.judge(f"{fault}: healer's speed-up over the naive loop", took / med,
                                "×", at_least=2)
            print("\n2. time to heal including detection (the loop's sweep, every 2 s)")
            for fault in [f for f in ("daemon down", "tunnel dead") if f in faults and detection]:
                took = await with_detection(fleet, fleet.settings(), fault, 2.0)
                await asyncio.to_thread(fleet.reset)
                print(f"   {fault:<22} {took:5.2f} s from injection to healthy")
            print(f"\n3. probe fan-out: {peers} peers x every channel, each a tarpit")
            fo = await fan_out(fleet, root, peers)
            print(f"   {fo['probes']:.0f} probes ({fo['failed']:.0f} ran into their timeout) in "
                  f"{fo['seconds']:.2f} s; largest channel timeout {fo['largest_timeout']:g} s; "
                  f"one after another it would take ~{fo['serial_estimate']:.0f} s")
            bench.judge("fan-out time / largest channel timeout",
                        fo["seconds"] / fo["largest_timeout"], "×", at_most=1.5)
        finally:
            await asyncio.to_thread(fleet.stop)
    return bench.finish()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="healing runs per fault kind")
    ap.add_argument("--no-naive", action="store_true", help="skip the 30 s naive loop runs")
    ap.add_argument("--peers", type=int, default=50, help="peers in the fan-out probe")
    add_smoke_flag(ap, "one daemon-down run, no naive loop or detection run, 5 peers")
    a = ap.parse_args()
    if a.smoke:
        a.runs, a.no_naive, a.peers = 1, True, 5
    raise SystemExit(asyncio.run(main(bench_for(__file__, a), a.runs, not a.no_naive, a.peers,
                                      ["daemon down"] if a.smoke else list(FAULTS),
                                      detection=not a.smoke)))
