"""The body of ``healer scan`` (kept out of the command module so its import stays light)."""

from __future__ import annotations

import argparse
import codecs
import gc
import os
import re
import stat
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from operator import attrgetter

from healer.detect import _native
from healer.detect._timestamps import epoch_day
from healer.detect.alert import json_bytes, json_lines
from healer.detect.catalog import SEVERITY_RANK, Catalog
from healer.detect.engine import Alert, Engine
from healer.detect.services import ERRORS_MIN, WARNINGS_MIN, ServiceTally
from healer.errors import EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, HealerError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any, TypeAlias

    from healer.config import DetectSettings

PROGRESS_MIN_BYTES = 64 << 20
# A region's output (str, or ASCII bytes for JSON), its count per pattern index, its services.
Rendered: TypeAlias = "tuple[str | bytes, dict[int, int], dict[str, Any]]"
_PATTERN, _INDEX = attrgetter("pattern"), attrgetter("index")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?)?"
                  r"\s*(Z|[+-]\d{2}:?\d{2})?")


def parse_duration(text: str) -> float | None:
    """``10m``, ``1h30m``, ``45s``, ``2d`` → seconds; None if ``text`` is not a duration."""
    t = text.strip().lower().replace(" ", "")
    if not t or _DURATION.sub("", t):
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in _DURATION.findall(t))


def parse_time(text: str) -> float | None:
    """An ISO 8601 time (no zone = UTC) or Unix seconds → Unix seconds; None if neither."""
    t = text.strip()
    if re.fullmatch(r"\d{9,11}(\.\d+)?", t):
        return float(t)
    m = _ISO.fullmatch(t)
    if not m:
        return None
    y, mo, d, h, mi, s, frac, zone = m.groups()
    day = epoch_day(int(y), int(mo), int(d))
    if day is None or int(h or 0) > 23 or int(mi or 0) > 59 or int(s or 0) > 60:
        return None
    ts = day * 86400.0 + int(h or 0) * 3600 + int(mi or 0) * 60 + int(s or 0)
    ts += int(frac) / 10 ** len(frac) if frac else 0
    if zone and zone != "Z":
        digits = zone[1:].replace(":", "")
        off = int(digits[:2]) * 3600 + int(digits[2:]) * 60
        ts -= off if zone[0] == "+" else -off
    return ts


def parse_since(text: str, now: float) -> float:
    dur = parse_duration(text)
    if dur is not None:
        return now - dur
    at = parse_time(text)
    if at is None:
        raise UsageError(f"--since {text!r}: expected a duration (10m, 2h, 1d) or an ISO time "
                         "(2024-05-01T10:00:00Z)")
    return at


# Environment variables that are not settings (load_settings does not read them).
_NOT_SETTINGS = {"HEALER_DETECT_ENGINE", "HEALER_DETECT_NATIVE", "HEALER_CACHE_DIR"}
_SETTINGS_FLAGS = ("config", "set", "state_dir", "results_dir", "fleet_dir", "log_level",
                   "log_format")


def detect_settings(args: argparse.Namespace) -> Any:
    """The detect.* settings for this run.

    Loading the settings tree means importing and running jsonschema, which takes longer
    (~0.15 s) than scanning 100 MB. When no source of settings exists — no settings flag, no
    HEALER* variable, no healer.yaml or cto-config.json here — the result is known: the
    defaults, which schemas/config.schema.json (generated from healer.config and kept in step
    by a test) carries. Otherwise the full loader runs (and sets up logging).

    With the defaults, logging is set up only when the scan follows its sources
    (``_default_logging``): nothing a file scan runs logs, and importing ``logging`` alone
    costs it ~15 ms.
    """
    from types import SimpleNamespace

    from healer.commands._common import settings_from

    quiet = (not any(getattr(args, f, None) for f in _SETTINGS_FLAGS)
             and not any(k.startswith("HEALER") and k not in _NOT_SETTINGS for k in os.environ)
             and not os.path.exists("healer.yaml") and not os.path.exists("cto-config.json"))
    if quiet:
        defaults = _schema_defaults()
        if defaults is not None:
            return SimpleNamespace(**defaults)
    return settings_from(args).detect


