"""The detection engine: a whole catalog as one multi-pattern matcher over big buffers.

Usage::

    engine = Engine(Catalog.load())                       # HEALER_DETECT_ENGINE=re|hyperscan|auto
    alerts = engine.scan_file("agent.log")                # mmap-free block reads, 2 workers
    alerts = engine.scan_bytes(data, source="pod/x", start_time=session_start)
    stream = engine.stream("kubectl", start_time=None)    # incremental: feed() chunks, flush()

How a buffer is scanned: blocks of whole lines are stripped of ANSI codes (only when they
contain ESC), a matcher proposes candidate lines (Hyperscan, or ``re``), and each candidate
line is confirmed with ``re``, checked against the suppressions, reduced to the best pattern
per code (generic level patterns only when nothing specific matched), and turned into an
``Alert``. Only matching lines are ever materialised; line numbers come from counting
newlines between them.

The per-line work runs a block at a time (``Engine(fast=True)``, the default): the lines the
line model must view are found by one Hyperscan scan over their heads, timestamps come from a
cached parser, the alert lines of a block are decoded at once. ``fast=False`` judges, parses
and decodes each line on its own — the reference the fast path is tested against, byte for
byte (tests/detect/test_detect_fast_path.py).

Time: a line's own timestamp is parsed only for matched lines. Windowed patterns (priority 1,
``window_s``) count only when the line's time — its own timestamp, else that of the nearest
earlier line within 64 lines, else the time it was read — lies within the window after the
agent's start (given by the caller, else the first line's timestamp, else the time the stream
was first seen).
"""

from __future__ import annotations

import bisect
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping

from healer.detect import _match, _native
from healer.detect._blocks import BLOCK_BYTES, LOOKBACK_LINES, RawHit, StartOf
from healer.detect._timestamps import HEAD_BYTES, parse_ts, parse_ts_cached
from healer.detect.alert import NO_LABELS, Alert
from healer.detect.catalog import SEVERITY_RANK, Catalog
from healer.detect.lines import (
    JUDGE_HEAD,
    JUDGE_TRIGGERS,
    RANK,
    SPEECH,
    SourceStarts,
    judge,
    needs_view,
    view_document,
    view_fields,
)
from healer.errors import UnavailableError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

ENGINE_ENV = "HEALER_DETECT_ENGINE"
SKEW_S = 2.0  # a line this much before the agent's start still counts (clock skew)

# Control characters are replaced in alert lines: they would garble terminals and logs.
_CONTROLS = {c: "\ufffd" for c in [*range(0x00, 0x09), *range(0x0A, 0x20), 0x7F]}
_HAS_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# The bytes that make _text change a line besides cutting it: a trailing CR, control
# characters (newlines apart: they join many lines).
_TEXT_WORK = r"[\x00-\x08\x0b-\x1f\x7f]"
_new_tuple = tuple.__new__
_CLEANED = 1 << 40  # added to the pattern index of a candidate found in an ANSI line's text


def resolve_engine(kind: str | None = None) -> str:
    """``re`` or ``hyperscan`` from an explicit choice, ``$HEALER_DETECT_ENGINE``, or auto."""
    choice = (kind or os.environ.get(ENGINE_ENV) or "auto").strip().lower()
    if choice not in ("auto", "re", "hyperscan"):
        raise UsageError(f"unknown detection engine {choice!r} (re, hyperscan or auto)")
    if choice == "re":
        return "re"
    if _match.hyperscan_available():
        return "hyperscan"
    if choice == "hyperscan":
        raise UnavailableError("the hyperscan engine was asked for but the `hyperscan` package "
                               "is not installed (pip install 'healer[fast]')")
    return "re"


