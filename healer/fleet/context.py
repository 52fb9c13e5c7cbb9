"""``FleetContext``: what every channel, agent and command works with — the settings, the
node list, this node's id, one NATS link, one HTTP client, the heartbeats heard.

``FleetContext.open(settings)`` makes one for a command or a playbook (it owns its NATS link
and closes it in ``aclose()``); the loop's fleet service keeps one for its lifetime and passes
it to the agents it runs, so they share its connection and what it has heard.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from healer.config import NodeEntry, Settings
from healer.core.git import git_async
from healer.core.nats_auth import NatsAuth
from healer.fleet.natslink import NatsLink
from healer.fleet.peers import FleetView, Heartbeats
from healer.fleet.signing import sign


class FleetContext:
    """What channels work with: settings, the node list, this node, one NATS link, one HTTP
    client, heartbeats. ``open()`` makes one for a command or a playbook; the loop's fleet
    service owns a long-lived one."""

    def __init__(self, settings: Settings, view: FleetView, *, nats: NatsLink | None = None,
                 heartbeats: Heartbeats | None = None):
        self.settings = settings
        self.view = view
        self.heartbeats = heartbeats or Heartbeats.for_settings(settings)
        self._nats = nats
        self._own_nats = nats is None
        self._http: Any = None
        self._git: tuple[float, bool] | None = None
        self._git_lock = asyncio.Lock()

    @classmethod
    def open(cls, settings: Settings, **kw: Any) -> FleetContext:
        return cls(settings, FleetView(settings), **kw)

    @property
    def self_id(self) -> str:
        return self.view.self_id

    @property
    def fleet(self) -> Any:
        return self.settings.fleet

    @property
    def fleet_dir(self) -> Path:
        return self.settings.fleet_path

    @property
    def work_dir(self) -> Path:
        """This healer's own fleet files (tunnel logs) under the state dir."""
        return self.settings.state_path / "fleet"

    def timeout(self, channel: str) -> float:
        return float(self.fleet.timeouts.get(channel, 3.0))

    def in_fleet(self, node: NodeEntry) -> bool:
        return self.view.exists and node.node_id in self.view.nodes

    def nats(self) -> NatsLink:
        if self._nats is None:
            self._nats = NatsLink(self.view.nats_url() if self.view.exists
                                  else self.settings.store.nats_urls[0],
                                  name=f"healer-{self.self_id}",
                                  auth=NatsAuth.from_fleet(self.fleet))
        self._nats.start()
        return self._nats

    @property
    def http(self) -> Any:
        import httpx

        if self._http is None:
            # No keep-alive: a pooled connection to a daemon that was just restarted would
            # fail the next probe for the wrong reason. Proxies never apply (loopback/LAN).
            self._http = httpx.AsyncClient(trust_env=False, limits=httpx.Limits(
                max_connections=None, max_keepalive_connections=0))
        return self._http

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.fleet.token}"} if self.fleet.token else {}

    def signed(self, msg: dict[str, Any]) -> dict[str, Any]:
        """``msg`` signed for the network (a fresh nonce per send). Without a fleet secret it
        goes unsigned, and the node refuses it with ``message refused: unsigned``."""
        return sign(msg, self.fleet.secret, "message") if self.fleet.secret else msg

    async def git_repo(self) -> bool:
        """Whether the fleet dir is in a git work tree (checked once a minute)."""
        async with self._git_lock:  # one check for a whole fan-out, not one per peer
            now = time.monotonic()
            if self._git is None or now - self._git[0] > 60:
                res = await git_async(self.fleet_dir, "rev-parse", "--is-inside-work-tree",
                                      timeout=self.timeout("git"))
                self._git = (now, res.ok and res.stdout.strip() == "true")
            return self._git[1]

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._own_nats and self._nats is not None:
            await self._nats.close()
            self._nats = None
