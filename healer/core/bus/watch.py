"""The results bus: agent result files in, each applied exactly once, bad files set aside.

Agents (playbooks, Claude, any command) finish by writing
``<results dir>/heal-<kind>-<target>-<epoch>.json``. The bus notices it (a watchdog observer,
plus a start-up scan and a slow safety rescan), checks it (``healer.core.bus.validate``), and
applies it once (``healer.core.bus.ledger``); the file then moves to ``applied/``.

Files that are not strict JSON (no NaN/Infinity, no 1e400, no lone surrogates, no integers
past Python's digit limit), fail ``schemas/agent-result.schema.json``, are too big, too deep,
not UTF-8, symlinks, hard links, not regular files, or oddly named move to ``rejected/`` with a
``.reason`` file beside them. A file that ends before its document does may still be being
written: it is waited for while it changes or its writer holds it open, up to
``bus.max_wait_s``, and rejected as incomplete once its writer closed it and it stayed
unchanged for ``bus.settle_s``. Dot-files and ``*.tmp``/``*.part`` files are writes in
progress and are left alone (until they are abandoned for 10 minutes).

A name that is not UTF-8 or holds control characters is rejected at once (under a hashed
``<sha256>.bad`` name, its raw bytes quoted in the ``.reason``), even if it looks like a write
in progress.

The results dir, ``applied/``, ``rejected/`` and the seed inbox are healer's own
(``healer.core.safedirs``): created 0700, checked at start (``UnsafeDirError`` refuses a
symlink, another user's folder or a group/other-writable one), and every move goes through
descriptors of the checked folders, so a folder swapped for a symlink later is refused too
(the file stays where it is, and an ERROR line says why).

The same watcher also takes the fleet's seed files from this node's inbox.

Speed: the kernel's events are read straight from inotify (``healer.core.bus.inotify``; a
whole read of events queued under one lock; watchdog only where inotify is missing). Three
threads share the work: the checker takes every file that is due (up to ``BATCH_MAX``), sets
the bad ones aside and hands the valid ones to the applier, which applies and delivers
everything handed over since its last batch as one (up to ``APPLY_MAX``:
``Ledger.dispatch_batch``) and hands it to the mover, which makes every batch applied since
its last round durable (one journal record, two fsyncs: ``Ledger.settle``) and then moves
their files to ``applied/`` — each only if it is still the file that was checked. A slow
fsync (a busy disk's takes a tenth of a second now and then) so holds up neither the
checking nor the delivery, only the files' move. A file still being written waits in the
queue with a delay and never holds up the files behind it; any event on it (above all the
writer's close-after-write) makes it due at once, so a writer that finished costs no settle
or poll time. Events on writes in progress (dot-files, ``*.tmp``) queue nothing; the rescan
finds those abandoned. A file being applied is not checked again meanwhile (a rescan may see
it before it moves); an event on its name then (a new file in its place) has it checked
again once the batch is done.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from healer.core import safedirs, seeds
from healer.core.bus import inotify
from healer.core.bus.ledger import AgentResult, Applied, Ledger
from healer.core.bus.libc import rename_noreplace
from healer.core.bus.validate import (
    RESULT_NAME,
    Incomplete,
    LinkInProgress,
    PartialFiles,
    check_file,
    warm_up,
)
from healer.core.bus.watchdog_watcher import WatchdogWatcher
from healer.core.store.base import Store
from healer.errors import RejectedFile, UnsafeDirError

log = logging.getLogger(__name__)


# Writes in progress: dot-files, *.tmp/*.part/*.swp, editor backups, and Claude Code's
# Write tool, which writes "<name>.tmp.<pid>.<hex>" and renames it into place.
_IN_PROGRESS = re.compile(r"^\.|\.(tmp|part|swp)$|~$|\.tmp\.\d+\.[0-9a-f]+$")
ABANDONED_S = 600.0
SUBDIRS = ("applied", "rejected")
WATCHERS = ("inotify", "watchdog")  # inotify read directly (Linux), or watchdog's observer
BATCH_MAX = 64  # files the checker takes from the queue at once
APPLY_MAX = 512  # checked results the applier takes at once (one delivery batch)
READY_MAX = 2048  # checked results waiting for the applier before the checker waits too
MOVING_MAX = 4096  # applied results waiting for the disk before the applier waits too
PRUNE_EVERY_S = 60.0

SeedSubscriber = Callable[[seeds.Seed], None]


class Ready(NamedTuple):
    """A checked result file on its way through the applier and the mover."""

    path: str
    result: AgentResult
    ino: int  # the file that was checked: only it is moved to applied/


class ResultsBus(Ledger):
    """Watches the results dir (and the fleet seed inbox) and applies what lands there."""

    def __init__(
        self,
        results_dir: Path | str,
        store: Store,
        *,
        max_file_bytes: int = 1 << 20,
        settle_s: float = 2.0,
        max_wait_s: float = 60.0,
        rescan_s: float = 5.0,
        max_json_depth: int = 64,
        fleet_dir: Path | str | None = None,
        node: str | None = None,
        clock: Callable[[], float] = time.time,
        watcher: str = "inotify",
    ):
        if watcher not in WATCHERS:
            raise ValueError(f"watcher must be one of {', '.join(WATCHERS)}, got {watcher!r}")
        super().__init__(store)
        self.results_dir = Path(results_dir)
        self.max_file_bytes = max_file_bytes
        self.settle_s = settle_s
        self.max_wait_s = max(max_wait_s, settle_s)
        self.rescan_s = rescan_s
        self.max_json_depth = max_json_depth
        self.fleet_dir = Path(fleet_dir) if fleet_dir is not None else None
        self.node = node
        self._clock = clock
        self.watcher = watcher
        self.partials = PartialFiles(settle_s=settle_s, max_wait_s=max_wait_s, clock=clock)
        self._seed_subs: list[SeedSubscriber] = []
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # the queue changed, or a file was done with
        self._ready_cond = threading.Condition(lock)  # results were checked, or taken
        # Queued files are path strings, not Path objects: a Path costs more to make, hash and
        # name than the checking of a small result file does (a fifth of the bus's time).
        self._inbox = str(self.inbox_dir) if self.inbox_dir is not None else None
        self._ready: list[Ready] = []  # checked, for the applier
        self._inflight: set[str] = set()  # their paths: not checked again meanwhile, but
        self._again: set[str] = set()      # looked at again once moved (an event came)
        self._queue: list[tuple[float, int, str]] = []  # (due, seq, path) heap
        self._due: dict[str, float] = {}  # path → when it is due; heap entries not matching
        self._seq = 0                      # it are stale (the file was made due sooner)
        self._busy = 0  # files taken from the queue and not done with yet
        self._stop = threading.Event()
        self._checked_all = threading.Event()  # the checker stopped: the applier ends when idle
        # Applied batches waiting for the disk, then their move (None: nothing to wait for).
        self._moving: list[tuple[Applied | None, list[Ready]]] = []
        self._moving_n = 0  # results in self._moving
        self._applied_all = threading.Event()  # the applier stopped: the mover ends when idle
        self._worker: threading.Thread | None = None
        self._applier: threading.Thread | None = None
        self._mover: threading.Thread | None = None
        self._observer: inotify.DirWatcher | WatchdogWatcher | None = None
        self._last_rescan = 0.0
        self._last_prune = 0.0

    # -- wiring ----------------------------------------------------------------------------

    def subscribe_seeds(self, fn: SeedSubscriber) -> None:
        """Call ``fn`` for every seed file that arrives for this node."""
        self._seed_subs.append(fn)

    @property
    def inbox_dir(self) -> Path | None:
        if self.fleet_dir is None or not self.node:
            return None
        return self.fleet_dir / self.node

    def start(self) -> None:
        """Recover, scan what arrived while down, then watch."""
        self.check_dirs()
        warm_up()  # the schema validator's first build costs a second: not the first file's
        self.recover()
        self._stop.clear()
        self._checked_all.clear()
        self._applied_all.clear()
        self.rescan()  # queued in full first: what waited for the start goes in full batches
        self._mover = threading.Thread(target=self._move_loop, name="healer-bus-move",
                                       daemon=True)
        self._mover.start()
        self._applier = threading.Thread(target=self._apply_loop, name="healer-bus-apply",
                                         daemon=True)
        self._applier.start()
        self._worker = threading.Thread(target=self._check_loop, name="healer-bus",
                                        daemon=True)
        self._worker.start()
        folders = [str(f) for f in (self.results_dir, self.inbox_dir) if f is not None]
        if self.watcher == "inotify" and inotify.available():
            try:
                self._observer = inotify.DirWatcher(folders, self._on_events)
            except OSError as exc:  # e.g. fs.inotify.max_user_watches reached
                log.warning("bus: inotify unavailable (%s); watching with watchdog", exc)
        if self._observer is None:
            self._observer = WatchdogWatcher(folders, self._on_events)
        self._observer.start()

    def check_dirs(self) -> None:
        """Create (0700) or check the results dir, ``applied/``, ``rejected/`` and the seed
        inbox: ``UnsafeDirError`` if one is a symlink, another user's or group/other-writable
        (see ``healer.core.safedirs``)."""
        safedirs.ensure_private_dir(self.results_dir)
        for sub in SUBDIRS:
            safedirs.ensure_private_dir(self.results_dir, sub)
        if self.fleet_dir is not None and self.node:
            safedirs.ensure_private_dir(self.fleet_dir, self.node)

    def stop(self, timeout: float = 10.0) -> None:
        if self._observer is not None:
            self._observer.stop(timeout)
            self._observer = None
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
            self._ready_cond.notify_all()
        if self._worker is not None:
            self._worker.join(timeout)
            self._worker = None
        if self._applier is not None:  # it applies what was checked before it ends
            self._applier.join(timeout)
            self._applier = None
        if self._mover is not None:  # it moves what was applied before it ends
            self._mover.join(timeout)
            self._mover = None

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until nothing is queued or being processed (for --once and tests)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._due or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    # -- queueing --------------------------------------------------------------------------

    def enqueue(self, path: str | Path, delay: float = 0.0) -> None:
        """Look at ``path`` after ``delay`` s; a file already queued keeps the sooner time, so
        an event on a file waiting for its writer makes it due at once."""
        self.enqueue_many([os.fspath(path)], delay)

    def enqueue_many(self, paths: list[str], delay: float = 0.0) -> None:
        """``enqueue`` each of ``paths``, under one lock and with one wake-up of the worker."""
        due = time.monotonic() + delay
        with self._cond:
            for path in paths:
                if self._due.get(path, due + 1) <= due:
                    continue
                self._due[path] = due
                self._seq += 1
                heapq.heappush(self._queue, (due, self._seq, path))
            self._cond.notify()

    def _on_events(self, events: list[inotify.FileEvent], overflow: bool) -> None:
        """Queue the files a read of the watcher brought (one call for a whole burst)."""
        paths: list[str] = []
        for folder, name, closed in events:
            if _IN_PROGRESS.search(name) and not _odd_name(name):
                continue  # a write in progress: its rename brings the file (or a rescan)
            path = f"{folder}/{name}"
            if closed and RESULT_NAME.fullmatch(name):
                self.partials.closed(path)  # written in place: its writer is done
            paths.append(path)
        if overflow:  # the kernel dropped events: only a scan finds what they were about
            log.warning("bus: the inotify queue overflowed; rescanning the results dir")
            with self._cond:
                self._last_rescan = float("-inf")
                self._cond.notify()
        if paths:
            self.enqueue_many(paths)

    def rescan(self) -> None:
        """Queue every candidate file in the results dir and the inbox, oldest first."""
        self._last_rescan = time.monotonic()
        for folder in (self.results_dir, self.inbox_dir):
            if folder is None:
                continue
            try:
                entries = list(os.scandir(folder))
            except FileNotFoundError:
                continue
            entries = [e for e in entries if not e.is_dir(follow_symlinks=False)]

            def mtime(e: os.DirEntry[str]) -> float:
                try:
                    return e.stat(follow_symlinks=False).st_mtime
                except OSError:
                    return 0.0

            self.enqueue_many([e.path for e in sorted(entries, key=mtime)])

    def _next_batch(self) -> list[str] | None:
        """The files due now (at most ``BATCH_MAX``); [] when a rescan is due; None once
        stopped."""
        with self._cond:
            while not self._stop.is_set():
                now = time.monotonic()
                batch: list[str] = []
                while self._queue and self._queue[0][0] <= now and len(batch) < BATCH_MAX:
                    due, _, path = heapq.heappop(self._queue)
                    if self._due.get(path) == due:  # else stale: queued again sooner
                        del self._due[path]
                        if path not in self._inflight:
                            batch.append(path)
                        else:  # checked, being applied: perhaps a new file in its place
                            self._again.add(path)
                if batch:
                    self._busy += len(batch)
                    return batch
                if now - self._last_rescan >= self.rescan_s:
                    return []
                wait = self._queue[0][0] - now if self._queue else self.rescan_s
                self._cond.wait(max(0.001, min(wait, self.rescan_s)))
        return None

    def _check_loop(self) -> None:
        """The checker: takes the files due, sets aside the bad ones, hands the valid ones
        to the applier — and goes on with the next files while those are committed."""
        try:
            while (batch := self._next_batch()) is not None:
                if not batch:
                    self.rescan()
                    self._maybe_prune()
                    continue
                ready: list[Ready] = []
                try:
                    ready = self._check_batch(batch)
                except Exception:  # the loop never dies of one batch
                    log.exception("bus: unexpected error on a batch of %d files", len(batch))
                finally:
                    self._hand_over(ready, taken=len(batch))
        finally:
            self._checked_all.set()
            with self._cond:
                self._ready_cond.notify_all()

    def _hand_over(self, ready: list[Ready], taken: int) -> None:
        with self._cond:
            while len(self._ready) >= READY_MAX and not self._stop.is_set():
                self._ready_cond.wait(0.1)
            self._ready.extend(ready)
            self._inflight.update(r.path for r in ready)
            self._busy -= taken - len(ready)
            self._ready_cond.notify_all()
            self._cond.notify_all()

    def _apply_loop(self) -> None:
        """The applier: applies and delivers everything checked since its last batch as one
        (up to ``APPLY_MAX``), so batches grow with the rate, and hands it to the mover."""
        try:
            while True:
                with self._cond:
                    if not self._has_work(lambda: self._ready, self._checked_all):
                        return
                    batch, self._ready = self._ready[:APPLY_MAX], self._ready[APPLY_MAX:]
                    self._ready_cond.notify_all()  # room for the checker
                applied, ok = None, False
                try:
                    applied, ok = self._apply(batch), True
                except Exception:  # the loop never dies of one batch
                    log.exception("bus: unexpected error applying %d results", len(batch))
                finally:
                    self._hand_to_mover(applied, batch, ok)
        finally:
            self._applied_all.set()
            with self._cond:
                self._ready_cond.notify_all()

    def _has_work(self, queue: Callable[[], list[Any]], fed_all: threading.Event) -> bool:
        """Under ``self._cond``: wait until ``queue()`` holds work (True), or until the stage
        that feeds it has ended and it is empty (False: this stage ends too)."""
        while not queue():
            if fed_all.is_set():
                return False
            self._ready_cond.wait(1.0)
        return True

    def _hand_to_mover(self, applied: Applied | None, batch: list[Ready], ok: bool) -> None:
        """A batch that failed to apply (not ``ok``) is not moved: it is seen again."""
        with self._cond:
            if not ok:
                self._done_with(batch)
                return
            while self._moving_n >= MOVING_MAX and not self._stop.is_set():
                self._ready_cond.wait(0.1)
            self._moving.append((applied, batch))
            self._moving_n += len(batch)
            self._ready_cond.notify_all()

    def _move_loop(self) -> None:
        """The mover: makes every batch applied since its last round durable (one journal
        record, one round of fsyncs), then moves their files to ``applied/``."""
        while True:
            with self._cond:
                if not self._has_work(lambda: self._moving, self._applied_all):
                    return
                moving, self._moving, self._moving_n = self._moving, [], 0
                self._ready_cond.notify_all()  # room for the applier
            files = [r for _, batch in moving for r in batch]
            try:
                self.settle([applied for applied, _ in moving if applied is not None])
                self._move_applied(files)
            except Exception:  # the loop never dies of one round; its files stay
                log.exception("bus: unexpected error settling %d results", len(files))
            finally:
                with self._cond:
                    self._done_with(files)

    def _done_with(self, batch: list[Ready]) -> None:
        """Under ``self._cond``: the batch's files may be checked again (those an event came
        for meanwhile are, at once); drain sees them."""
        now = time.monotonic()
        for r in batch:
            self._inflight.discard(r.path)
            if r.path in self._again:
                self._again.discard(r.path)
                self._due[r.path] = now
                self._seq += 1
                heapq.heappush(self._queue, (now, self._seq, r.path))
        self._busy -= len(batch)
        self._cond.notify_all()

    def _maybe_prune(self) -> None:
        if time.monotonic() - self._last_prune < PRUNE_EVERY_S:
            return
        self._last_prune = time.monotonic()
        try:
            self.prune_journal()
        except Exception:
            log.exception("bus: pruning the ledger journal failed")

    # -- processing ------------------------------------------------------------------------

    def _check_batch(self, paths: list[str]) -> list[Ready]:
        """Handle what can be handled of each file alone; the valid results, to apply."""
        ready: list[Ready] = []
        for path in paths:
            try:
                checked = self._process(path)
            except Exception:  # one odd file never stops the batch
                log.exception("bus: unexpected error on %s", path)
                continue
            if checked is not None:
                ready.append(checked)
        return ready

    def _process(self, path: str) -> Ready | None:
        """Handle what can be handled of ``path`` alone; a valid result to apply, or None."""
        folder, _, name = path.rpartition("/")
        if folder == self._inbox:
            self._process_seed(Path(path))
            return None
        if name in SUBDIRS:  # a file that vanished meanwhile: FileNotFoundError below
            return None
        if _odd_name(name):
            if os.path.lexists(path):  # not gone already (a late event on a rejected file)
                self._reject(name, "name is not UTF-8 or holds control characters")
            return None
        if _IN_PROGRESS.search(name):
            self._maybe_abandoned(path, name)
            return None
        try:
            result = self._load(path, name)
        except FileNotFoundError:
            self.partials.forget(path)
            return None
        except LinkInProgress:
            self.enqueue(path, delay=self._poll_s)
            return None
        except Incomplete as inc:
            why = self.partials.verdict(path, inc)
            if why is None:
                self.stats.waits += 1
                self.enqueue(path, delay=self._poll_s)
                return None
            self.partials.forget(path)
            self._reject(name, why)
            return None
        except RejectedFile as exc:
            self.partials.forget(path)
            self._reject(name, exc.reason)
            return None
        self.partials.forget(path)
        return result

    @property
    def _poll_s(self) -> float:
        """How soon a file still being written is looked at again. Not often: the writer's
        close-after-write (or any event on it) makes it due at once, so this only measures
        how long a file stays unchanged, in steps of a quarter of ``settle_s``."""
        return max(0.02, self.settle_s / 4)

    def _maybe_abandoned(self, path: str, name: str) -> None:
        try:
            age = self._clock() - os.lstat(path).st_mtime
        except FileNotFoundError:
            return
        if age > ABANDONED_S:
            self._reject(name, f"partial write abandoned for {int(age)} s")

    def _load(self, path: str, name: str) -> Ready:
        c = check_file(path, max_file_bytes=self.max_file_bytes,
                       max_json_depth=self.max_json_depth, settle_s=self.settle_s,
                       clock=self._clock, name=name)
        return Ready(path, AgentResult(id=c.id, name=name, kind=c.kind, target=c.target,
                                       epoch=c.epoch, data=c.data, received_at=self._clock()),
                     c.ino)

    def _apply(self, ready: list[Ready]) -> Applied | None:
        """Apply (or publish) the batch; what is left to make durable before its files move.
        A batch that fails stays in the results dir to be seen again (the ledger makes that
        harmless)."""
        applied = self.dispatch_batch([r.result for r in ready])
        for r in ready:
            self._file_event(r.result, r.result.name)
        return applied

    def _move_applied(self, files: list[Ready]) -> None:
        """Move applied files into ``applied/``, the folders opened and checked once. A file
        that is no longer the one checked (a writer put a new one in its place) stays, to be
        checked in turn."""
        try:
            with safedirs.opened(self.results_dir, "applied") as dst, \
                    safedirs.opened(self.results_dir) as src:
                for r in files:
                    name = r.result.name
                    with contextlib.suppress(FileNotFoundError):
                        if os.stat(name, dir_fd=src, follow_symlinks=False).st_ino != r.ino:
                            with self._cond:
                                self._again.add(r.path)
                            continue
                        # One renameat2 where it works; a taken name gets .2, .3 … as before.
                        if not rename_noreplace(src, name, dst, name):
                            safedirs.move(src, name, dst)
        except UnsafeDirError as exc:
            log.error("bus: %s; %d applied files stay in the results dir", exc, len(files))

    def _move(self, name: str, sub: str, reason: str | None = None) -> str | None:
        """Move the results dir's file ``name`` into ``sub``/ (and write its ``.reason``)
        through descriptors of the checked folders; the name it got, or None if it vanished
        or a folder is unsafe."""
        raw = os.fsencode(name)
        dest = name
        if len(raw) > 200 or _odd_name(name):
            dest = hashlib.sha256(raw).hexdigest()[:32] + ".bad"
        try:
            return safedirs.move_aside(
                self.results_dir, name, sub, dest_name=dest,
                reason=None if reason is None else f"{reason}\nfile: {_shown(name)}\n")
        except FileNotFoundError:
            return None
        except UnsafeDirError as exc:
            log.error("bus: %s; %s stays in the results dir", exc, _shown(name))
            return None

    def _reject(self, name: str, reason: str) -> None:
        self._move(name, "rejected", reason)
        shown = _printable(name)
        self.stats.rejected += 1
        self.stats.last_rejections = [*self.stats.last_rejections[-19:], (shown, reason)]
        log.warning("bus: rejected %s: %s", _shown(name), reason)
        self._file_event(None, shown, reason)

    def _process_seed(self, path: Path) -> None:
        if _IN_PROGRESS.search(path.name) or not seeds.NAME_RE.fullmatch(path.name):
            return
        try:
            seed = seeds.read(path)
        except FileNotFoundError:
            return
        except RejectedFile as exc:
            try:
                seeds.reject(path, exc.reason)
            except OSError:
                pass
            except UnsafeDirError as unsafe:
                log.error("bus: seed %s left in the inbox: %s", path.name, unsafe)
            log.warning("bus: rejected seed %s: %s", path.name, exc.reason)
            return
        for fn in list(self._seed_subs):
            try:
                fn(seed)
            except Exception:
                log.exception("bus: seed subscriber failed on %s", path.name)
        try:
            seeds.archive(path)
        except FileNotFoundError:
            pass
        except UnsafeDirError as exc:
            log.error("bus: seed %s not archived: %s", path.name, exc)
        self.stats.seeds += 1


_RAW_BYTE = re.compile("[\udc80-\udcff]")  # how os.fsdecode escapes bytes that are not UTF-8
_ODD_CHAR = re.compile("[\x00-\x1f\x7f\udc80-\udcff]")


def _not_utf8(name: str) -> bool:
    return _RAW_BYTE.search(name) is not None


def _odd_name(name: str) -> bool:
    """Not UTF-8 or holds control characters: kept out of the names healer writes."""
    return _ODD_CHAR.search(name) is not None


def _printable(name: str) -> str:
    """A file name as it may appear in an event or the stats: the raw bytes' repr when it is
    not UTF-8, so the record itself stays valid text."""
    return repr(os.fsencode(name)) if _not_utf8(name) else name


def _shown(name: str) -> str:
    """A file name quoted for a log line or a ``.reason`` file."""
    return repr(os.fsencode(name)) if _not_utf8(name) else repr(name)
