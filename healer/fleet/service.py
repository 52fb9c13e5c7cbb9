"""The fleet capability inside ``python -m healer.loop``.

Two periodic jobs, each starting its work in the background so the loop's other jobs never
wait on a slow probe:

- **sweep** (every ``fleet.heal_interval_s``): probe every channel of every peer at once,
  record the picture (``GET /api/v1/fleet``, ``healer fleet status``), and start a healing
  episode for each peer with a broken channel (``healer.fleet.heal``);
- **watchdog** (every ``fleet.watchdog_interval_s``, from ``fleet.watchdog_start_s`` after
  boot): heartbeat ages → the repair ladder for stale peers (``healer.fleet.repair``),
  re-reading addresses, alerts to the chief — all rate-limited per peer.

It also listens to every peer's heartbeat on NATS, re-probes as soon as a healing agent's
result lands on the results bus, and heals the channels above whenever a message of its
needed P3 or later. Heartbeats count only when signed with ``fleet.secret``; what is refused
is counted (``healer_fleet_refused_total{kind, reason}``). Without a secret the service does
not start (a ``ConfigError`` naming ``fleet.secret``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from pathlib import Path
from typing import Any

from healer.config import Settings
from healer.core.store import Store
from healer.fleet import messages
from healer.fleet.channels import FleetContext, PeerProbe, probe_fleet
from healer.fleet.delivery import Delivery, Reliability, send_with_fallback
from healer.fleet.diagnosis import plan
from healer.fleet.heal import RESULT_KINDS, HealLoop
from healer.fleet.natslink import HEARTBEATS
from healer.fleet.peers import FleetView, Heartbeats
from healer.fleet.repair import Repairer
from healer.fleet.signing import Refusals, Verifier, require_secret
from healer.fleet.watchdog import ALERT_CHIEF, READDRESS, REPAIR_HTTP, REPAIR_NATS, Watchdog

log = logging.getLogger(__name__)

STATUS = "fleet-status"


class FleetService:
    name = "fleet"

    def __init__(self, settings: Settings, store: Store, *, metrics: Any = None,
                 dispatcher: Any = None):
        self.settings = settings
        self.store = store
        self.view = FleetView(settings)
        self.refusals = Refusals(hook=_refusal_counter(metrics))
        self.heartbeats = Heartbeats(Verifier(require_secret(settings.fleet.secret),
                                              refusals=self.refusals))
        self.ctx = FleetContext(settings, self.view, heartbeats=self.heartbeats)
        self.reliability = Reliability()
        self.healer = HealLoop(self.ctx, store, metrics=metrics, dispatcher=dispatcher)
        self.watchdog = Watchdog(settings.fleet)
        self.repairer = Repairer(self.ctx, store, stats=self.reliability,
                                 run_agent=self.healer.run_agent,
                                 running=lambda p: p in self.healer.active,
                                 busy=self.healer.busy_peers, metrics=metrics)
        self.probes: dict[str, PeerProbe] = {}
        self.findings: dict[str, dict[str, Any]] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=200)
        # The delivery ladder's latest choices (which channel each send landed on, and what
        # it tried first): the dashboard's fleet view shows them.
        self.deliveries: deque[dict[str, Any]] = deque(maxlen=50)
        self.healer.listen(self.events.append)
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._ladders: set[asyncio.Task[Any]] = set()

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self.healer._loop = asyncio.get_running_loop()
        await self.ctx.nats().subscribe(HEARTBEATS, self._on_heartbeat)
        log.info("fleet: %d peer(s) from %s; NATS %s", len(self.view.peers), self.view.path,
                 self.ctx.nats().url)

    async def stop(self) -> None:
        for task in [*self._tasks.values(), *self._ladders]:
            task.cancel()
        for task in [*self._tasks.values(), *self._ladders]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.healer.stop()
        await self.ctx.aclose()

    def on_result(self, result: Any) -> None:
        """Results-bus subscriber (bus thread): wake the episode waiting on it."""
        if result.kind in RESULT_KINDS:
            self.healer.result_landed(result.kind, result.target,
                                      str(result.data.get("run_id") or ""), result.status,
                                      result.epoch)

    async def _on_heartbeat(self, m: Any) -> None:
        with contextlib.suppress(ValueError):
            data = json.loads(m.data)
            if isinstance(data, dict) and data.get("nodeId") != self.view.self_id:
                self.heartbeats.record(data)

    def _background(self, name: str, coro: Any) -> None:
        running = self._tasks.get(name)
        if running is not None and not running.done():
            coro.close()
            return
        self._tasks[name] = asyncio.create_task(coro, name=f"fleet-{name}")

    # -- sweep -----------------------------------------------------------------------------

    def sweep(self) -> None:
        """Periodic job: probe everything and heal what is broken (in the background)."""
        self._background("sweep", self.sweep_once())

    async def sweep_once(self) -> dict[str, PeerProbe]:
        peers = self.view.peers
        found = await probe_fleet(self.ctx, peers)
        self.probes = found
        for name, probe in found.items():
            fix = plan(probe, announced_elsewhere=self.healer._moved(self.view.peer(name)))
            if not probe.ok and (fix.repairs or fix.unrepairable):
                self.healer.request(name, f"probe found {', '.join(probe.broken)} broken", probe)
        self._save_status()
        return found

    # -- watchdog --------------------------------------------------------------------------

    def watch(self) -> None:
        self._background("watchdog", self.watch_once())

    async def watch_once(self) -> None:
        peers = [p.node_id for p in self.view.peers]
        for finding in self.watchdog.check(peers, self.heartbeats.age):
            self.findings[finding.peer] = finding.to_dict()
            for action in finding.actions:
                await self._act(finding.peer, action, finding.state)

    async def _act(self, peer: str, action: str, state: str) -> None:
        node = self.view.peer(peer)
        if action in (REPAIR_NATS, REPAIR_HTTP):
            if action == REPAIR_HTTP:
                return  # one ladder covers both: it ends with the daemon restart
            task = asyncio.create_task(self.repairer.repair_with_escalation(
                node, problem=f"heartbeat {state}", diagnosed_at=time.time()))
            self._ladders.add(task)
            task.add_done_callback(self._ladders.discard)
        elif action == READDRESS:
            self.view.load(force=True)
            self.healer.request(peer, "heartbeat silent: re-reading its address")
        elif action == ALERT_CHIEF:
            chief = self.view.chief
            if chief is None or chief.node_id in (peer, self.view.self_id):
                return
            age = self.heartbeats.age(peer)
            msg = messages.make("alert", chief.node_id, self.view.self_id, priority="high",
                                subject=f"{peer} silent for {age or 0:.0f} s",
                                body=f"healer has not heard {peer} for {age or 0:.0f} s.")
            await self.send(chief.node_id, msg)

    # -- sending ---------------------------------------------------------------------------

    async def send(self, peer: str, msg: dict[str, Any], *, order: str | None = None) -> Delivery:
        """send_with_fallback; delivery on P3+ starts healing the channels above."""
        node = self.view.peer(peer)

        def degraded(name: str, failed: list[str]) -> None:
            self.healer.request(name, f"a message needed a slow channel; {', '.join(failed)} "
                                "failed")

        delivery = await send_with_fallback(self.ctx, node, msg, stats=self.reliability,
                                            order=order, on_degraded=degraded)
        self.deliveries.append({"at": time.time(), **delivery.to_dict()})
        return delivery

    # -- status ----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        peers: dict[str, Any] = {}
        for node in self.view.peers:
            name = node.node_id
            ep = self.healer.episodes.get(name)
            probe = self.probes.get(name)
            peers[name] = {
                "host": node.host, "port": node.port,
                "heartbeat_age_s": None if self.heartbeats.age(name) is None else
                round(self.heartbeats.age(name) or 0.0, 1),
                "watchdog": self.findings.get(name, {}).get("state", "unknown"),
                "probe": probe.to_dict() if probe else None,
                "healing": name in self.healer.active,
                "cooldown_s": round(self.healer.cooling(name), 1),
                "cooldowns": {k: round(v, 1) for k, v in self.healer.cooldowns(name).items()},
                "episode": ep.to_dict() if ep else None,
            }
        return {"node": self.view.self_id, "config": str(self.view.path), "at": time.time(),
                "nats": {"url": self.ctx.nats().url, "connected": self.ctx.nats().connected},
                "peers": peers, "reliability": self.reliability.snapshot(),
                "events": list(self.events)[-50:], "deliveries": list(self.deliveries)[-20:],
                "refused": self.refusals.snapshot()}

    def _save_status(self) -> None:
        try:
            self.store.put(STATUS, "latest", json.loads(json.dumps(self.status(), default=str)))
        except Exception:
            log.exception("could not record the fleet status")


def _refusal_counter(metrics: Any) -> Any:
    counter = getattr(metrics, "fleet_refused", None)
    if counter is None:
        return None
    return lambda kind, reason: counter.labels(kind=kind, reason=reason).inc()


def create_service(healer: Any) -> FleetService | None:
    """Loop factory: the fleet service when a fleet config exists."""
    settings: Settings = healer.settings
    if not Path(settings.fleet.config).expanduser().is_file():
        log.debug("no fleet config at %s: fleet healing is off", settings.fleet.config)
        return None
    svc = FleetService(settings, healer.store, metrics=healer.extras.get("metrics"),
                       dispatcher=healer.dispatcher)
    healer.bus.subscribe(svc.on_result)
    healer.every("fleet-sweep", settings.fleet.heal_interval_s, svc.sweep)
    healer.every("fleet-watchdog", settings.fleet.watchdog_interval_s, svc.watch)
    healer.extras["fleet"] = svc
    healer.extras.setdefault("api_services", {})["fleet"] = svc
    return svc
