"""``healer loop --demo``: a broken local fleet healing itself, live, then a summary.

Starts the embedded fleet (``healer.demo.fleet``: real NATS servers, a real sshd, three
node daemons on 127.0.0.2-4, SSH tunnels), runs the real loop on it with fast settings and
the playbook executor, injects one fault after another, and shows each being found and healed
— which channel broke, which agent fixed it, how long it took. The last fault (a restart
command that fails) cannot be healed: it ends in one escalation file for a person after
exactly three attempts. Everything stays on loopback, everything it started is stopped, and
it ends on its own (each fault is given at most 60 s, the whole demo at most 6 minutes).

What it says, and how it is measured:

* a fault's **time to heal** runs from the moment the fault was injected to the ``healed``
  (or ``escalated``) event — measured once (``_heal_seconds``) and shown the same in the live
  line and the summary; an agent's own run time is shown on its result line as ``ran N s``;
* the escalation file a person gets is copied to ``<state dir>/demo/`` (the fleet's folder is
  removed at the end) and that copy's path is printed;
* Ctrl-C (SIGINT) ends it early: the running fault is marked ``interrupted``, everything it
  started is stopped and removed, and it exits 130;
* without a terminal (a pipe, a log file, CI) it prints 200 columns wide unless ``COLUMNS``
  says otherwise, so tables keep whole agent names.

``HEALER_DEMO_FAULTS=daemon,tunnel`` runs a subset (keys below). For benchmarks and bug
hunts: ``HEALER_DEMO_SUMMARY=FILE`` writes the summary as JSON (``passed``, ``rows``,
``duration_s``, ``root``), ``HEALER_DEMO_LOG=FILE`` writes the loop's debug log there (the
console keeps only the narration), ``HEALER_DEMO_KEEP=1`` keeps the fleet's folder (node,
NATS and sshd logs) instead of removing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel

from healer.config import Settings

FAULT_TIMEOUT_S = 60.0
DEMO_TIMEOUT_S = 360.0
PIPE_WIDTH = 200  # columns when stdout is no terminal: rich would assume 80 and wrap tables
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Fault:
    key: str
    title: str
    peer: str
    inject: str  # LocalFleet method
    heals: bool = True


FAULTS = (
    Fault("daemon", "daemon killed", "n2", "kill_daemon"),
    Fault("tunnel", "tunnel killed", "n3", "kill_tunnel"),
    Fault("moved", "node moved (address+port)", "n3", "move_node"),
    Fault("nats", "NATS server killed", "n2", "kill_nats"),
    Fault("route", "NATS route dropped", "n3", "drop_route"),
    Fault("inbox", "seed inbox unwritable", "n2", "block_inbox"),
    Fault("unhealable", "restart command fails", "n3", "break_restart",
          heals=False),
)


def run_demo(settings: Settings) -> int:
    """Run the demo; 0 when every fault ended as expected."""
    return asyncio.run(_demo(settings))


def _selected() -> list[Fault]:
    wanted = [k.strip() for k in os.environ.get("HEALER_DEMO_FAULTS", "").split(",") if k.strip()]
    if not wanted:
        return list(FAULTS)
    known = {f.key: f for f in FAULTS}
    unknown = [k for k in wanted if k not in known]
    if unknown:
        from healer.errors import UsageError

        raise UsageError(f"HEALER_DEMO_FAULTS: unknown fault {unknown[0]!r} (faults: "
                         f"{', '.join(known)})")
    return [known[k] for k in wanted]


def _console(file: Any = None) -> Console:
    """The demo's console: a terminal's own width, else ``COLUMNS``, else ``PIPE_WIDTH``."""
    out = file if file is not None else sys.stdout
    tty = hasattr(out, "isatty") and out.isatty()
    wide = not tty and not os.environ.get("COLUMNS")
    return Console(file=file, highlight=False, width=PIPE_WIDTH if wide else None)


def _heal_seconds(end: dict[str, Any], injected: float) -> float:
    """A fault's time to heal: from its injection (wall clock) to the event that ended it."""
    return max(0.0, float(end["at"]) - injected)