class Engine:
    """A compiled catalog. Thread-safe: scans may run concurrently."""

    def __init__(self, catalog: Catalog, *, engine: str | None = None, max_line_chars: int = 200,
                 preflight_window_s: float = 60.0, clock: Callable[[], float] = time.time,
                 fast: bool = True):
        self.catalog = catalog
        self.kind = resolve_engine(engine)
        self.max_line_chars = max(20, int(max_line_chars))
        self.clock = clock
        pats = catalog.patterns
        self._patterns = pats
        self._confirm = _match.lazy_searches([p.compiled for p in pats])
        self._generic = [p.generic for p in pats]
        self._rank = [SEVERITY_RANK[p.severity] for p in pats]
        self._min_rank = [RANK[p.min_level] for p in pats]
        self._window = [p.window_s if p.window_s is not None
                        else (preflight_window_s if p.priority == 1 else None) for p in pats]
        self._windowed = any(w is not None for w in self._window)
        self.matchers: list[_match.Matcher] = []
        # The native database a block's candidates can be found with ahead of scan_block, on
        # another thread (``_files``' read-ahead: scan_block(collected=…)), or None.
        self.native_db: Any = None
        if self.kind == "hyperscan":
            hm = _match.HyperscanMatcher(pats)
            self.matchers.append(hm)
            if hm.leftover:
                self.matchers.append(_match.ReMatcher(hm.leftover))
            # A pattern that cannot span lines and means the same to both engines needs no
            # confirming when Hyperscan reports it on a line.
            exact = [p for p in hm.patterns if p.id not in hm.prefiltered]
            for p, ok in zip(exact, _match.single_line_exact_all([p.regex for p in exact]),
                             strict=True):
                if ok:
                    self._confirm[p.index] = _trusted
        else:
            self.matchers.append(_match.ReMatcher(pats))
        self._suppressor = _match.Suppressor(catalog.suppressions,
                                             use_hyperscan=self.kind == "hyperscan")
        # The block-at-a-time path (``fast``): the same alerts as judging, confirming and
        # rendering each line on its own (``fast=False``, the reference the tests hold it to).
        self.fast = fast
        hs = fast and self.kind == "hyperscan"
        self._flagger = _match.LineFlagger.build(JUDGE_TRIGGERS) if hs else None
        self._controls = _match.LineFlagger.build([(_TEXT_WORK, True)]) if hs else None
        self._single = [(i,) for i in range(len(pats))]
        self._trusted = [c is _trusted for c in self._confirm]
        # The C versions of the fast path's loops (healer.detect._native), or None.
        self._speedups = _native.speedups if fast else None
        if self._speedups is not None and self.kind == "hyperscan":
            self.native_db = self.matchers[0].native_db  # type: ignore[attr-defined]
        self._alert_fields = [(p.code, p.id, p.priority, p.severity, p) for p in pats]
        self._resolved: dict[tuple[int, ...], tuple[int, ...]] = {}  # _resolve without sup_ks

    # -- public scanning API -------------------------------------------------------------------

    def stream(self, source: str, *, start_time: float | None = None,
               labels: Mapping[str, str] | None = None, not_before: float | None = None
               ) -> StreamScanner:
        """An incremental scanner for one stream (a followed file, a pipe, a pod's log)."""
        return StreamScanner(self, source, start_time=start_time, labels=labels,
                             not_before=not_before)

    def scan_bytes(self, data: bytes | bytearray, *, source: str = "-",
                   start_time: float | None = None, labels: Mapping[str, str] | None = None,
                   not_before: float | None = None, seen_at: float | None = None) -> list[Alert]:
        """All alerts in ``data`` (whole lines; a last line without newline counts)."""
        s = self.stream(source, start_time=start_time, labels=labels, not_before=not_before)
        return s.feed(data, seen_at=seen_at) + s.flush(seen_at=seen_at)

    def scan_lines(self, lines: Iterable[str | bytes | tuple[float | None, str | bytes]], *,
                   source: str = "-", start_time: float | None = None,
                   labels: Mapping[str, str] | None = None, not_before: float | None = None
                   ) -> list[Alert]:
        """Alerts for lines given one by one, optionally as ``(timestamp, line)`` pairs."""
        s = self.stream(source, start_time=start_time, labels=labels, not_before=not_before)
        out: list[Alert] = []
        for item in lines:
            ts, line = item if isinstance(item, tuple) else (None, item)
            out += s.feed_line(line, ts=ts)
        return out

    def scan_file(self, path: str | Path, *, source: str | None = None,
                  start_time: float | None = None, not_before: float | None = None,
                  labels: Mapping[str, str] | None = None, workers: int | None = None,
                  progress: Callable[[int, int], None] | None = None) -> list[Alert]:
        """All alerts in a file, read in blocks and split over ``workers`` processes
        (default: up to 2 for files of 32 MiB or more, when the caller runs no other thread;
        an explicit ``workers`` forks even beside other threads; files under 32 MiB are
        always scanned here)."""
        from healer.detect import _files

        return _files.scan_file(self, os.fspath(path), source=source or str(path),
                                start_time=start_time, not_before=not_before, labels=labels,
                                workers=workers, progress=progress)

    def render_file(self, path: str | Path, render: Callable[[list[Alert]], Any], *,
                    source: str | None = None, start_time: float | None = None,
                    not_before: float | None = None, workers: int | None = None,
                    progress: Callable[[int, int], None] | None = None,
                    idle: Callable[[], None] | None = None,
                    emit: Callable[[Any], Any] | None = None) -> list[Any]:
        """Like ``scan_file``, but each region's alerts go through ``render`` in the worker
        that found them (so formatting runs on every core); returns the results in order.
        ``render`` must return something ``marshal`` can carry (str, bytes, numbers, lists,
        dicts). ``idle`` runs in this process while the workers finish (e.g. imports).

        ``emit``: each rendered result goes through it in the process that rendered it, in
        file order, and its return value comes back instead — so each worker writes its own
        output (to a file descriptor shared with this process; flush before calling)."""
        from healer.detect import _files

        return _files.scan_file(self, os.fspath(path), source=source or str(path),
                                start_time=start_time, not_before=not_before, labels=None,
                                workers=workers, progress=progress, render=render, idle=idle,
                                emit=emit)

    # -- internals shared with _files and StreamScanner ------------------------------------------

    def scan_block(self, buf: Any, lo: int, hi: int, tail: list[bytes], first: int = 0,
                   collected: Any = None) -> tuple[int, list[RawHit], list[bytes]]:
        """Scan ``buf[lo:hi]`` (whole lines): (newlines in it, raw hits, new tail of heads).

        A hit's line index counts from ``first`` (the lines before this block). ``collected``:
        (upto, a ``Collector`` of ``native_db``'s matches in ``buf[0:upto]``), ``lo`` 0: this
        scan finds the rest."""
        sp = self._speedups
        if sp is not None and type(buf) in (bytes, bytearray):
            return self._scan_block_native(sp, buf, lo, hi, tail, first, collected)
        if len(self.matchers) == 1:
            cands = self.matchers[0].candidates(buf, lo, hi)
        else:
            cands = []
            for m in self.matchers:
                cands += m.candidates(buf, lo, hi)
        # Lines with ANSI escapes are matched without them: their raw candidates are replaced
        # by those of their cleaned text (only those lines are copied, never the block).
        ansi = _match.ansi_lines(buf, lo, hi)
        cleaned = {ls: text for ls, _, text in ansi}
        if ansi:
            cands = self._clean_candidates(cands, ansi)
        cands.sort()
        return self._pass1(buf, lo, hi, tail, first, cands, cleaned)

    def _scan_block_native(self, sp: Any, buf: Any, lo: int, hi: int, tail: list[bytes],
                           first: int, collected: Any = None
                           ) -> tuple[int, list[RawHit], list[bytes]]:
        """``scan_block`` with the native module: Hyperscan hands its matches to a C collector
        (no Python call, tuple or sort per match) that pass 1 in C reads as it is."""
        upto, cands = collected if collected is not None else (lo, sp.Collector())
        cands.rebase(upto - 1)  # Hyperscan's exclusive end offsets within the view → buf's
        for m in self.matchers:
            if isinstance(m, _match.HyperscanMatcher):
                m.collect(buf, upto, hi, cands)  # (the rest of what was found ahead)
            else:
                cands.extend(m.candidates(buf, lo, hi))
        ansi = sp.ansi_lines(buf, lo, hi)
        cleaned = {ls: text for ls, _, text in ansi}
        if ansi:  # (the fast path keeps the raw candidates of ANSI lines: pass 1 skips them)
            self._clean_candidates_native(sp, cands, ansi)
        # With the line model's ranks, a candidate line judge_lines would drop anyway (an
        # info line, the agent's speech) is dropped in pass 1, before it becomes objects, and
        # a kept line it could view leaves judged (judge_lines passes those rows on).
        got = sp.confirm_lines(buf, lo, hi, cands, first, cleaned, self._confirm, self._trusted,
                               RANK, self._min_rank)
        if got is NotImplemented:  # a line with too many candidates for the C loop
            return self._pass1(buf, lo, hi, tail, first, cands.pairs(), cleaned)
        newlines, found = got
        return newlines, self._pass2(buf, lo, found, tail), _tail_heads(buf, lo, hi, tail, sp)

    def _clean_candidates_native(self, sp: Any, cands: Any,
                                 ansi: list[tuple[int, int, bytes]]) -> None:
        """``_clean_candidates`` into the block's collector: the cleaned texts' matches
        mapped to their line's start in C."""
        starts = [ls for ls, _, _ in ansi]
        joined = b"\n".join([text for _, _, text in ansi])
        found = sp.Collector()
        for m in self.matchers:
            found.reset(-1)
            if isinstance(m, _match.HyperscanMatcher):
                m.collect(joined, 0, len(joined), found)
            else:
                found.extend(m.candidates(joined, 0, len(joined)))
            sp.lines_at(found, joined, starts, _CLEANED, cands)

    def _pass1(self, buf: Any, lo: int, hi: int, tail: list[bytes], first: int,
               cands: list[tuple[int, int]], cleaned: dict[int, bytes]
               ) -> tuple[int, list[RawHit], list[bytes]]:
        """``scan_block`` from its sorted candidates."""
        if self._speedups is not None:  # the loop below, in C
            got = self._speedups.confirm_lines(buf, lo, hi, cands, first, cleaned,
                                               self._confirm, self._trusted)
            if got is not NotImplemented:
                newlines, found = got
                return newlines, self._pass2(buf, lo, found, tail), _tail_heads(
                    buf, lo, hi, tail)
        cands.append((hi + 1, -1))  # sentinel: flushes the last line
        # Pass 1: candidate lines → lines on which some pattern really matches. This loop runs
        # once per matching line of a big file, so it is written for speed.
        found: list[tuple[int, int, Any, list[int]]] = []  # (line idx, start, line, patterns)
        add = found.append
        line_idx = first
        counted = lo
        ls = le = -1
        idxs: list[int] = []
        count, rfind, find = buf.count, buf.rfind, buf.find
        confirm, trusted = self._confirm, self._trusted
        for off, idx in cands:
            if off <= le:
                if idx not in idxs:
                    idxs.append(idx)
                continue
            if idxs:
                line = cleaned.get(ls) if cleaned else None
                if line is None:
                    line = buf[ls:le]
                else:  # an ANSI line: only the candidates of its cleaned text count
                    idxs = [i - _CLEANED for i in idxs if i >= _CLEANED]
                if len(idxs) == 1:
                    if trusted[idxs[0]] or confirm[idxs[0]](line):
                        add((line_idx, ls, line, idxs))
                elif idxs:
                    matched = [i for i in sorted(idxs) if confirm[i](line)]
                    if matched:
                        add((line_idx, ls, line, matched))
            if idx < 0:
                break
            ls = rfind(b"\n", lo, off) + 1 or lo
            le = find(b"\n", off, hi)
            if le < 0:
                le = hi
            line_idx += count(b"\n", counted, ls) if ls - counted < 1024 else newlines_in(
                buf, counted, ls)
            counted = ls
            idxs = [idx]
        newlines = line_idx - first + newlines_in(buf, counted, hi)
        return newlines, self._pass2(buf, lo, found, tail), _tail_heads(buf, lo, hi, tail)

    def _pass2(self, buf: Any, lo: int, found: list[tuple[int, int, Any, list[int]]],
               tail: list[bytes]) -> list[RawHit]:
        if not found:
            return []
        if self.fast:
            return self._hits(buf, lo, found, tail)
        return self._hits_one_by_one(buf, lo, found, tail)

    def _hits_one_by_one(self, buf: Any, lo: int, found: list[tuple[int, int, Any, list[int]]],
                         tail: list[bytes]) -> list[RawHit]:
        """Pass 2, the reference: each line judged on its own, then suppressions (batched),
        best pattern per code, timestamps."""
        hits: list[RawHit] = []
        keep = self.max_line_chars * 4 + 8
        generic, window, windowed = self._generic, self._window, self._windowed
        min_rank = self._min_rank
        judged = []
        for li, start, line, matched in found:
            v = judge(line)
            if v is None:  # nothing about the line could change the verdict
                judged.append((li, start, line, matched, line, "", ""))
                continue
            if v.part == SPEECH:
                continue  # the agent's own words or code (a transcript), not a failure
            if v.level:
                rank = RANK[v.level]
                matched = [i for i in matched if rank >= min_rank[i]]
                if not matched:
                    continue
            judged.append((li, start, line, matched, v.body, v.source, v.level))
        # Suppressions see the line without its prefixes (kubectl, timestamps, compose).
        sup_cands = self._suppressor.candidates([j[4] for j in judged])
        for (li, start, line, matched, body, src, level), ks in zip(judged, sup_cands,
                                                                      strict=True):
            if ks or len(matched) > 1 or generic[matched[0]]:
                best = self._resolve(body, matched, ks)
                if not best:
                    continue
            else:
                best = (matched[0],)
            own = parse_ts(line)
            borrowed = own
            if own is None and windowed and any(window[i] is not None for i in best):
                borrowed = _lookback(buf, lo, start, tail)
            hits.append((li, line[:keep] if len(line) > keep else line, best, own, borrowed,
                         src, level))
        return hits

    def _hits(self, buf: Any, lo: int, found: list[tuple[int, int, Any, list[int]]],
              tail: list[bytes]) -> list[RawHit]:
        """Pass 2 for a whole block at once: what ``_hits_one_by_one`` finds, with less work a
        line. The lines ``judge`` would view are found by one Hyperscan scan over their heads
        (``lines.JUDGE_TRIGGERS``); only those are viewed; timestamps come from the cached
        parser; a lone pattern's tuple is shared."""
        keep = self.max_line_chars * 4 + 8
        generic, window, windowed = self._generic, self._window, self._windowed
        min_rank, single = self._min_rank, self._single
        sp = self._speedups
        if sp is not None and type(buf) in (bytes, bytearray):  # both loops below, in C
            judged, bodies = sp.judge_lines(found, view_fields, SPEECH, RANK, min_rank,
                                            view_document)
            return sp.build_hits(
                judged, self._suppressor.candidates(bodies), generic, single, window, windowed,
                keep, self._resolve, parse_ts,
                lambda start: _lookback(buf, lo, start, tail))
        flagger = self._flagger
        if flagger is not None:
            to_view = flagger.flagged([f[2][:JUDGE_HEAD] for f in found])
        else:
            to_view = {k for k, f in enumerate(found) if needs_view(f[2])}
        judged = []
        add = judged.append
        for k, (li, start, line, matched) in enumerate(found):
            if k not in to_view:  # nothing about the line could change the verdict
                add((li, start, line, matched, line, "", ""))
                continue
            body, level, src, part = view_fields(line)
            if part == SPEECH:
                continue  # the agent's own words or code (a transcript), not a failure
            if level:
                rank = RANK[level]
                matched = [i for i in matched if rank >= min_rank[i]]
                if not matched:
                    continue
            add((li, start, line, matched, body, src, level))
        # Suppressions see the line without its prefixes (kubectl, timestamps, compose).
        sup_cands = self._suppressor.candidates([j[4] for j in judged])
        hits: list[RawHit] = []
        add_hit = hits.append
        resolve, ts_of = self._resolve, parse_ts_cached
        for (li, start, line, matched, body, src, level), ks in zip(judged, sup_cands,
                                                                      strict=True):
            if ks or len(matched) > 1 or generic[matched[0]]:
                best = resolve(body, matched, ks)
                if not best:
                    continue
            else:
                best = single[matched[0]]
            own = ts_of(line)
            borrowed = own
            if own is None and windowed and any(window[i] is not None for i in best):
                borrowed = _lookback(buf, lo, start, tail)
            add_hit((li, line[:keep] if len(line) > keep else line, best, own, borrowed,
                     src, level))
        return hits

    def _clean_candidates(self, cands: list[tuple[int, int]],
                          ansi: list[tuple[int, int, bytes]]) -> list[tuple[int, int]]:
        """Add the candidates found in the cleaned text of ANSI lines, at their line's start
        and marked (pattern index + ``_CLEANED``): pass 1 takes only those on such a line. The
        reference path also drops the raw candidates on them first (the fast one need not: it
        is one bisection a candidate)."""
        starts = [ls for ls, _, _ in ansi]
        if self.fast:
            keep = cands
        else:
            keep = []
            for off, idx in cands:
                k = bisect.bisect_right(starts, off) - 1
                if k < 0 or off > ansi[k][1]:
                    keep.append((off, idx))
        texts = [text for _, _, text in ansi]
        joined = b"\n".join(texts)
        offsets = _match.line_starts(texts)
        right = bisect.bisect_right
        for m in self.matchers:
            for off, idx in m.candidates(joined, 0, len(joined)):
                keep.append((starts[right(offsets, off) - 1], idx + _CLEANED))
        return keep

    def _resolve(self, line: Any, matched: list[int], sup_ks: list[int]) -> tuple[int, ...]:
        """Generic patterns, suppressions and one pattern per code (the most severe)."""
        if sup_ks:
            return self._resolve_line(line, matched, sup_ks)
        # Without suppressions to try, the verdict depends on the patterns alone: a log's
        # lines that match several patterns match the same few sets of them, over and over.
        key = tuple(matched)
        best = self._resolved.get(key)
        if best is None:
            if len(self._resolved) >= 4096:
                self._resolved.clear()
            best = self._resolved[key] = self._resolve_line(line, matched, sup_ks)
        return best

    def _resolve_line(self, line: Any, matched: list[int], sup_ks: list[int]
                      ) -> tuple[int, ...]:
        pats = self._patterns
        specific = [i for i in matched if not self._generic[i]]
        if specific:
            matched = specific
        if sup_ks:
            gone = self._suppressor.verdict(line, sup_ks, {pats[i].code for i in matched})
            if gone is None:
                # A suppression that names no code silences the word patterns ("errors": [],
                # "failed": 0 …), not a classified runtime failure: its text is specific and
                # a CLI's failure event carries such counts too. Naming the code silences it.
                matched = [i for i in matched if pats[i].failure_class]
                if not matched:
                    return ()
            elif gone:
                matched = [i for i in matched if pats[i].code not in gone]
        if len(matched) > 1 and any(pats[i].failure_class for i in matched):
            # A CLI's failure line ("API Error: Connection refused …") also holds the words of
            # the generic runtime patterns; it is the classified failure, said once.
            matched = [i for i in matched if pats[i].failure_class or pats[i].priority != 2]
        best: dict[str, int] = {}
        for i in matched:
            code = pats[i].code
            if code not in best or self._rank[i] > self._rank[best[code]]:
                best[code] = i
        return tuple(sorted(best.values()))

    def alerts(self, hits: Iterable[RawHit], *, base: int, source: str, start: float,
               seen_at: float, labels: Mapping[str, str] | None, not_before: float | None,
               ts_override: float | None = None, start_of: StartOf | None = None
               ) -> list[Alert]:
        """Raw hits → alerts: window and --since filters, line numbers, cut lines.

        A windowed pattern counts from the start of the line's own source when its prefix
        names one (``start_of(source, when)``: each pod or service has its own pre-flight; a
        line without one asks for ``""``: the source that started most recently before it),
        else from ``start``."""
        if self.fast:
            return self._alerts(hits, base=base, source=source, start=start, seen_at=seen_at,
                                labels=labels, not_before=not_before, ts_override=ts_override,
                                start_of=start_of)
        out: list[Alert] = []
        add = out.append
        pats, window = self._patterns, self._window
        label_map = labels if labels else NO_LABELS
        text_of = self._text
        lo_t, skew = start - SKEW_S, start
        for idx, raw, pidxs, own, borrowed, src, level in hits:
            if ts_override is not None:
                own = borrowed = ts_override
            if not_before is not None and own is not None and own < not_before:
                continue
            when = borrowed if borrowed is not None else seen_at
            text = None
            lo, hi = lo_t, skew
            if start_of is not None and any(window[pi] is not None for pi in pidxs):
                own_start = start_of(src, when)
                if own_start is not None:
                    lo, hi = own_start - SKEW_S, own_start
            for pi in pidxs:
                w = window[pi]
                if w is not None and not (lo <= when <= hi + w):
                    continue
                if text is None:
                    text = text_of(raw)
                p = pats[pi]
                add(Alert(p.code, p.id, p.priority, p.severity, source, base + idx + 1, text,
                          own, label_map, p, level, src))
        return out

    def _alerts(self, hits: Iterable[RawHit], *, base: int, source: str, start: float,
                seen_at: float, labels: Mapping[str, str] | None, not_before: float | None,
                ts_override: float | None, start_of: StartOf | None) -> list[Alert]:
        """``alerts`` for many hits at once: the filters first, then every kept line decoded
        in one go (``_texts``), then the alerts built as plain tuples."""
        sp = self._speedups
        if sp is not None:  # both loops below, in C
            hits = hits if isinstance(hits, list) else list(hits)
            rows, raws = sp.filter_hits(hits, self._window, ts_override, not_before, seen_at,
                                        start - SKEW_S, start, start_of, SKEW_S)
            return sp.make_alerts(rows, self._texts(raws), Alert, self._alert_fields, source,
                                  base + 1, labels if labels else NO_LABELS)
        rows = []
        keep = rows.append
        window = self._window
        lo_t, skew = start - SKEW_S, start
        for idx, raw, pidxs, own, borrowed, src, level in hits:
            if ts_override is not None:
                own = borrowed = ts_override
            if not_before is not None and own is not None and own < not_before:
                continue
            if len(pidxs) == 1 and window[pidxs[0]] is None:  # most hits: nothing to window
                keep((idx, raw, own, src, level, pidxs))
                continue
            when = borrowed if borrowed is not None else seen_at
            lo, hi = lo_t, skew
            if start_of is not None and any(window[pi] is not None for pi in pidxs):
                own_start = start_of(src, when)
                if own_start is not None:
                    lo, hi = own_start - SKEW_S, own_start
            kept = [pi for pi in pidxs
                    if (w := window[pi]) is None or lo <= when <= hi + w]
            if kept:
                keep((idx, raw, own, src, level, kept))
        out: list[Alert] = []
        add = out.append
        pats = self._patterns
        label_map = labels if labels else NO_LABELS
        first = base + 1
        for (idx, _, own, src, level, pidxs), text in zip(
                rows, self._texts([r[1] for r in rows]), strict=True):
            line_no = first + idx
            for pi in pidxs:
                p = pats[pi]
                add(_new_tuple(Alert, (p.code, p.id, p.priority, p.severity, source, line_no,
                                       text, own, label_map, p, level, src)))
        return out

    def _text(self, raw: bytes) -> str:
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not text.isprintable() and _HAS_CONTROL.search(text):
            text = text.translate(_CONTROLS)
        if len(text) > self.max_line_chars:
            text = text[: self.max_line_chars - 1] + "…"
        return text

    def _texts(self, raws: list[Any]) -> list[str]:
        """``[self._text(raw) for raw in raws]`` (no raw holds a newline), decoded at once:
        UTF-8 decoding never joins bytes across an ASCII newline, so the joined lines decode
        to the decoded lines joined."""
        if not raws:
            return []
        if self._speedups is not None:  # line by line in C, no joined or decoded copies
            return self._speedups.line_texts(raws, self.max_line_chars, self._text)
        joined = b"\n".join(raws)
        text = joined.decode("utf-8", "replace")
        parts = text.split("\n")
        if len(parts) != len(raws):  # a raw with a newline: cannot happen, but be exact
            return [self._text(raw) for raw in raws]
        # A CR or control character somewhere (as bytes: UTF-8 decoding keeps ASCII as is)?
        if self._controls is not None:
            for k in self._controls.flagged(raws, joined):
                parts[k] = _clean_text(parts[k])
        elif not all(map(str.isprintable, parts)):
            parts = [t if t.isprintable() else _clean_text(t) for t in parts]
        most = self.max_line_chars
        if max(map(len, parts)) > most:
            parts = [t if len(t) <= most else t[: most - 1] + "…" for t in parts]
        return parts

    def first_line_ts(self, head: bytes) -> float | None:
        """The timestamp of the first line of ``head`` (which starts a stream)."""
        nl = head.find(b"\n")
        first = head if nl < 0 else head[:nl]
        if b"\x1b" in first:
            first = _match.strip_ansi(first)
        return parse_ts(first)


