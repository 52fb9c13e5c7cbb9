"""The node daemon (``healer node``), one per machine: the fleet's nerve ending.

- HTTP (starlette + uvicorn) on the node's address, port 8855 by default:
  ``GET /health`` → ``{nodeId, status, uptime_s, natsUrl, nats_connected, peers{<id>:
  {heartbeat_age_s, host, port}}, channel_health, recent_errors, interactive_session, …}``;
  ``POST /message`` → a fleet message for this node (``delivered``), or, on the chief, for
  another node (``relayed``: P3).
- NATS: answers ``fleet.<node>.message`` and ``fleet.<node>.ping``, publishes
  ``fleet.<node>.heartbeat`` every ``fleet.heartbeat_s`` and listens to everyone else's.
- A seed-file inbox, ``<fleet dir>/<node>/``: each file is read as a message and archived.
- Repair messages (``type: repair``) carry an allow-listed ``payload.action``: ``notify``
  (log it), ``reconnect_nats`` (drop and redo the NATS connection), ``self_check`` (recreate
  the inbox, reconnect NATS if down, heartbeat now). Nothing else is ever executed.
- Who said it: heartbeats it publishes are signed with ``fleet.secret``; heartbeats and
  messages it receives over NATS or HTTP count only with a valid, fresh, unreplayed signature
  (``healer.fleet.signing``) — the rest is counted in ``/health``'s ``refused`` and logged at
  most once a minute per reason. ``GET /identity?nonce=…`` answers the identity challenge of a
  config updater that found this node at a new address. No secret, no daemon (exit 2).
- ``interactive_session`` is true while the node's interactive marker file exists
  (``interactive_marker`` in its config entry, else ``fleet.interactive_marker``, relative to
  the home directory): a person is working there, so healer will not restart this daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import re
import socket
import time
from collections import deque
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from healer import __version__
from healer.config import NodeEntry, Settings
from healer.core import safedirs, seeds
from healer.core.nats_auth import NatsAuth
from healer.errors import HealerError, RejectedFile, SignatureError, UsageError
from healer.fleet import messages
from healer.fleet.channels import CHANNELS, FleetContext, Outcome
from healer.fleet.natslink import HEARTBEATS, NatsLink, subject
from healer.fleet.peers import FleetView, Heartbeats
from healer.fleet.signing import Refusals, Verifier, prove, require_secret, sign

log = logging.getLogger(__name__)

# Tunnel ports belong to the machine that runs healer, so the chief relays over these two.
RELAY_CHANNELS = ("nats", "http")
ACTIONS = ("notify", "reconnect_nats", "self_check")
NONCE = re.compile(r"[A-Za-z0-9_-]{16,128}")


class NodeDaemon:
    """One node's daemon; ``await start()`` / ``await stop()``."""

    def __init__(self, settings: Settings, *, node_id: str | None = None,
                 host: str | None = None, port: int | None = None, nats_url: str | None = None,
                 pid_file: str | Path | None = None):
        self.settings = settings
        self.secret = require_secret(settings.fleet.secret)
        self.view = FleetView(settings, self_id=node_id or settings.node)
        self.node_id = self.view.self_id
        entry = self._entry()
        self.host = host or (entry.host if entry else "127.0.0.1")
        self.port = port if port is not None else (entry.port if entry else
                                                   settings.fleet.node_port)
        url = nats_url or (entry.nats_url if entry and entry.nats_url else "")
        self.nats_url = url or (self.view.nats_url() if self.view.exists
                                else settings.store.nats_urls[0])
        self.pid_file = Path(pid_file) if pid_file else None
        self.started = time.time()
        self.refusals = Refusals()
        self.heartbeats = Heartbeats(Verifier(self.secret, refusals=self.refusals))
        self.verifier = Verifier(self.secret, refusals=self.refusals)  # fleet messages
        self.link = NatsLink(self.nats_url, name=f"node-{self.node_id}", reconnect_wait=0.5,
                             auth=NatsAuth.from_fleet(settings.fleet))
        self.ctx = FleetContext(settings, self.view, nats=self.link, heartbeats=self.heartbeats)
        self.recent_errors: deque[dict[str, Any]] = deque(maxlen=20)
        self.received: deque[dict[str, Any]] = deque(maxlen=100)
        self.received_count = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._actions: set[asyncio.Task[None]] = set()
        self._server: Any = None
        self._serve_task: asyncio.Task[None] | None = None
        self.url = ""

    def _entry(self) -> NodeEntry | None:
        try:
            return self.view.me if self.view.exists else None
        except UsageError:
            return None

    # -- state ---------------------------------------------------------------------------

    @property
    def inbox(self) -> Path:
        return self.settings.fleet_path / self.node_id

    @property
    def marker(self) -> Path:
        entry = self._entry()
        raw = (entry.interactive_marker if entry and entry.interactive_marker
               else self.settings.fleet.interactive_marker)
        path = Path(raw).expanduser()
        return path if path.is_absolute() else Path.home() / path

    @property
    def interactive_session(self) -> bool:
        return self.marker.exists()

    @property
    def is_chief(self) -> bool:
        try:
            chief = self.view.chief if self.view.exists else None
        except UsageError:
            return False
        return chief is not None and chief.node_id == self.node_id

    def error(self, text: str) -> None:
        self.recent_errors.append({"at": seeds.now_iso(), "error": text[:500]})
        log.warning("node %s: %s", self.node_id, text)

    def _inbox_health(self) -> dict[str, Any]:
        box = self.inbox
        if box.is_symlink() or (box.exists() and not box.is_dir()):
            return {"ok": False, "detail": f"{box} is not a directory"}
        if not box.is_dir():
            return {"ok": False, "detail": f"{box} does not exist"}
        if not os.access(box, os.W_OK | os.X_OK):
            return {"ok": False, "detail": f"{box} is not writable"}
        return {"ok": True, "detail": f"{box} writable"}

    def health(self) -> dict[str, Any]:
        nats_ok = self.link.connected
        channel_health = {
            "http": {"ok": True, "detail": f"serving on {self.url}"},
            "nats": {"ok": nats_ok, "detail": f"connected to {self.nats_url}" if nats_ok else
                     f"not connected to {self.nats_url}: {self.link.last_error or 'connecting'}"},
            "seed": self._inbox_health(),
        }
        peers: dict[str, Any] = {}
        try:
            known = [n.node_id for n in self.view.peers] if self.view.exists else []
        except UsageError:
            known = []
        seen = self.heartbeats.snapshot()
        for name in sorted(set(known) | set(seen)):
            peers[name] = seen.get(name, {"heartbeat_age_s": None})
        ok = all(c["ok"] for c in channel_health.values())
        return {
            "nodeId": self.node_id, "status": "ok" if ok else "degraded",
            "uptime_s": round(time.time() - self.started, 1), "natsUrl": self.nats_url,
            "nats_connected": nats_ok, "nats_connects": self.link.connects,
            "host": self.host, "port": self.port, "pid": os.getpid(),
            "version": __version__, "role": "chief" if self.is_chief else "worker",
            "peers": peers, "channel_health": channel_health,
            "recent_errors": list(self.recent_errors),
            "interactive_session": self.interactive_session,
            "messages_received": self.received_count,
            "refused": self.refusals.snapshot(),
        }

    def heartbeat(self) -> dict[str, Any]:
        """This node's heartbeat, signed."""
        return sign(self._announcement(), self.secret, "heartbeat")

    def _announcement(self) -> dict[str, Any]:
        return {"nodeId": self.node_id, "host": self.host, "port": self.port,
                "natsUrl": self.nats_url, "ts": time.time(),
                "uptime_s": round(time.time() - self.started, 1),
                "interactive_session": self.interactive_session}

    # -- messages ------------------------------------------------------------------------

    async def handle(self, msg: dict[str, Any], via: str) -> tuple[int, dict[str, Any]]:
        """Take a validated message; returns (HTTP-like code, reply)."""
        if msg["to"] != self.node_id:
            return await self._relay(msg)
        self.received_count += 1
        self.received.append({"id": msg.get("id", ""), "from": msg["from"], "type": msg["type"],
                              "subject": messages.subject_of(msg), "via": via,
                              "at": seeds.now_iso()})
        log.info("node %s: %s from %s via %s: %s", self.node_id, msg["type"], msg["from"], via,
                 messages.subject_of(msg))
        if msg["type"] == messages.REPAIR:
            action = (msg.get("payload") or {}).get("action", "notify")
            if action in ACTIONS:
                task = asyncio.create_task(self._act(action))
                self._actions.add(task)
                task.add_done_callback(self._actions.discard)
        return 200, {"status": "delivered", "node": self.node_id, "id": msg.get("id", "")}

    async def _act(self, action: str) -> None:
        log.info("node %s: repair action %s", self.node_id, action)
        if action == "reconnect_nats":
            await self.link.reconnect()
        elif action == "self_check":
            with contextlib.suppress(OSError, HealerError):  # private, no symlink followed
                await asyncio.to_thread(safedirs.ensure_private_dir, self.inbox)
            if not self.link.connected:
                await self.link.reconnect()
            await self.link.publish(subject(self.node_id, "heartbeat"), self.heartbeat())

    async def _relay(self, msg: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not self.is_chief or msg.get("relayed_by"):
            return 421, {"status": "error", "error": f"this is {self.node_id}, not "
                         f"{msg['to']}, and it does not relay"}
        try:
            target = self.view.peer(msg["to"])
        except UsageError as exc:
            return 404, {"status": "error", "error": str(exc)}
        fwd = {**msg, "relayed_by": self.node_id}
        tried = []
        for name in RELAY_CHANNELS:
            ch = CHANNELS[name]
            if await ch.applies(self.ctx, target):
                continue
            try:
                out = await ch.send(self.ctx, target, fwd, self.ctx.timeout(name))
            except Exception as exc:  # a relay failure is an answer, not a crash
                out = Outcome(False, str(exc)[:200], None, "failed")
            if out.ok:
                return 200, {"status": "relayed", "via": name, "node": self.node_id}
            tried.append(f"{name}: {out.detail}")
        return 502, {"status": "error", "error": "relay failed (" + "; ".join(tried) + ")"}

    # -- NATS ----------------------------------------------------------------------------

    async def _on_message(self, m: Any) -> None:
        try:
            msg = messages.parse_signed(m.data, self.verifier)
            _, reply = await self.handle(msg, "nats")
        except SignatureError as exc:
            reply = {"status": "error", "error": f"message refused: {exc.reason}"}
        except UsageError as exc:
            reply = {"status": "error", "error": str(exc)}
        if m.reply:
            await m.respond(messages.encode(reply))

    async def _on_ping(self, m: Any) -> None:
        if m.reply:
            await m.respond(messages.encode({"nodeId": self.node_id, "ts": time.time()}))

    async def _on_heartbeat(self, m: Any) -> None:
        import json

        try:
            data = json.loads(m.data)
        except ValueError:
            return
        if isinstance(data, dict) and data.get("nodeId") != self.node_id:
            self.heartbeats.record(data)

    # -- loops ---------------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.link.publish(subject(self.node_id, "heartbeat"), self.heartbeat())
            await asyncio.sleep(self.settings.fleet.heartbeat_s)

    async def _inbox_loop(self) -> None:
        interval = min(1.0, self.settings.fleet.heartbeat_s)
        while True:
            try:
                for path in await asyncio.to_thread(seeds.inbox, self.settings.fleet_path,
                                                    self.node_id):
                    await self._take_seed(path)
            except (OSError, HealerError) as exc:
                self.error(f"seed inbox: {exc}")
            await asyncio.sleep(interval)

    async def _take_seed(self, path: Path) -> None:
        try:
            seed = await asyncio.to_thread(seeds.read, path)
            msg = messages.from_seed(seed)
        except FileNotFoundError:
            return
        except (RejectedFile, UsageError) as exc:
            self.error(f"seed file {path.name} rejected: {exc}")
            with contextlib.suppress(OSError, HealerError):
                await asyncio.to_thread(seeds.reject, path, str(exc))
            return
        await self.handle(msg, "seed")
        with contextlib.suppress(OSError, HealerError):
            await asyncio.to_thread(seeds.archive, path)

    # -- HTTP ----------------------------------------------------------------------------

    def _authorised(self, request: Request) -> bool:
        import hmac

        token = self.settings.fleet.token
        if token:
            given = request.headers.get("authorization", "")
            return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())
        host = request.client.host if request.client else ""
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    async def _http_health(self, request: Request) -> JSONResponse:
        return JSONResponse(self.health())

    async def _http_message(self, request: Request) -> JSONResponse:
        if not self._authorised(request):
            return JSONResponse({"status": "error", "error": "missing or wrong bearer token"},
                                status_code=401)
        raw = await request.body()
        try:
            msg = messages.parse_signed(raw, self.verifier)
        except SignatureError as exc:
            return JSONResponse({"status": "error", "error": f"message refused: {exc.reason}"},
                                status_code=401)
        except UsageError as exc:
            return JSONResponse({"status": "error", "error": str(exc)}, status_code=400)
        code, reply = await self.handle(msg, "http")
        return JSONResponse(reply, status_code=code)

    async def _http_identity(self, request: Request) -> JSONResponse:
        """The identity challenge: prove holding the fleet secret for the caller's nonce and
        the address this daemon listens on."""
        nonce = request.query_params.get("nonce", "")
        if not NONCE.fullmatch(nonce):
            return JSONResponse({"status": "error", "error": "nonce must be 16-128 characters "
                                 "of A-Z a-z 0-9 _ -"}, status_code=400)
        return JSONResponse({"nodeId": self.node_id, "nonce": nonce, "host": self.host,
                             "port": self.port,
                             "proof": prove(self.secret, self.node_id, nonce, self.host,
                                            self.port)})

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/health", self._http_health, methods=["GET"]),
            Route("/identity", self._http_identity, methods=["GET"]),
            Route("/message", self._http_message, methods=["POST"]),
        ])

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        import uvicorn

        from healer.core.asgi import Server

        config = uvicorn.Config(self.app(), host=self.host, port=self.port, log_level="warning",
                                lifespan="off", access_log=False, server_header=False,
                                timeout_graceful_shutdown=2)
        # Bind here, so a taken port is an OSError for the caller, not uvicorn's sys.exit.
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise OSError(f"node daemon cannot listen on {self.host}:{self.port}: "
                          f"{exc.strerror or exc}") from exc
        self.port = sock.getsockname()[1]
        self._server = Server(config)
        self._serve_task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._serve_task.done():
                raise OSError(f"node daemon could not serve on {self.host}:{self.port}")
            await asyncio.sleep(0.01)
        self.url = f"http://{self.host}:{self.port}"
        with contextlib.suppress(OSError, HealerError):  # private, no symlink followed
            safedirs.ensure_private_dir(self.inbox)
        await self.link.subscribe(subject(self.node_id, "message"), self._on_message)
        await self.link.subscribe(subject(self.node_id, "ping"), self._on_ping)
        await self.link.subscribe(HEARTBEATS, self._on_heartbeat)
        self.link.start()
        self._tasks = [asyncio.create_task(self._heartbeats()),
                       asyncio.create_task(self._inbox_loop())]
        if self.pid_file is not None:
            self.pid_file.parent.mkdir(parents=True, exist_ok=True)
            self.pid_file.write_text(f"{os.getpid()}\n")
        log.info("node %s on %s (NATS %s)", self.node_id, self.url, self.nats_url)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.link.close()
        await self.ctx.aclose()
        if self._server is not None and self._serve_task is not None:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await self._serve_task
        if self.pid_file is not None:
            with contextlib.suppress(OSError):
                if self.pid_file.read_text().strip() == str(os.getpid()):
                    self.pid_file.unlink()


async def serve(daemon: NodeDaemon, stop: asyncio.Event) -> None:
    """Run ``daemon`` until ``stop`` is set."""
    await daemon.start()
    try:
        await stop.wait()
    finally:
        await daemon.stop()