class _Printer:
    def __init__(self, console: Console, started: float):
        self.console = console
        self.started = started
        self.injected: float | None = None  # when the current fault was injected (wall clock)

    def __call__(self, e: dict[str, Any]) -> None:
        t = f"[dim]{time.monotonic() - self.started:6.1f}s[/]"
        p = f"[bold]{e['peer']}[/]"
        kind = e["type"]
        if kind == "episode":
            self.console.print(f"{t} ⟳ {p}: healing starts — {e['reason']}")
        elif kind == "dispatch":
            self.console.print(f"{t}   → {e['agent']} for {', '.join(e['channels'])} "
                               f"(attempt {e['attempt']}): {e['why'][:200]}")
        elif kind == "result":
            colour = "green" if e["status"] in ("healed", "ok") else "red"
            self.console.print(f"{t}   ← {e['agent']}: [{colour}]{e['status']}[/] "
                               f"(ran {e['duration_s']:.1f} s) {e['summary'][:200]}")
        elif kind == "healed":
            took = (f"{_heal_seconds(e, self.injected):.1f} s after the fault"
                    if self.injected is not None else f"in {e['duration_s']:.1f} s")
            self.console.print(f"{t} [green]✓ {e['peer']} healed[/] {took}")
        elif kind == "escalated":
            self.console.print(f"{t} [red]✗ {e['peer']} escalated to a person[/] after "
                               f"{e['attempts']} attempts: {e['seed_file']}")
        elif kind == "held":
            self.console.print(f"{t} [yellow]… {e['peer']}: {', '.join(e['broken'])} still "
                               f"broken, already with a person ({', '.join(e['problems'])})[/]")