class StreamScanner:
    """Scans one stream incrementally; keeps line numbers, the start time and a partial line."""

    def __init__(self, engine: Engine, source: str, *, start_time: float | None = None,
                 labels: Mapping[str, str] | None = None, not_before: float | None = None):
        self.engine = engine
        self.source = source
        self.start_time = start_time
        self.labels = dict(labels or {})
        self.not_before = not_before
        self.lines = 0  # complete lines seen
        self._pending = b""
        self._tail: list[bytes] = []
        self._first_seen: float | None = None
        self.sources = SourceStarts()  # each source a line prefix names → its start

    def _start(self, first: bytes, seen_at: float, ts: float | None = None) -> float:
        """The agent's start: given, else the first line's timestamp, else first seen."""
        if self.start_time is None:
            found = ts if ts is not None else self.engine.first_line_ts(first)
            self.start_time = found if found is not None else (
                self._first_seen if self._first_seen is not None else seen_at)
        return self.start_time

    def feed(self, data: bytes | bytearray, *, seen_at: float | None = None) -> list[Alert]:
        """Scan the complete lines in ``data`` (plus what was pending); keep the rest."""
        now = self.engine.clock() if seen_at is None else seen_at
        if self._first_seen is None:
            self._first_seen = now
        buf = self._pending + data if self._pending else data
        cut = buf.rfind(b"\n") + 1
        self._pending = bytes(buf[cut:])
        if not cut:
            return []
        start = self._start(bytes(buf[:HEAD_BYTES * 8]), now)
        out: list[Alert] = []
        lo = 0
        while lo < cut:
            hi = cut if cut - lo <= BLOCK_BYTES else buf.rfind(b"\n", lo, lo + BLOCK_BYTES) + 1
            if hi <= lo:
                hi = buf.find(b"\n", lo + BLOCK_BYTES) + 1
            self.sources.track(buf, lo, hi, now)
            n, hits, self._tail = self.engine.scan_block(buf, lo, hi, self._tail)
            out += self.engine.alerts(hits, base=self.lines, source=self.source, start=start,
                                      seen_at=now, labels=self.labels,
                                      not_before=self.not_before, start_of=self.sources.start_of)
            self.lines += n
            lo = hi
        return out

    def feed_line(self, line: str | bytes, *, ts: float | None = None,
                  labels: Mapping[str, str] | None = None, seen_at: float | None = None
                  ) -> list[Alert]:
        """Scan one log entry (e.g. from Loki, whose ``ts`` wins over the line's own)."""
        raw = line.encode("utf-8", "surrogateescape") if isinstance(line, str) else bytes(line)
        now = self.engine.clock() if seen_at is None else seen_at
        if self._first_seen is None:
            self._first_seen = now
        start = self._start(raw, now, ts)
        raw = raw.rstrip(b"\n") + b"\n"
        self.sources.track(raw, 0, len(raw), ts if ts is not None else now)
        n, hits, self._tail = self.engine.scan_block(raw, 0, len(raw), self._tail)
        out = self.engine.alerts(hits, base=self.lines, source=self.source, start=start,
                                 seen_at=now, labels=labels if labels is not None else self.labels,
                                 not_before=self.not_before, ts_override=ts,
                                 start_of=self.sources.start_of)
        self.lines += n
        return out

    def flush(self, *, seen_at: float | None = None) -> list[Alert]:
        """Scan the pending partial line as a complete one (end of stream, or rotation)."""
        if not self._pending:
            return []
        data, self._pending = self._pending + b"\n", b""
        return self.feed(data, seen_at=seen_at)

    def restart(self) -> None:
        """A new incarnation of the stream (rotated or truncated file): lines count from 1."""
        self.lines = 0
        self._pending = b""
        self._tail = []
        self._first_seen = None
        self.sources = SourceStarts()


