"""Scanning a whole file fast: block reads into one reused buffer, regions in parallel.

The file is split at newline boundaries into one region per worker. The calling process scans
the first region itself; each other region is scanned by a forked child that sends back only
its raw hits and its newline count (marshal over a pipe), so line numbers stay exact. Reads go
through ``os.preadv`` into a buffer that is allocated once, so no page of the file is mapped or
copied twice. Workers are used only for files of at least ``PARALLEL_MIN_BYTES`` and where
``fork`` exists; a worker that fails is redone in the calling process.

With fewer regions than cores, each region reads its next block on a thread while it scans
one (``scan_region``); a lone region (one worker, or a small file) that is written out as it
goes is rendered and emitted while it is scanned (``_scan_emitting``).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import marshal
import mmap
import os
import stat
import struct
import threading
from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter

from healer.detect import _match, _native
from healer.detect._blocks import BLOCK_BYTES, LOOKBACK_LINES, BlockEngine, RawHit, StartOf
from healer.detect._timestamps import HEAD_BYTES
from healer.detect.alert import NO_LABELS, Alert
from healer.detect.lines import SourceStarts, Unknown
from healer.errors import UnavailableError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeAlias

PARALLEL_MIN_BYTES = 32 << 20
# Hits rendered and emitted at a time where the output goes out at once: a slice's alerts,
# texts and JSON reuse the memory of the one before (two workers at 5 % failure lines: 4,096
# at a time took 9,500 page faults in 54 MB and 23,400 in 268 MB, 1,024 8,000 and 18,200,
# and 3–5 ms less; one worker, 268 MB: 7 ms less; 512 no better).
EMIT_SLICE = 1024
# Reading ahead, a region reads this many blocks at a time: each read handed over costs a
# switch of threads (measured, one worker at 0.1 % / 5 % failure lines in 268 MB: 0.180 /
# 0.301 s with one block, 0.162 / 0.288 s with two; four were no faster, and slower in 54 MB).
READ_AHEAD_BLOCKS = 2
# A lone region's hits are rendered and emitted as soon as its blocks have found this many
# (measured at 5 % failure lines in 268 MB: 4,096 at a time took ~7,000 more page faults).
STREAM_HITS = 256
_TAIL_READ = 1 << 20  # how far before a region the borrowed-timestamp heads are looked for
_ORIGIN = itemgetter(5)  # a raw hit's source (RawHit)

Progress = Callable[[int, int], None]


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def spare_cores(regions: int) -> bool:
    """Whether this process may use more cores than it scans regions at once: then each
    region reads ahead (``scan_region``). With a region per core, reading ahead only
    competes with the scans (measured: ~5 % slower with 2 workers on 2 cores)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores > regions


