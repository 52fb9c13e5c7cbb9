"""Where log lines come from: files (whole or followed like ``tail -F``), stdin, a command's
output, and Loki (see ``healer.detect.loki``).

Every source is an iterator of ``Event``\\ s, and ``Follower`` runs any number of them in
threads, feeding each into its own ``StreamScanner`` and handing the alerts to a callback::

    follower = Follower(engine, on_alert=print)
    follower.add_file("/var/log/agent.log")                       # survives rotation/truncation
    follower.add_command(["kubectl", "logs", "-f", "-n", "cto", "-l", "app=coderun"])
    follower.run(stop=threading.Event())                          # blocks until stopped/ended

``FileFollower`` is woken by the kernel (inotify through watchdog, on the file's folder) the
moment the file is written, created, moved or deleted, and also looks every ``poll_s`` (1 s)
in case an event was missed or the filesystem sends none (NFS, some FUSE mounts; without
watchdog's observer it polls every 0.2 s). It reads what was appended, notices a rotation (the
path names another inode: the old file is read to its end first) and a truncation (the file
got shorter than what was read), and restarts at the top.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from healer.core.proc import kill_group
from healer.detect.engine import Alert, Engine, StreamScanner
from healer.errors import HealerError, UnavailableError, UsageError

READ_BYTES = 1 << 20  # one read from a file, pipe or command


@dataclass(frozen=True)
class Event:
    """What a source produced.

    ``kind``: ``data`` (raw bytes, maybe partial lines), ``entry`` (one log entry with its own
    timestamp and labels, e.g. from Loki), ``restart`` (the stream starts over: ``reason``
    rotated/truncated) or ``end`` (the source is done; ``reason`` says why if it failed).
    """

    kind: str
    source: str
    data: bytes = b""
    ts: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""


class FileFollower:
    """``tail -F`` for one path: call ``poll()`` (non-blocking) or iterate ``follow()``."""

    def __init__(self, path: str | Path, *, from_start: bool = True, source: str | None = None):
        self.path = Path(path)
        self.source = source or str(path)
        self._from_start = from_start
        self._fh: IO[bytes] | None = None
        self._id: tuple[int, int] | None = None
        self._pos = 0

    def _open(self, *, at_end: bool) -> bool:
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - kept open across polls on purpose
        except (FileNotFoundError, PermissionError, IsADirectoryError):
            return False
        st = os.fstat(fh.fileno())
        self._fh, self._id = fh, (st.st_dev, st.st_ino)
        self._pos = fh.seek(0, os.SEEK_END) if at_end else 0
        return True

    def _read(self) -> list[Event]:
        """Everything appended since the last read, in chunks of at most READ_BYTES."""
        assert self._fh is not None
        out = []
        while True:
            chunk = self._fh.read(READ_BYTES)
            if not chunk:
                return out
            out.append(Event("data", self.source, chunk))
            self._pos += len(chunk)

    def poll(self) -> list[Event]:
        """What happened since the last call: new data, rotation, truncation."""
        events: list[Event] = []
        if self._fh is None:
            if not self._open(at_end=not self._from_start):
                return events
            self._from_start = True  # a file that appears later is read from its start
        events += self._read()
        try:
            st = os.stat(self.path)
        except OSError:
            return events  # rotated away and not yet re-created: keep reading the old one
        if (st.st_dev, st.st_ino) != self._id:
            events += self._read()  # the writer may have added lines before it let go
            self.close()
            if self._open(at_end=False):
                events.append(Event("restart", self.source, reason="rotated"))
                events += self._read()
        elif st.st_size < self._pos:
            assert self._fh is not None
            self._pos = self._fh.seek(0)
            events.append(Event("restart", self.source, reason="truncated"))
            events += self._read()
        return events

    def follow(self, stop: threading.Event, poll_s: float | None = None) -> Iterator[Event]:
        wake = threading.Event()
        observer = _watch(self.path, wake)
        if poll_s is None:
            poll_s = 1.0 if observer is not None else 0.2
        try:
            while not stop.is_set():
                wake.clear()
                events = self.poll()
                yield from events
                if not events:
                    wake.wait(min(poll_s, 0.2) if stop.is_set() else poll_s)
        finally:
            if observer is not None:
                observer.stop()
            self.close()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _watch(path: Path, wake: threading.Event) -> Any:
    """An observer that sets ``wake`` on any change to ``path`` (None if it cannot run)."""
    try:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError:  # pragma: no cover - watchdog is a dependency
        return None
    target = str(path.absolute())

    class Wake(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            paths = (event.src_path, getattr(event, "dest_path", ""))
            if target in (os.fsdecode(p) for p in paths if p):
                wake.set()

    observer = Observer()
    try:
        observer.schedule(Wake(), str(path.absolute().parent), recursive=False)
        observer.daemon = True
        observer.start()
    except OSError:  # no such folder yet, out of inotify watches: poll instead
        return None
    return observer


def read_stream(stream: IO[bytes], source: str, stop: threading.Event) -> Iterator[Event]:
    """A pipe or stdin, until EOF."""
    read = getattr(stream, "read1", stream.read)
    while not stop.is_set():
        chunk = read(READ_BYTES)
        if not chunk:
            break
        yield Event("data", source, chunk)
    yield Event("end", source)


class CommandSource:
    """A command's output (stdout and stderr), started with an argv list, never a shell."""

    def __init__(self, argv: Sequence[str], *, source: str | None = None):
        if isinstance(argv, str) or not argv:
            raise UsageError("a command is an argv list, e.g. ['kubectl', 'logs', '-f', ...]")
        self.argv = [str(a) for a in argv]
        self.source = source or "cmd:" + self.argv[0]
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        except FileNotFoundError:
            raise UsageError(f"command not found: {self.argv[0]}") from None
        except PermissionError:
            raise UsageError(f"command not executable: {self.argv[0]}") from None

    def events(self, stop: threading.Event) -> Iterator[Event]:
        assert self.proc.stdout is not None
        try:
            for ev in read_stream(self.proc.stdout, self.source, stop):
                if ev.kind == "end":
                    break
                yield ev
        finally:
            if not stop.is_set():  # end of output: give the command a moment to exit itself
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=2)
            self.stop()
        code = self.proc.returncode
        yield Event("end", self.source, reason="" if code in (0, None) or stop.is_set()
                    else f"exited with status {code}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            kill_group(self.proc)  # type: ignore[arg-type]
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)