def _schema_defaults() -> dict[str, Any] | None:
    import json

    from healer.resources import bundle_file

    try:
        with open(bundle_file("schemas", "config.schema.json"), "rb") as f:
            schema = json.load(f)
        props = schema["properties"]["detect"]["properties"]
        return {name: spec["default"] for name, spec in props.items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None


class _Output:
    """Prints alerts (JSON Lines or text) and counts them for the summary."""

    def __init__(self, as_json: bool, stream: IO[str], *, live: bool):
        self.as_json = as_json
        self.stream = stream
        self.live = live
        self.counts: Counter[tuple[str, str]] = Counter()
        self.ids: dict[tuple[str, str], set[str]] = {}
        self.meaning: dict[tuple[str, str], str] = {}
        self.services = ServiceTally()
        # Called before anything is written (a progress bar drawn on the same terminal stops).
        self.before_output: Callable[[], None] | None = None

    def render(self, alerts: list[Alert]) -> tuple[str, dict[int, int], dict[str, Any]]:
        """Alerts → (output text, count per pattern index, per-service tally); runs in scan
        workers too."""
        text = json_lines(alerts) if self.as_json else "".join(
            [a.to_text() + "\n" for a in alerts])
        return (text, *_tally(alerts))

    def render_written(self, alerts: list[Alert]) -> Rendered:
        """``render``, with JSON Lines as the ASCII bytes they are written as: a scan's
        megabytes of JSON are made once, not as a str and then again encoded."""
        if not self.as_json:
            return self.render(alerts)
        return (json_bytes(alerts), *_tally(alerts))

    def emitter(self) -> Callable[[Rendered], Rendered] | None:
        """For ``Engine.render_file(emit=…)``: writes a rendered region's text straight to the
        stream's file descriptor from whichever process rendered it (so a scan worker's output
        never travels through this process), and returns the rest; None when the stream has
        no descriptor (a test's StringIO). Flushes the stream first: a worker forked with
        buffered output would write it again."""
        try:
            fd = self.stream.fileno()
        except (AttributeError, OSError, ValueError):
            return None
        stream = self.stream
        stream.flush()
        encoding = getattr(stream, "encoding", None) or "utf-8"
        errors = getattr(stream, "errors", None) or "strict"
        as_is = _ascii_compatible(encoding)  # ASCII bytes are what the stream would write

        def emit(result: Rendered) -> Rendered:
            text, counts, services = result
            if text:
                if self.before_output is not None:
                    self.before_output()
                if isinstance(text, bytes) and not as_is:
                    text = text.decode("ascii")
                view = memoryview(text if isinstance(text, bytes)
                                  else text.encode(encoding, errors))
                while view:
                    view = view[os.write(fd, view):]
            return "", counts, services

        return emit

    def write(self, text: str | bytes, counts: dict[int, int], catalog: Catalog,
              services: dict[str, Any] | None = None) -> None:
        if services:
            self.services.merge(services)
        if text:
            if self.before_output is not None:
                self.before_output()
            self.stream.write(text.decode("ascii") if isinstance(text, bytes) else text)
            if self.live:
                self.stream.flush()
        for index, n in counts.items():
            p = catalog.patterns[index]
            key = (p.code, p.severity)
            self.counts[key] += n
            self.ids.setdefault(key, set()).add(p.id)
            self.meaning.setdefault(key, p.meaning)

    def emit(self, alerts: list[Alert], catalog: Catalog) -> None:
        if alerts:
            text, counts, services = self.render(alerts)
            self.write(text, counts, catalog, services)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self, stream: IO[str], sources: int) -> None:
        if not stream.isatty():  # a file, a pipe, a CI log: the same table without rich
            self._plain_summary(stream, sources)
            return
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        # Off a terminal rich assumes 80 columns, which would cut pattern ids: allow 120.
        width = None if stream.isatty() else 120
        console = Console(file=stream, highlight=False, soft_wrap=False, width=width)
        if not self.counts:
            console.print(f"no alerts in {sources} source(s)", markup=False)
            return
        table = Table(title=f"{self.total} alert(s) in {sources} source(s)", title_justify="left")
        table.add_column("code", no_wrap=True)
        table.add_column("severity", no_wrap=True)
        table.add_column("alerts", justify="right", no_wrap=True)
        table.add_column("patterns", overflow="fold")
        table.add_column("meaning", ratio=1)
        order = sorted(self.counts, key=lambda k: (-SEVERITY_RANK.get(k[1], 0), k[0]))
        for key in order:
            table.add_row(key[0], key[1], str(self.counts[key]), ", ".join(sorted(self.ids[key])),
                          self.meaning[key])
        console.print(table)
        reports = self.services.reports()
        if reports:
            services = Table(title=f"{len(reports)} service(s) over the thresholds ("
                             f"{ERRORS_MIN} errors or {WARNINGS_MIN} warnings)",
                             title_justify="left")
            services.add_column("service", overflow="fold")
            services.add_column("band", no_wrap=True)
            services.add_column("errors", justify="right", no_wrap=True)
            services.add_column("warnings", justify="right", no_wrap=True)
            services.add_column("sample lines", ratio=1, overflow="fold")
            for r in reports:  # log text is never markup
                services.add_row(Text(r.service), r.band, str(r.errors), str(r.warnings),
                                 Text("\n".join(r.samples)))
            console.print(services)


    def _plain_summary(self, stream: IO[str], sources: int) -> None:
        from healer.commands._box_table import box_table

        if not self.counts:
            stream.write(f"no alerts in {sources} source(s)\n")
            return
        order = sorted(self.counts, key=lambda k: (-SEVERITY_RANK.get(k[1], 0), k[0]))
        stream.write(box_table(
            f"{self.total} alert(s) in {sources} source(s)",
            ["code", "severity", "alerts", "patterns", "meaning"],
            [[k[0], k[1], str(self.counts[k]), ", ".join(sorted(self.ids[k])), self.meaning[k]]
             for k in order], right=frozenset({2}), wrap=frozenset({3, 4})))
        reports = self.services.reports()
        if reports:
            stream.write(box_table(
                f"{len(reports)} service(s) over the thresholds ({ERRORS_MIN} errors or "
                f"{WARNINGS_MIN} warnings)",
                ["service", "band", "errors", "warnings", "sample lines"],
                [[r.service, r.band, str(r.errors), str(r.warnings), "\n".join(r.samples)]
                 for r in reports], right=frozenset({2, 3}), wrap=frozenset({0, 4})))