def scan_file(engine: BlockEngine, path: str, *, source: str, start_time: float | None,
              not_before: float | None, labels: Mapping[str, str] | None,
              workers: int | None, progress: Progress | None,
              render: Callable[[list[Alert]], Any] | None = None,
              idle: Callable[[], None] | None = None,
              emit: Callable[[Any], Any] | None = None) -> list[Any]:
    """Scan a file; without ``render`` return its alerts.

    With ``render``, each region's alerts are passed to ``render`` where that region was
    scanned (in its worker, in parallel) and the (marshal-able) results come back in file
    order: how ``healer scan`` formats its output on every core. ``idle`` is called in this
    process once its own scan is done, while the workers finish theirs.

    With ``emit`` too, each region is rendered ``EMIT_SLICE`` hits at a time and each slice's
    result is passed to ``emit`` in the process that rendered it, in file order (a worker
    waits for its turn), and what ``emit`` returns comes back instead, one item a slice: a
    worker writes its own output to a shared file descriptor rather than sending it here
    first. Output buffered in this process must be flushed before the call (a worker writes
    below it).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device: it can only be streamed
            alerts = _scan_stream(engine, fd, source, start_time, not_before, labels)
            if render is None:
                return alerts
            return [(emit or _same)(render(alerts))]
        size = st.st_size
        seen_at = engine.clock()
        start = start_time
        if start is None:
            start = engine.first_line_ts(os.pread(fd, HEAD_BYTES * 8, 0))
            if start is None:
                start = seen_at
        # Forking a process that runs other threads can copy a lock some thread holds: by
        # default only a single-threaded caller (the CLI) scans in workers.
        n = workers if workers is not None else (
            default_workers() if threading.active_count() == 1 else 1)
        if n < 2 or size < PARALLEL_MIN_BYTES or not hasattr(os, "fork"):
            regions = [(0, size)]
        else:
            regions = _split(fd, size, n)
        pats = engine.catalog.patterns

        sources = FileSources(fd, seen_at)

        def finish(hits: list[RawHit], base: int,
                   emit_now: Callable[[Any], Any] | None = None,
                   windows: SourceWindows | None = None) -> Any:
            start_of = (windows or SourceWindows(sources)).start_of(hits)
            if start_of is not None:
                sources.expect(set(map(_ORIGIN, hits)))

            def alerts_of(part: list[RawHit]) -> list[Alert]:
                return engine.alerts(part, base=base, source=source, start=start,
                                     seen_at=seen_at, labels=labels, not_before=not_before,
                                     start_of=start_of)

            if render is not None and emit_now is not None:
                # Output to emit is made a slice of hits at a time, each slice's hits dropped
                # as it goes: the alerts and texts of a slice (and its JSON, where it goes out
                # at once) reuse the memory of the one before instead of taking fresh pages
                # for a whole region (the kernel's zeroing of them costs more than the
                # rendering). A worker passes _same: it keeps the slices for its turn.
                done = []
                while hits:
                    part = hits[:EMIT_SLICE]
                    del hits[:EMIT_SLICE]
                    done.append(emit_now(render(alerts_of(part))))
                return done
            alerts = alerts_of(hits)
            result = render(alerts) if render is not None else [
                (a.pattern.index, a.line_no, a.line, a.ts, a.level,  # type: ignore
                 a.origin) for a in alerts]
            return result if emit_now is None else [emit_now(result)]

        # A lone region (no worker waits for its line count) is emitted as it is scanned.
        windows = SourceWindows(sources)

        def streamed(hits: list[RawHit]) -> list[Any]:
            return list(finish(hits, 0, emit, windows))

        # The scan makes tuples and strings by the hundred thousand and no reference cycle:
        # the cyclic collector would only walk them again and again. It is paused for a
        # single-threaded caller (the CLI); a caller with threads may need it meanwhile.
        pause_gc = threading.active_count() == 1 and gc.isenabled()
        if pause_gc:
            gc.disable()
        try:
            # (Not under a progress bar: the bar stops when the first alerts are printed.)
            results = _run_regions(engine, fd, size, regions, progress, finish, idle, emit,
                                   streamed if progress is None else None)
        finally:
            if pause_gc:
                gc.enable()
    finally:
        os.close(fd)
    if render is not None:
        return results
    out: list[Any] = []
    label_map = labels or NO_LABELS
    for rows in results:
        for i, line_no, line, ts, level, origin in rows:
            p = pats[i]
            out.append(Alert(p.code, p.id, p.priority, p.severity, source, line_no, line, ts,
                             label_map, p, level, origin))
    return out


class FileSources:
    """When each source named by a line prefix (kubectl ``[pod/…]``, a compose service) starts
    in a regular file: the time of its first line. The sources the hits about to be rendered
    name (``expect``) are looked up together the first time one is asked, by one pass over
    the lines up to the last one's first line (``SourceStarts.first_of_many``; the first line
    of a source is usually near the top); only a hit without a source (the latest start before
    it) reads every line, in one pass the first time it is asked. Nothing is read for a file
    whose windowed hits name no source."""

    def __init__(self, fd: int, seen_at: float):
        self.fd = fd
        self.seen_at = seen_at
        self._starts: SourceStarts | None = None
        self._first: dict[str, float | None] = {}
        self._expected: set[str] = set()
        self.prefixed = SourceStarts.prefixed(os.pread(fd, 1 << 16, 0))

    def expect(self, sources: Iterable[str]) -> None:
        """Sources the next ``start_of`` calls may ask for ("" among them is ignored)."""
        self._expected.update(sources)

    def start_of(self, source: str, when: float) -> float | None:
        if source and self._starts is None:
            if source in self._first:
                return self._first[source]
            size = os.fstat(self.fd).st_size
            if not size:
                return None
            wanted = {s for s in self._expected if s and s not in self._first} | {source}
            self._expected.clear()
            with mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ) as mm:
                found = SourceStarts.first_of_many(mm, sorted(wanted), self.seen_at)
            for name, start in found.items():
                if not isinstance(start, Unknown):
                    self._first[name] = start
            if source in self._first:
                return self._first[source]
        if self._starts is None:
            self._starts = SourceStarts()
            size = os.fstat(self.fd).st_size
            if size:
                with mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ) as mm:
                    self._starts.track(mm, 0, size, self.seen_at)
        return self._starts.start_of(source, when)


class SourceWindows:
    """Whether a region's windowed hits count from the start of their own source
    (``FileSources.start_of``) or from the agent's.

    Per-source pre-flight windows only cost something in a log that names sources: one whose
    head does (``FileSources.prefixed``), or one where a hit names one. A region asks once for
    all its hits, or slice after slice as it is scanned and emitted (``_scan_emitting``): then
    a hit that names a source switches the windows of the region's hits from its slice on."""

    def __init__(self, sources: FileSources):
        self._sources = sources
        self._named = sources.prefixed

    def start_of(self, hits: list[RawHit]) -> StartOf | None:
        # (map and itemgetter: no Python frame per hit)
        if not self._named and any(map(_ORIGIN, hits)):
            self._named = True
        return self._sources.start_of if self._named else None