class Follower:
    """Runs sources in threads and delivers their alerts, in order per source, to a callback."""

    def __init__(self, engine: Engine, on_alert: Callable[[Alert], None], *,
                 start_time: float | None = None, not_before: float | None = None,
                 poll_s: float | None = None):
        self.engine = engine
        self.on_alert = on_alert
        self.start_time = start_time
        self.not_before = not_before
        self.poll_s = poll_s
        # Sources that ended badly (HealerError, or UnavailableError for a failed command):
        # the caller reports them and picks the exit code.
        self.failures: list[Exception] = []
        self._makers: list[tuple[str, Callable[[threading.Event], Iterator[Event]]]] = []
        self._commands: list[CommandSource] = []
        self._scanners: dict[str, StreamScanner] = {}

    def add_file(self, path: str | Path, *, from_start: bool = True) -> None:
        f = FileFollower(path, from_start=from_start)
        self._makers.append((f.source, lambda stop: f.follow(stop, self.poll_s)))

    def add_stream(self, stream: IO[bytes], source: str = "-") -> None:
        self._makers.append((source, lambda stop: read_stream(stream, source, stop)))

    def add_command(self, argv: Sequence[str]) -> CommandSource:
        cmd = CommandSource(argv)
        self._commands.append(cmd)
        self._makers.append((cmd.source, cmd.events))
        return cmd

    def add_events(self, name: str, make: Callable[[threading.Event], Iterator[Event]]) -> None:
        """Any other source (e.g. ``healer.detect.loki.LokiSource(...).events``)."""
        self._makers.append((name, make))

    def _scanner(self, source: str) -> StreamScanner:
        s = self._scanners.get(source)
        if s is None:
            s = self._scanners[source] = self.engine.stream(
                source, start_time=self.start_time, not_before=self.not_before)
        return s

    def handle(self, ev: Event) -> list[Alert]:
        """Feed one event to its stream's scanner; returns the alerts it raised."""
        s = self._scanner(ev.source)
        if ev.kind == "data":
            return s.feed(ev.data)
        if ev.kind == "entry":
            return s.feed_line(ev.data, ts=ev.ts, labels=ev.labels)
        if ev.kind == "restart":
            out = s.flush()
            s.restart()
            return out
        if ev.kind == "end":
            if ev.reason:
                self.failures.append(UnavailableError(f"{ev.source}: {ev.reason}"))
            return s.flush()
        return []

    def _pump(self, name: str, make: Callable[[threading.Event], Iterator[Event]],
              stop: threading.Event, q: queue.Queue[Event | None]) -> None:
        try:
            for ev in make(stop):
                _put(q, ev, stop)
                if stop.is_set():
                    break
        except HealerError as exc:
            self.failures.append(exc)
        except Exception as exc:  # a broken source must not take the others down
            self.failures.append(UnavailableError(f"{name}: {type(exc).__name__}: {exc}"))
        finally:
            _put(q, None, stop)

    def run(self, stop: threading.Event | None = None, duration: float | None = None) -> None:
        """Run every source until all have ended, ``stop`` is set or ``duration`` passed."""
        stop = stop or threading.Event()
        q: queue.Queue[Event | None] = queue.Queue(maxsize=1024)
        threads = [threading.Thread(target=self._pump, args=(name, make, stop, q), daemon=True,
                                    name=f"healer-source-{i}")
                   for i, (name, make) in enumerate(self._makers)]
        for t in threads:
            t.start()
        deadline = None if duration is None else time.monotonic() + duration
        running = len(threads)
        try:
            while running and not stop.is_set():
                timeout = 0.2 if deadline is None else max(0.0, deadline - time.monotonic())
                if deadline is not None and timeout <= 0:
                    break
                try:
                    ev = q.get(timeout=min(timeout, 0.2))
                except queue.Empty:
                    continue
                if ev is None:
                    running -= 1
                    continue
                for alert in self.handle(ev):
                    self.on_alert(alert)
        finally:
            stop.set()
            for cmd in self._commands:
                cmd.stop()
            for t in threads:
                t.join(timeout=2)
            while True:  # what the sources produced before they were stopped still counts
                try:
                    ev = q.get_nowait()
                except queue.Empty:
                    break
                if ev is not None:
                    for alert in self.handle(ev):
                        self.on_alert(alert)
            for s in self._scanners.values():
                for alert in s.flush():
                    self.on_alert(alert)


def _put(q: queue.Queue[Any], item: Any, stop: threading.Event) -> None:
    while True:
        try:
            q.put(item, timeout=0.2)
            return
        except queue.Full:
            if stop.is_set():
                return