async def _wait(pred: Callable[[], bool], timeout: float, every: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        await asyncio.sleep(every)
    return pred()


async def _demo(base: Settings) -> int:
    from healer import loop as loop_mod
    from healer.demo.fleet import LocalFleet
    from healer.fleet.render import episodes_table, fleet_table

    faults = _selected()
    console = _console()
    _logging(base)
    root = Path(tempfile.mkdtemp(prefix="healer-demo-"))
    fleet = LocalFleet(root, nodes=3)
    started = time.monotonic()
    stop = _Interrupt(asyncio.get_running_loop())
    console.print(Panel.fit(
        "[bold]healer fleet demo[/]: a real fleet on loopback — 3 node daemons "
        "(127.0.0.2-4), their NATS servers, an sshd, SSH tunnels — and the real healing loop.\n"
        f"Faults to inject: {', '.join(f.title for f in faults)}.", border_style="cyan"))
    rows: list[dict[str, Any]] = []
    kept = ""
    try:
        try:
            await asyncio.to_thread(fleet.start)
        except Exception:
            if not stop.interrupted:  # Ctrl-C reaches the fleet's processes too: no error
                raise
        if stop.interrupted:
            raise _Interrupted
        console.print(f"[dim]fleet up in {time.monotonic() - started:.1f} s under {root}[/]")
        token = base.api.token or secrets.token_urlsafe(18)
        settings = fleet.settings(**{"fleet.heal_interval_s": 1.0, "fleet.heal_wait_s": 10,
                                     "fleet.watchdog_start_s": 600, "log.level": base.log.level,
                                     # The dashboard watches the demo live (loopback only).
                                     "api.enabled": "true", "api.host": base.api.host,
                                     "api.port": _port(base.api.host, base.api.port),
                                     "api.token": token})
        healer = loop_mod.build(settings)
        svc = healer.extras["fleet"]
        events: list[dict[str, Any]] = []
        printer = _Printer(console, started)
        svc.healer.listen(events.append)
        svc.healer.listen(printer)
        runner = asyncio.create_task(loop_mod._run_built(healer, once=False, duration=None))
        await asyncio.sleep(0)  # the loop's first step installs its signal handlers ...
        stop.install(healer.stopping)  # ... and the demo's own SIGINT handler replaces them
        api = healer.extras.get("api")
        if api is not None and await _wait(lambda: bool(api.url) or runner.done(), 15, 0.05) \
                and api.url:
            console.print(f"[bold]dashboard:[/] {api.url}/ — the faults and heals, live, while "
                          "the demo runs", soft_wrap=True)
            console.print(f"[dim]  log in with the token[/] {token} [dim](to mark escalations "
                          "handled or heal them again)[/]", soft_wrap=True)
        channels = list(settings.fleet.channels)

        def green(since: float = 0.0) -> bool:
            """Every channel works, by a sweep that began after ``since``, and nothing heals."""
            return bool(svc.probes) and all(p.ok and p.at >= since
                                            for p in svc.probes.values()) and \
                not svc.healer.active

        await _wait(lambda: green() or runner.done(), 30)
        if not stop.interrupted:
            console.print(fleet_table(svc.probes, channels, title="the fleet, healthy"))
        deadline = started + DEMO_TIMEOUT_S
        for fault in faults:
            if time.monotonic() > deadline or runner.done():
                break
            console.rule(f"[bold]fault: {fault.title} on {fault.peer}")
            mark = time.time()
            await asyncio.to_thread(getattr(fleet, fault.inject), fault.peer)
            injected = printer.injected = time.time()

            def ended(f: Fault = fault, since: float = mark) -> dict[str, Any] | None:
                for e in events:
                    if e["peer"] == f.peer and e["at"] >= since and \
                            e["type"] in ("healed", "escalated"):
                        return e
                return None

            # A stopped loop (SIGINT/SIGTERM) ends the wait: nothing would heal it any more.
            await _wait(lambda: ended() is not None or runner.done(),
                        min(FAULT_TIMEOUT_S, deadline - time.monotonic()))
            end = ended()
            # The episode that ended this fault (a later one may already have begun).
            agents = sorted({e["agent"] for e in events if e["peer"] == fault.peer and
                             e["at"] >= mark and e["type"] == "dispatch" and
                             (not end or e["at"] <= end["at"])})
            outcome = end["type"] if end else "interrupted" if stop.interrupted else "timed out"
            rows.append({"fault": fault.title, "peer": fault.peer,
                         "channels": (end or {}).get("broken", []),
                         "agents": agents,
                         "seconds": _heal_seconds(end, injected) if end else None,
                         "outcome": outcome, "expected": "healed" if fault.heals else
                         "escalated", "escalation": (end or {}).get("seed_file", "")})
            if stop.interrupted:
                break
            if fault.heals:
                # The next fault waits for a sweep that started after this one healed.
                since = end["at"] if end else time.time()
                await _wait(lambda s=since: green(s) or runner.done(), 30)
        if rows and rows[-1]["escalation"]:
            kept = _keep_escalation(base, Path(rows[-1]["escalation"]))
            text = Path(rows[-1]["escalation"]).read_text(errors="replace")
            body = text.split("## What you should do next", 1)[-1].split("## Evidence")[0]
            console.print(Panel(body.strip()[:1500], title="the escalation a person gets "
                                "(excerpt)", border_style="red"))
        healer.stopping.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(runner, 30)
    except _Interrupted:
        pass
    finally:
        await asyncio.to_thread(fleet.stop)
        if os.environ.get("HEALER_DEMO_KEEP", "") not in ("", "0"):
            console.print(f"[dim]kept the fleet's folder (logs): {root}[/]")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if rows:
        console.print(episodes_table(rows, title="summary: fault → channels → agent → time "
                                     "from the fault to healed (or escalated)"))
    if kept:
        console.print(f"the escalation file is kept: {kept}", soft_wrap=True)
    took = time.monotonic() - started
    if stop.interrupted:
        console.print(f"[yellow]demo interrupted[/] after {took:.0f} s; every process it "
                      "started is stopped and its folder removed.")
        _write_summary(False, rows, faults, took, root, interrupted=True)
        return EXIT_INTERRUPTED
    good = len(rows) == len(faults) and all(r["outcome"] == r["expected"] for r in rows)
    console.print(f"[{'green' if good else 'red'}]demo {'passed' if good else 'FAILED'}[/] "
                  f"in {took:.0f} s; every process it started is stopped.")
    _write_summary(good, rows, faults, took, root)
    return 0 if good else 1


class _Interrupted(Exception):
    """Ctrl-C came before the loop ran: straight to the clean-up."""


class _Interrupt:
    """The demo's SIGINT handler: remember it, stop the loop, let the demo clean up.

    Installed at once (so Ctrl-C while the fleet starts is caught, not a traceback) and again
    once the loop runs, since the loop's start installs its own handler for SIGINT."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.interrupted = False
        self._stopping: asyncio.Event | None = None
        self.install(None)

    def install(self, stopping: asyncio.Event | None) -> None:
        self._stopping = stopping
        with contextlib.suppress(NotImplementedError, RuntimeError):
            self.loop.add_signal_handler(signal.SIGINT, self._on_sigint)

    def _on_sigint(self) -> None:
        self.interrupted = True
        if self._stopping is not None:
            self._stopping.set()


def _keep_escalation(base: Settings, seed_file: Path) -> str:
    """A copy of the escalation a person got, in ``<state dir>/demo/`` (the fleet's folder,
    where the original lives, is removed when the demo ends); its path, or '' if it failed."""
    from healer.core import safedirs
    from healer.errors import HealerError

    name = f"escalation-{seed_file.name}"  # the seed file's name has its time already
    try:
        data = seed_file.read_bytes()
        with safedirs.opened(base.state_path, "demo") as fd:
            if not safedirs.create_file(fd, name, data, mode=0o600):
                return ""
    except (OSError, HealerError) as exc:
        logging.getLogger(__name__).error("could not keep the escalation file: %s", exc)
        return ""
    return str(base.state_path / "demo" / name)


def _port(host: str, wanted: int) -> int:
    """``wanted`` if it is free on ``host``, else 0 (any free port: the URL is printed)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host.strip("[]"), wanted))
        except OSError:
            return 0
    return wanted