class ScanRun:
    """One ``healer scan`` invocation."""

    def __init__(self, args: argparse.Namespace, detect: DetectSettings, *,
                 collect: bool = True):
        self.args = args
        self.detect = detect
        self.collect = collect  # turn the cyclic collector on once started (scan.main pauses it)

    def run(self) -> int:
        a = self.args
        now = time.time()
        not_before = parse_since(a.since, now) if a.since else None
        start = None
        if a.start:
            start = parse_time(a.start)
            if start is None:
                raise UsageError(f"--start {a.start!r}: expected an ISO time or Unix seconds")
        files = [f for f in a.files if f != "-"]
        use_stdin = "-" in a.files
        for f in files:
            _check_file(f)
        catalog = Catalog.load(a.catalog or self.detect.catalog or None,
                               a.catalog_mode or self.detect.catalog_mode)
        engine = Engine(catalog, engine=a.engine, max_line_chars=self.detect.max_line_chars,
                        preflight_window_s=self.detect.preflight_window_s)
        if self.collect:
            gc.enable()
        k8s = bool(getattr(a, "k8s", None))
        out = _Output(a.json, sys.stdout,
                      live=a.follow or bool(a.cmd) or bool(a.loki) or use_stdin or k8s)
        sources = len(files) + int(use_stdin) + int(bool(a.cmd)) + int(bool(a.loki)) + int(k8s)
        failures: list[Exception] = []
        scanning: str | None = None  # the file being scanned (not followed) meanwhile
        try:
            if not a.follow:
                for f in files:
                    scanning = f
                    bar = _progress_for(f)
                    out.before_output = bar.stop if bar is not None else None
                    for text, counts, services in engine.render_file(
                            f, out.render_written, start_time=start, not_before=not_before,
                            workers=a.workers, progress=bar,
                            idle=None if a.no_summary or not self._summary_stream().isatty()
                            else _import_rich,
                            emit=out.emitter()):
                        out.write(text, counts, catalog, services)
                scanning = None
            if a.follow or use_stdin or a.cmd or a.loki or k8s:
                failures = self._follow(engine, out, files if a.follow else [], use_stdin,
                                        start, not_before)
        except KeyboardInterrupt:
            # Ctrl-C is how a follow ends: the summary follows. A file cut short is not a
            # scan that found nothing: no summary of half its alerts, and exit 130.
            if scanning is not None:
                print(f"healer: interrupted while scanning {scanning}: the output is "
                      "incomplete, and no summary is given", file=sys.stderr)
                return EXIT_INTERRUPTED
        finally:
            sys.stdout.flush()
        if not a.no_summary:
            self._summary(out, sources)
        for exc in failures:
            print(f"healer: {exc}", file=sys.stderr)
        if failures:
            return max(getattr(e, "exit_code", 3) for e in failures)
        return EXIT_FINDINGS if out.total else EXIT_OK

    def _summary_stream(self) -> IO[str]:
        return sys.stderr if self.args.json else sys.stdout

    def _summary(self, out: _Output, sources: int) -> None:
        out.summary(self._summary_stream(), sources)

    def _follow(self, engine: Engine, out: _Output, files: list[str], use_stdin: bool,
                start: float | None, not_before: float | None) -> list[Exception]:
        from healer.detect.sources import Follower

        _default_logging()
        a = self.args
        follower = Follower(engine, lambda alert: out.emit([alert], engine.catalog),
                            start_time=start,
                            not_before=not_before)
        for f in files:
            follower.add_file(f)
        if use_stdin:
            follower.add_stream(sys.stdin.buffer, "-")
        if a.cmd:
            follower.add_command(a.cmd)
        if a.loki:
            from healer.detect.loki import LokiSource

            headers = {"X-Scope-OrgID": a.loki_org} if a.loki_org else {}
            loki = LokiSource(a.loki, a.query, since=not_before, follow=a.follow,
                              headers=headers)
            follower.add_events(a.loki, loki.events)
        if getattr(a, "k8s", None):
            follower.add_events(a.k8s, self._pod_logs(not_before))
        import signal  # (here: its enums cost every scan's start-up ~0.4 ms)

        stop = threading.Event()
        previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            follower.run(stop, duration=a.duration if a.follow or getattr(a, "k8s", None)
                         else None)
        finally:
            signal.signal(signal.SIGTERM, previous)
            if a.loki and loki.dropped:
                print(f"healer: Loki dropped {loki.dropped} entries from the tail (it could "
                      "not keep up); they were not scanned", file=sys.stderr)
        return [e if isinstance(e, HealerError) else UsageError(str(e))
                for e in follower.failures]


    def _pod_logs(self, not_before: float | None) -> Callable[[threading.Event], Any]:
        """``--k8s``: the pods' logs through the API (``healer.play.kube.source``)."""
        from datetime import UTC, datetime

        from healer.commands._common import settings_from
        from healer.play.kube.source import PodLogSource, parse_spec

        kube = settings_from(self.args).kube
        since = (datetime.fromtimestamp(not_before, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                 if not_before is not None else "")
        return PodLogSource(parse_spec(self.args.k8s, kube.namespace), kube, since=since).events


def _tally(alerts: list[Alert]) -> tuple[dict[int, int], dict[str, Any]]:
    """The alerts' count per pattern index and their per-service tally."""
    tally = ServiceTally()
    sp = _native.speedups
    counted = sp.alert_counts(alerts) if sp is not None else NotImplemented
    if counted is not NotImplemented:  # both counts in one pass in C
        per_index, kinds = counted
        tally.add_kinds(kinds, alerts)
        return per_index, tally.to_dict()
    tally.add(alerts)
    # (counted in C: map, filter and Counter's own loop; a generator costs ~0.3 µs an alert)
    return dict(Counter(map(_INDEX, filter(None, map(_PATTERN, alerts))))), tally.to_dict()


def _ascii_compatible(encoding: str) -> bool:
    """Whether ``encoding`` writes ASCII text as the ASCII bytes."""
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        return False
    return name in ("utf-8", "ascii", "latin-1", "iso8859-1", "cp1252", "iso8859-15")


def _default_logging() -> None:
    """Logging as the default settings set it up, unless settings were loaded (which set it
    up their way): following runs threads and libraries (httpx, watchdog) that log."""
    import logging

    if not logging.getLogger().handlers:
        from healer import log

        log.setup("info", "text")


def _import_rich() -> None:
    """Load the summary table's modules while the scan workers finish."""
    import rich.console
    import rich.table  # noqa: F401


def _check_file(name: str) -> None:
    try:
        st = os.stat(name)
    except FileNotFoundError:
        raise UsageError(f"{name}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{name}: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{name}: is a directory (give the log files inside it)")
    if not os.access(name, os.R_OK):
        raise UsageError(f"{name}: permission denied")


def _progress_for(name: str) -> _Bar | None:
    """A progress bar (on stderr) for a big file when stdout is a terminal, else nothing."""
    if (not sys.stdout.isatty() or not sys.stderr.isatty()
            or os.stat(name).st_size < PROGRESS_MIN_BYTES):
        return None
    return _Bar(name)


class _Bar:
    """A file's progress bar on stderr (``rich``), as ``Engine.render_file``'s ``progress``.

    It is drawn on the terminal the alerts are printed to, and redrawn where the cursor is:
    it is stopped (``stop``) before the first alert is printed, or alerts and frames of the
    bar would be mixed on the same lines."""

    def __init__(self, name: str):
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

        self._bar = Progress("[progress.description]{task.description}", BarColumn(),
                             DownloadColumn(), TimeRemainingColumn(), transient=True,
                             console=Console(stderr=True))
        self._task = self._bar.add_task(os.path.basename(name), total=os.stat(name).st_size)
        self._state = "new"  # → "shown" → "stopped"

    def __call__(self, done: int, total: int) -> None:
        if self._state == "stopped":
            return
        if self._state == "new":
            self._bar.start()
            self._state = "shown"
        self._bar.update(self._task, completed=done, total=total)
        if done >= total:
            self.stop()

    def stop(self) -> None:
        if self._state == "shown":
            self._bar.stop()
        self._state = "stopped"