def _trusted(line: Any) -> bool:
    return True


def _clean_text(text: str) -> str:
    """What ``Engine._text`` does to a decoded line besides cutting it."""
    text = text.rstrip("\r\n")
    if not text.isprintable() and _HAS_CONTROL.search(text):
        text = text.translate(_CONTROLS)
    return text


def newlines_in(buf: Any, a: int, b: int) -> int:
    """How many newlines ``buf[a:b]`` holds.

    ``bytes.replace`` finds a single byte with memchr, ``bytes.count`` tests byte by byte:
    dropping the newlines from a copy and comparing lengths is twice as fast as counting them,
    and this runs over every byte of a scanned file.
    """
    if b - a < 1024:
        return int(buf.count(b"\n", a, b))
    return (b - a) - len(buf[a:b].replace(b"\n", b""))


def _lookback(buf: Any, lo: int, ls: int, tail: list[bytes]) -> float | None:
    """The timestamp of the nearest earlier line, at most LOOKBACK_LINES back."""
    pos = ls
    walked = 0
    while walked < LOOKBACK_LINES and pos > lo:
        prev = buf.rfind(b"\n", lo, pos - 1) + 1 or lo
        ts = parse_ts(_clean_head(buf[prev:min(pos - 1, prev + HEAD_BYTES)]))
        if ts is not None:
            return ts
        pos = prev
        walked += 1
    left = LOOKBACK_LINES - walked
    for head in reversed(tail[-left:] if left else []):
        ts = parse_ts(head)
        if ts is not None:
            return ts
    return None


