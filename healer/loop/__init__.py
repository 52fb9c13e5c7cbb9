"""``python -m healer.loop``: the headless healer.

Wires the parts that exist into one process — the state store, the results bus (agent results
and the node's seed inbox), start-up recovery, periodic jobs, and the services other
capabilities register (HTTP API, fleet watchdog, ...) — and runs until SIGINT/SIGTERM, ``--once``
or ``--duration``. Stopping is clean: services stop in reverse order, background agent runs are
cancelled (their process groups killed), the bus finishes the file in hand, state is on disk.

Several replicas may share one store. Work that must happen once runs under a duty's lease
(``healer.core.duties``, docs/ha.md): ``Healer.once`` for a periodic job, ``Healer.lead`` for a
service; ``healer.loop.leading`` renews the leases and starts/stops what they guard.

A capability plugs in by adding a factory to ``SERVICE_FACTORIES``: a callable taking the
``Healer`` and returning a ``Service`` (or None when it does not apply to these settings).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from filelock import FileLock, Timeout

from healer import __version__
from healer.agents import dispatcher
from healer.api.metrics import Metrics
from healer.config import Settings
from healer.core import safedirs
from healer.core.bus import AgentResult, ResultsBus
from healer.core.duties import Duties
from healer.core.files import atomic_write_json
from healer.core.seeds import Seed
from healer.core.store import Store, open_store
from healer.errors import UnavailableError, UsageError
from healer.loop.leading import Leading
from healer.resources import optional

log = logging.getLogger("healer.loop")


class Service(Protocol):
    """Something the loop starts and stops (an HTTP server, a watchdog, ...)."""

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class PeriodicJob:
    name: str
    interval_s: float
    fn: Callable[[], Awaitable[None] | None]
    last_run: float = 0.0
    duty: str = ""  # runs only on the replica leading this duty ("": on every replica)


# "module:function" factories, imported only if the module exists, so the loop composes
# whatever capabilities this installation has.
SERVICE_FACTORIES: list[str] = [
    "healer.play.service:create_service",
    "healer.play.kube.watcher:create_service",  # after play: it sends its alerts there
    "healer.selfheal.service:create_loop_service",
    "healer.fleet.service:create_service",
    "healer.context.service:create_service",
    "healer.play.github.service:create_service",  # after play: it raises play alerts
    "healer.core.notify.service:create_service",  # tells people; after what opens incidents
    "healer.api.service:create_service",  # last: it serves what the others registered
]


@dataclass
class Healer:
    """One running healer: settings, store, bus, services and periodic jobs."""

    settings: Settings
    store: Store
    bus: ResultsBus
    services: list[Service] = field(default_factory=list)
    jobs: list[PeriodicJob] = field(default_factory=list)
    recovery: list[Callable[[], Any]] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    extras: dict[str, Any] = field(default_factory=dict)
    dispatcher: Any = None  # healer.core.dispatch.Dispatcher: every agent run of every kind
    duties: Duties = field(init=False)
    leading: Leading = field(init=False)

    def __post_init__(self) -> None:
        ha = self.settings.ha
        instance = ha.instance or secrets.token_hex(4)
        self.duties = Duties(self.store, f"{self.settings.node}/{instance}", ha.lease_ttl_s)
        self.leading = Leading(self.duties)

    def every(self, name: str, interval_s: float, fn: Callable[[], Any]) -> None:
        """Run ``fn`` every ``interval_s`` seconds on every replica (and once with --once)."""
        self.jobs.append(PeriodicJob(name, interval_s, fn))

    def once(self, name: str, interval_s: float, fn: Callable[[], Any]) -> None:
        """Like ``every``, but only on the replica leading duty ``name``; a pass in flight
        is cancelled when the duty moves to another replica."""
        self.duties.add(name)
        self.jobs.append(PeriodicJob(name, interval_s, fn, duty=name))

    def lead(self, name: str, service: Service) -> Service:
        """``service``, started while this replica leads duty ``name`` and stopped when it
        stops leading it; return the result from a loop factory in place of ``service``."""
        self.duties.add(name)
        return self.leading.wrap(name, service)

    def status(self) -> dict[str, Any]:
        s = self.bus.stats
        api = self.extras.get("api")
        return {
            "api": getattr(api, "url", ""),
            "pid": os.getpid(),
            "version": __version__,
            "node": self.settings.node,
            "started_at": self.started_at,
            "uptime_s": round(time.time() - self.started_at, 1),
            "services": [svc.name for svc in self.services],
            "owner": self.duties.owner,
            "leads": sorted(n for n in self.duties.names if self.duties.holds(n)),
            "bus": {"applied": s.applied, "duplicates": s.duplicates, "rejected": s.rejected,
                    "subscriber_errors": s.subscriber_errors, "seeds": s.seeds},
        }


def build(settings: Settings) -> Healer:
    """Create the store and bus and let every available capability attach itself."""
    store = open_store(settings)
    bus_class: type[ResultsBus] = ResultsBus
    if settings.store.backend == "jetstream":
        from healer.core.bus.jetstream import JetStreamResultsBus

        bus_class = JetStreamResultsBus
    bus = bus_class(
        settings.results_path, store,  # type: ignore[arg-type]
        max_file_bytes=settings.bus.max_file_bytes, settle_s=settings.bus.settle_s,
        max_wait_s=settings.bus.max_wait_s,
        rescan_s=settings.bus.rescan_s, max_json_depth=settings.bus.max_json_depth,
        fleet_dir=settings.fleet_path, node=settings.node,
    )
    healer = Healer(settings=settings, store=store, bus=bus, dispatcher=dispatcher(
        settings, bus=bus))
    healer.extras["metrics"] = Metrics()
    bus.subscribe(_log_result)
    bus.subscribe_seeds(_log_seed)
    healer.once("silences", SILENCES_EVERY_S, lambda: asyncio.to_thread(_silences, healer))
    for spec in SERVICE_FACTORIES:
        factory = optional(spec)
        if factory is None:
            continue  # that capability is not part of this installation
        service = factory(healer)
        if service is not None:
            healer.services.append(service)
    return healer


SILENCES_EVERY_S = 10.0


def _silences(healer: Healer) -> None:
    """Mark what a silence covers, unmark what none covers any more (one ended)."""
    from healer.core.audit import Audit
    from healer.core.incidents import Ledger
    from healer.core.silences import Silences

    audit = Audit(healer.settings.state_path)
    Silences(healer.store, audit=audit).reconcile(Ledger(healer.store, audit=audit))


def _log_result(result: AgentResult) -> None:
    log.info("result %s: %s/%s status=%s", result.name, result.kind, result.target,
             result.status, extra={"result_id": result.id, "status": result.status})


def _log_seed(seed: Seed) -> None:
    log.info("seed from %s: %s", seed.sender, seed.subject,
             extra={"seed_from": seed.sender, "seed_type": seed.type})


async def _call(fn: Callable[[], Any]) -> None:
    out = fn()
    if asyncio.iscoroutine(out):
        await out


async def _run_jobs(healer: Healer, *, once: bool) -> None:
    while not healer.stopping.is_set():
        now = time.monotonic()
        for job in healer.jobs:
            if job.duty and not healer.duties.holds(job.duty):
                continue  # another replica's; runs here at once if this one takes it over
            if once or now - job.last_run >= job.interval_s:
                job.last_run = now
                try:
                    if job.duty:
                        await healer.leading.run_job(job.duty, _call(job.fn))
                    else:
                        await _call(job.fn)
                except Exception:
                    log.exception("periodic job %s failed", job.name)
        if once:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(healer.stopping.wait(), timeout=0.5)


def _status_path(settings: Settings) -> Any:
    return settings.state_path / "loop.json"


async def run(settings: Settings, *, once: bool = False, duration: float | None = None,
              on_started: Callable[[Healer], None] | None = None) -> int:
    """Run the loop until a signal, ``once`` (one pass) or ``duration`` seconds;
    ``on_started`` is called once every service is up (``healer serve`` prints its URL)."""
    # healer's folders are private and its own, or it does not start (UnsafeDirError).
    safedirs.ensure_own_dirs(settings)
    lock = FileLock(settings.state_path / "loop.lock", timeout=0)
    try:
        lock.acquire()
    except Timeout as exc:
        raise UsageError(
            f"another healer loop is running on state dir {settings.state_path} "
            "(stop it, or give this one its own --state-dir)"
        ) from exc
    try:
        await asyncio.to_thread(warn_about_the_sandbox, settings)
        healer = build(settings)
        return await _run_built(healer, once=once, duration=duration, on_started=on_started)
    finally:
        lock.release()


def warn_about_the_sandbox(settings: Settings) -> None:
    """At every start (``healer loop``, ``healer serve``): a WARNING when agents would run
    unconfined (``agents.sandbox: off``), or cannot start at all (no sandbox here)."""
    from healer.agents.sandbox import doctor_check

    ok, detail = doctor_check(settings)
    if not settings.agents.sandbox:
        log.warning("agents.sandbox is OFF: healing agents run UNCONFINED — they can read, "
                    "change and send anything healer's user can. Turn it on unless you run "
                    "healer inside a sandbox of your own.")
    elif not ok:
        log.warning("agent sandbox: %s", detail)


async def _run_built(healer: Healer, *, once: bool, duration: float | None,
                     on_started: Callable[[Healer], None] | None = None) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, healer.stopping.set)

    for fn in healer.recovery:
        try:
            await _call(fn)
        except Exception:
            log.exception("recovery step failed")

    started: list[Service] = []
    up = False
    renewer: asyncio.Task[None] | None = None
    try:
        await asyncio.to_thread(healer.bus.start)
        # Take what duties are free before the services start, so a leader's start in order.
        await healer.leading.tick()
        for svc in healer.services:
            try:
                await svc.start()
            except OSError as exc:  # a taken port, an unreadable socket path: one clear line
                raise UnavailableError(f"could not start the {svc.name} service: "
                                       f"{exc.strerror or exc}") from None
            started.append(svc)
        held = sorted(n for n in healer.duties.names if healer.duties.holds(n))
        log.info("healer loop running (node %s as %s, results %s, state %s, services: %s; "
                 "leads: %s)", healer.settings.node, healer.duties.owner,
                 healer.settings.results_path, healer.settings.state_path,
                 ", ".join(s.name for s in started) or "none", ", ".join(held) or "none")
        healer.duties.announce = True
        _write_status(healer, "running")
        up = True
        if on_started is not None:
            on_started(healer)
        if once:
            await asyncio.to_thread(healer.bus.drain, 60.0)
            await _run_jobs(healer, once=True)
            await asyncio.to_thread(healer.bus.drain, 60.0)
        else:
            renewer = asyncio.create_task(healer.leading.run(healer.stopping))
            jobs = asyncio.create_task(_run_jobs(healer, once=False))
            status = asyncio.create_task(_status_writer(healer))
            try:
                await asyncio.wait_for(healer.stopping.wait(), timeout=duration)
            except TimeoutError:
                log.info("duration of %.0f s reached", duration)
            healer.stopping.set()
            for task in (jobs, status):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        healer.stopping.set()
        if renewer is not None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        try:  # first (led services stopped, then the leases freed): a successor takes the
            # duties over on its next try, not after the ttl, while the rest stops here
            await healer.leading.release()
        except Exception:
            log.exception("releasing the duties failed")
        for svc in reversed(started):
            try:
                await svc.stop()
            except Exception:
                log.exception("stopping %s failed", svc.name)
        await asyncio.to_thread(healer.bus.stop)
        healer.store.close()
        _write_status(healer, "stopped")
        if up:  # one that never came up has said why already, in one line
            log.info("healer loop stopped: %s", healer.status()["bus"])
    return 0


async def _status_writer(healer: Healer) -> None:
    while True:
        await asyncio.sleep(5)
        # The write fsyncs a file and its folder: in a thread, not on the loop, where a busy
        # disk held every API request in flight for as long.
        write = asyncio.ensure_future(asyncio.to_thread(
            _save_status, healer.settings, {**healer.status(), "state": "running"}))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            await write  # lands before the final "stopped", never after it
            raise


def _write_status(healer: Healer, state: str) -> None:
    _save_status(healer.settings, {**healer.status(), "state": state})


def _save_status(settings: Settings, status: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        atomic_write_json(_status_path(settings), status)