def _scan_stream(engine: BlockEngine, fd: int, source: str, start_time: float | None,
                 not_before: float | None, labels: Mapping[str, str] | None) -> list[Alert]:
    stream = engine.stream(source, start_time=start_time, labels=labels, not_before=not_before)
    alerts: list[Alert] = []
    while chunk := os.read(fd, BLOCK_BYTES):
        alerts += stream.feed(chunk)
    return alerts + stream.flush()


def _split(fd: int, size: int, n: int) -> list[tuple[int, int]]:
    """``n`` regions of about the same size, each starting at a line.

    (The calling process once took a 3 % smaller region, for printing what the workers sent
    it. They write their own output now, and a forked worker starts ~3 ms late and writes
    after the caller: with two workers, even regions took 5 / 11 / 2 ms less at 0.1 / 5 % /
    mixed in 268 MB, and −1.2 / +0.3 / −0.3 ms in 54 MB.)"""
    cuts = [0]
    for k in range(1, n):
        guess = int(size * k / n)
        chunk = os.pread(fd, 1 << 16, guess)
        nl = chunk.find(b"\n")
        cut = guess + nl + 1 if nl >= 0 else cuts[-1]
        if cut > cuts[-1]:
            cuts.append(cut)
    cuts.append(size)
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a] or [(0, size)]


# finish(hits, base) → the region's result; finish(hits, base, emit) → the results of its
# slices, each emitted as soon as made (the hits list is consumed).
Finish: TypeAlias = "Callable[..., Any]"


def _run_regions(engine: BlockEngine, fd: int, size: int, regions: list[tuple[int, int]],
                 progress: Progress | None, finish: Finish,
                 idle: Callable[[], None] | None = None,
                 emit: Callable[[Any], Any] | None = None,
                 streamed: Callable[[list[RawHit]], list[Any]] | None = None) -> list[Any]:
    """Region 0 here, the others in forked workers; each result is ``finish(hits, base)``, or
    with ``emit`` the emitted results of its slices (``finish(hits, base, emit)``), in file
    order. A lone region with ``emit`` is emitted as it is scanned: ``streamed(hits)``, the
    emitted results of some hits of region 0 (``_scan_emitting``).

    A worker sends its newline count as soon as it has scanned, gets back the line number its
    region starts at, and then finishes (e.g. formats) its alerts in parallel with the others.
    The first worker's region starts where this process's ends, so it is told its line as soon
    as this process has scanned; with that one worker, this process then finishes its own
    alerts at once instead of waiting for the worker's count first. With ``emit``, a worker
    that has rendered its slices waits for its turn (a byte from this process, sent once every
    region before it is emitted), emits them, and sends back what ``emit`` returned for each.
    """
    out = emit or _same
    ahead = spare_cores(len(regions))
    shared = mmap.mmap(-1, 8 * len(regions))  # per-region progress, written by the workers

    def here(hits: list[RawHit], base: int = 0) -> list[Any]:
        """A region's results, rendered here in its turn: emitted as they are made."""
        if emit is None or not hits:
            return [out(finish(hits, base))]
        return list(finish(hits, base, emit))

    def report(k: int, done: int) -> None:
        struct.pack_into("q", shared, 8 * k, done)
        if progress is not None and k == 0:
            progress(sum(struct.unpack_from(f"{len(regions)}q", shared)), size)

    workers: list[_Worker] = []
    try:
        if len(regions) == 1 and emit is not None and streamed is not None:
            results = _scan_emitting(engine, fd, regions[0], lambda d: report(0, d), streamed,
                                     ahead) or here([])
            if idle is not None:
                idle()
            if progress is not None:
                progress(size, size)
            return results
        for k in range(1, len(regions)):
            workers.append(_Worker.fork(engine, fd, regions[k], k, report, finish, workers,
                                        emit, read_ahead=ahead))
        newlines, hits = scan_region(engine, fd, *regions[0], lambda d: report(0, d),
                                     read_ahead=ahead)
        base = newlines
        if workers:
            workers[0].base = base
            workers[0].send_base()
        results = here(hits) if len(workers) == 1 else []
        for w in workers:
            w.base = base
            count = w.scanned()
            if count is None:  # the worker failed: do its part here
                count, w_hits = scan_region(engine, fd, *regions[w.k])
                w.result = (finish(w_hits, base),)
            base += count
        if not results:
            results = here(hits)
        if idle is not None:
            idle()  # while the workers finish theirs
        for w in workers:
            if w.result is not None:  # rendered here: emitted here, in its turn
                results.append(out(w.result[0]))
                continue
            w.send_turn()
            got = w.finished()
            if got is None:
                if w.emitted:  # some of its output may be out: redoing it would repeat it
                    raise UnavailableError(
                        f"a scan worker died while writing its part of the output (from line "
                        f"{w.base + 1} on): the output is incomplete; run again, or with "
                        f"--workers 1")
                _, w_hits = scan_region(engine, fd, *regions[w.k])
                results += here(w_hits, w.base)
            elif w.emits:  # what emit returned for each of its slices
                results += got[0]
            else:
                results.append(got[0])
        if progress is not None:
            progress(size, size)
        return results
    finally:
        for w in workers:
            w.reap()
        shared.close()