def _logging(base: Settings) -> None:
    """The demo narrates: the loop's log goes to HEALER_DEMO_LOG (if set), and at the default
    level only errors reach the console."""
    root = logging.getLogger()
    to_file = os.environ.get("HEALER_DEMO_LOG", "")
    if to_file:
        handler = logging.FileHandler(to_file)
        handler.setFormatter(logging.Formatter(
            "%(asctime)s.%(msecs)03d %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S"))
        for h in root.handlers:
            h.setLevel(max(h.level, logging.ERROR))
        root.addHandler(handler)
        root.setLevel(logging.DEBUG)
        for noisy in ("httpx", "httpcore", "asyncio", "nats", "watchdog", "filelock"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    elif base.log.level == "info":
        root.setLevel(logging.ERROR)


def _write_summary(good: bool, rows: list[dict[str, Any]], faults: list[Fault], took: float,
                   root: Path, *, interrupted: bool = False) -> None:
    path = os.environ.get("HEALER_DEMO_SUMMARY", "")
    if not path:
        return
    doc = {"passed": good, "interrupted": interrupted, "duration_s": round(took, 1),
           "root": str(root),
           "faults": [f.key for f in faults],
           "rows": [{**r, "key": f.key} for r, f in zip(rows, faults, strict=False)]}
    Path(path).write_text(json.dumps(doc, indent=2, default=str) + "\n")