def _clean_head(head: Any) -> bytes:
    head = bytes(head)
    return _match.strip_ansi(head) if b"\x1b" in head else head


def _tail_heads(buf: Any, lo: int, hi: int, tail: list[bytes], sp: Any = None
                ) -> list[bytes]:
    """The heads of the last LOOKBACK_LINES lines up to ``hi`` (older ones from ``tail``),
    each cut to HEAD_BYTES, then without ANSI codes; with the native module ``sp``, its
    ``tail_heads`` finds the block's."""
    heads = sp.tail_heads(buf, lo, hi, LOOKBACK_LINES, HEAD_BYTES) if sp is not None \
        else _block_heads(buf, lo, hi)
    if len(heads) < LOOKBACK_LINES:
        heads = (tail + heads)[-LOOKBACK_LINES:]
    return heads


def _block_heads(buf: Any, lo: int, hi: int) -> list[bytes]:
    """The heads of the last LOOKBACK_LINES lines of ``buf[lo:hi]`` (``_tail_heads``).

    This runs once per block: the lines' start are found first, then they are copied and
    split at once (not line by line)."""
    end = hi - 1 if hi > lo and buf[hi - 1] == 0x0A else hi
    rfind = buf.rfind
    first, at, n = end, end, 0
    while n < LOOKBACK_LINES and at > lo:
        first = rfind(b"\n", lo, at) + 1 or lo
        n += 1
        if first == lo:
            break
        at = first - 1
    if not n:
        return []
    chunk = bytes(buf[first:end])
    heads = [line[:HEAD_BYTES] for line in chunk.split(b"\n")]
    if b"\x1b" in chunk:
        heads = [_match.strip_ansi(h) if b"\x1b" in h else h for h in heads]
    return heads