class _Worker:
    """A forked process scanning one region (see ``_run_regions`` for the protocol)."""

    def __init__(self, k: int, pid: int, up: int, down: int, *, emits: bool = False):
        self.k, self.pid, self.up, self.down = k, pid, up, down
        self.emits = emits  # it writes its own output, announcing that first
        self.base = 0
        self.result: tuple[Any] | None = None
        self.done = False
        self.sent: bool | None = False  # the base line sent (None: could not be)
        self.emitted = False  # it began to write its output

    @classmethod
    def fork(cls, engine: BlockEngine, fd: int, region: tuple[int, int], k: int,
             report: Callable[[int, int], None], finish: Finish, others: list[_Worker],
             emit: Callable[[Any], Any] | None = None, *, read_ahead: bool = False) -> _Worker:
        up_r, up_w = os.pipe()
        down_r, down_w = os.pipe()
        with contextlib.suppress(OSError, AttributeError, ImportError):
            import fcntl  # Linux: a 1 MiB pipe carries a worker's output in fewer writes

            fcntl.fcntl(up_w, fcntl.F_SETPIPE_SZ, 1 << 20)  # type: ignore[attr-defined]
        pid = os.fork()
        if pid == 0:  # the worker: never returns, never runs the parent's cleanup
            code = 70
            try:
                for fd_ in (up_r, down_w, *(f for o in others for f in (o.up, o.down))):
                    os.close(fd_)
                count, hits = scan_region(engine, fd, *region, lambda d: report(k, d),
                                          read_ahead=read_ahead)
                os.write(up_w, struct.pack("q", count))
                base = struct.unpack("q", _read_exact(down_r, 8))[0]
                if emit is None:
                    result = finish(hits, base)
                else:
                    parts = finish(hits, base, _same)  # rendered a slice at a time
                    if _read_exact(down_r, 1) != _TURN:
                        raise SystemExit(70)  # the caller is gone: emit nothing
                    os.write(up_w, _EMITTING)  # from here on, a failure is not redone
                    result = [emit(part) for part in parts]
                with os.fdopen(up_w, "wb") as out:
                    out.write(marshal.dumps(result))
                code = 0
            finally:
                os._exit(code)
        os.close(up_w)
        os.close(down_r)
        return cls(k, pid, up_r, down_w, emits=emit is not None)

    def send_base(self) -> None:
        """Send the worker its base line (it reads it once it has scanned)."""
        if self.sent is not False:
            return
        try:
            os.write(self.down, struct.pack("q", self.base))
            self.sent = True
        except OSError:
            self.sent = None
            self.reap()

    def send_turn(self) -> None:
        """Tell the worker every region before its own is emitted (``emit`` mode)."""
        if self.sent:
            try:
                os.write(self.down, _TURN)
            except OSError:
                self.reap()

    def scanned(self) -> int | None:
        """Send the worker its base line (unless sent) and wait for its newline count."""
        if self.result is not None:
            return None
        self.send_base()
        if not self.sent:
            return None
        head = _read_exact(self.up, 8)
        if len(head) < 8:
            self.reap()
            return None
        return int(struct.unpack("q", head)[0])

    def finished(self) -> tuple[Any] | None:
        """Its result, or None if it failed."""
        if self.result is not None:
            return self.result
        if self.done:
            return None
        with os.fdopen(os.dup(self.up), "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(self.pid, 0)
        self.done = True
        if self.emits and data[:1] == _EMITTING:
            self.emitted = True
            data = data[1:]
        if status != 0 or not data:
            return None
        try:
            # Our own forked child wrote it a moment ago over a private pipe.
            return (marshal.loads(data),)  # noqa: S302
        except (EOFError, ValueError, TypeError):
            return None

    def reap(self) -> None:
        for fd_ in (self.up, self.down):
            with contextlib.suppress(OSError):
                os.close(fd_)
        self.up = self.down = -1
        if not self.done:
            import signal  # (here: its enums cost every scan's start-up ~0.4 ms)

            self.done = True
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)


_TURN = b"T"  # to a worker: every region before yours is emitted
_EMITTING = b"E"  # from a worker: I am writing my output now


def _same(result: Any) -> Any:
    return result


def _read_exact(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def scan_region(engine: BlockEngine, fd: int, lo: int, hi: int,
                report: Callable[[int], None] | None = None, *, read_ahead: bool = False,
                found: Callable[[list[RawHit]], None] | None = None
                ) -> tuple[int, list[RawHit]]:
    """Scan ``[lo, hi)`` of the file (``lo`` at a line start): (newlines, raw hits). With
    ``found``, each block's hits are passed to it instead (and none are returned).

    With ``read_ahead``, blocks are read into two buffers in turn: while one block is
    scanned, the next is read into the other on a thread (``_Prefetch``, else ``_ReadAhead``),
    so the kernel's copy of the file — or the disk, for a file not in the page cache — is not
    waited for between blocks; with the native module that thread also runs Hyperscan over the
    block it read. That takes a core the scan would not use otherwise (``spare_cores``)."""
    size = min(BLOCK_BYTES * (READ_AHEAD_BLOCKS if read_ahead else 1), max(hi - lo, 1))
    buf = bytearray(size)
    spare = bytearray(size) if read_ahead and hi - lo > size else buf
    ahead = _read_ahead(engine, fd, hi) if spare is not buf else None
    tail = _heads_before(fd, lo)
    hits: list[RawHit] = []
    newlines = 0
    carry = 0
    off = lo
    ready: tuple[int, int, Any] | None = None  # (cut, upto, Collector): found ahead
    try:
        got = _read(fd, buf, carry, hi - off, off)
        while got > 0:  # (0: the file shrank under us)
            off += got
            fill = carry + got
            cut = fill if off >= hi else buf.rfind(b"\n", 0, fill) + 1
            if cut <= 0:  # no line ends in the buffer: read on into it, grown if full
                carry = fill
                if carry == len(buf):
                    buf.extend(bytes(len(buf)))
                got = _read(fd, buf, carry, hi - off, off)
                continue
            carry = fill - cut
            # (what the thread found is this block's when it cut the block alike)
            collected = ready[1:] if ready is not None and ready[0] == cut else None
            if ahead is not None and off < hi:  # the next block, read while this one is scanned
                if len(spare) < len(buf):
                    spare.extend(bytes(len(buf) - len(spare)))
                spare[:carry] = buf[cut:fill]
                ahead.start(spare, carry, hi - off, off)
            n, block_hits, tail = engine.scan_block(buf, 0, cut, tail, newlines, collected)
            if found is None:
                hits += block_hits
            elif block_hits:
                found(block_hits)
            newlines += n
            if report is not None:
                report(off - lo - carry)
            if off >= hi:
                break
            if ahead is None:
                if carry:
                    buf[:carry] = buf[cut:fill]
                got = _read(fd, buf, carry, hi - off, off)
            else:
                got, ready = ahead.result()
                buf, spare = spare, buf
    finally:
        if ahead is not None:
            ahead.close()
    return newlines, hits


def _read(fd: int, buf: bytearray, at: int, left: int, off: int) -> int:
    """Read up to ``left`` bytes of the file from ``off`` into ``buf[at:]``."""
    with memoryview(buf) as whole, whole[at:at + min(len(buf) - at, left)] as view:
        return os.preadv(fd, [view], off)


def _read_ahead(engine: BlockEngine, fd: int, hi: int) -> _Prefetch | _ReadAhead:
    sp = _native.speedups
    return _ReadAhead(fd) if sp is None else _Prefetch(sp, fd, hi, engine.native_db)


class _Prefetch:
    """``_ReadAhead`` on the native module's own thread (``_speedups.Prefetch``), which then
    runs Hyperscan over the whole lines of the block it read, a slice at a time, for as long
    as the scan is busy with the block before; the scan finds the rest
    (``scan_block(collected=…)``). Neither waits for the other: at 0.1 % failure lines the
    thread takes a quarter of each block's Hyperscan pass, at 5 % four fifths of it. A Python
    thread would wait for the GIL, which the scan holds for milliseconds at a time; this one
    never takes it."""

    def __init__(self, sp: Any, fd: int, hi: int, db: Any):
        self._p = sp.Prefetch(fd, hi, db)
        self._collector = sp.Collector if db is not None else None
        self._found: Any = None

    def start(self, buf: bytearray, at: int, left: int, off: int) -> None:
        if self._collector is None:
            self._p.start(buf, at, left, off)
            return
        self._found = self._collector()
        self._p.start(buf, at, left, off, self._found)

    def result(self) -> tuple[int, tuple[int, int, Any] | None]:
        """(bytes read, (end of the block's whole lines, end of those Hyperscan ran over,
        their candidates) or None)."""
        got, cut, upto = self._p.result()
        return got, (cut, upto, self._found) if cut >= 0 else None

    def close(self) -> None:
        self._p.close()


class _ReadAhead:
    """One read at a time on a thread of its own (``os.preadv`` lets the GIL go meanwhile).

    The thread is started per region and joined by ``close``: none is left running when a
    scan returns, so a caller may fork after it (scan workers are forked before any)."""

    def __init__(self, fd: int):
        from queue import SimpleQueue  # (here: the native module's scans never import queue)

        self._fd = fd
        self._jobs: SimpleQueue[tuple[bytearray, int, int, int] | None] = SimpleQueue()
        self._done: SimpleQueue[int | BaseException] = SimpleQueue()
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="healer-read-ahead",
                                        daemon=True)
        self._thread.start()

    def start(self, buf: bytearray, at: int, left: int, off: int) -> None:
        self._jobs.put((buf, at, left, off))
        self._busy = True

    def result(self) -> tuple[int, None]:
        got = self._done.get()
        self._busy = False
        if isinstance(got, BaseException):
            raise got
        return got, None

    def close(self) -> None:
        if self._busy:  # its buffer is written to until then
            self._done.get()
            self._busy = False
        self._jobs.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                got: int | BaseException = _read(self._fd, *job)
            except BaseException as exc:
                got = exc
            self._done.put(got)


def _scan_emitting(engine: BlockEngine, fd: int, region: tuple[int, int],
                   report: Callable[[int], None],
                   streamed: Callable[[list[RawHit]], list[Any]], read_ahead: bool
                   ) -> list[Any]:
    """Scan a lone region, its hits rendered and emitted as they are found, whenever its
    blocks have found ``STREAM_HITS`` (``streamed``): they never pile up for the whole region,
    so each slice's objects reuse the memory of the one before (a whole region's took fresh
    pages: 20,000 page faults against 4,800 at 5 % failure lines in 268 MB), and they are
    rendered while still in the CPU's cache."""
    results: list[Any] = []
    pending: list[RawHit] = []

    def found(hits: list[RawHit]) -> None:
        pending.extend(hits)
        if len(pending) >= STREAM_HITS:
            results.extend(streamed(pending))  # (it empties pending)

    scan_region(engine, fd, *region, report, read_ahead=read_ahead, found=found)
    if pending:
        results.extend(streamed(pending))
    return results


def _heads_before(fd: int, lo: int) -> list[bytes]:
    """The heads of the lines just before ``lo`` (for borrowed timestamps)."""
    if lo <= 0:
        return []
    start = max(0, lo - _TAIL_READ)
    data: Any = os.pread(fd, lo - start, start)
    if b"\x1b" in data:
        data = _match.strip_ansi(data)
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    if start > 0 and lines:
        lines.pop(0)  # cut in the middle
    return [ln[:HEAD_BYTES] for ln in lines[-LOOKBACK_LINES:]]
