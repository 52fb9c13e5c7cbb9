"""The two multi-pattern matchers behind the engine, and ANSI stripping.

Both only *propose* candidate lines: ``candidates(buf, lo, hi)`` returns ``(offset, pattern
index)`` pairs where ``offset`` lies on a line of ``buf[lo:hi]`` on which the pattern may
match (``lo`` is a line start). The engine then
confirms every candidate with Python's ``re`` on that single line, so both matchers give the
same alerts by construction: Hyperscan is a (very fast) superset filter, ``re`` is the truth.

- ``HyperscanMatcher``: one Hyperscan block-mode database over all patterns (caseless unless
  the pattern is case-sensitive, multi-line so ``^``/``$`` work at line ends). A pattern
  Hyperscan cannot compile exactly is compiled with ``HS_FLAG_PREFILTER`` (a superset), and a
  pattern it cannot compile at all is left to a ``ReMatcher``.
- ``ReMatcher``: the patterns joined into one alternation, searched over the buffer, jumping to
  the next line after each hit.
"""

from __future__ import annotations

import bisect
import itertools
import re
import threading
from collections.abc import Callable, Sequence

from healer.detect import _cache, _native
from healer.detect.catalog import Pattern, Suppression

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol
else:
    from healer._runtime_typing import Protocol

# CSI (colours, cursor), OSC (titles, hyperlinks) and two-byte escapes; never a newline, so
# stripping keeps line numbers.
ANSI = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[@-Z\\-_])")

# \A and \Z mean the start and end of the line when re confirms a line, but of the whole
# buffer when a buffer is searched: for the search they become ^ and $ (multi-line).
_BUFFER_ANCHORS = re.compile(r"(?<!\\)((?:\\\\)*)\\([AZ])")


def line_anchored(regex: str) -> str:
    r"""``regex`` with \A/\Z turned into ^/$, for searching lines inside a buffer."""
    return _BUFFER_ANCHORS.sub(lambda m: m.group(1) + ("^" if m.group(2) == "A" else "$"),
                               regex)


_INLINE_FLAGS = re.compile(r"\(\?[aiLmsux-]")
_SAFE_AT = {"AT_BOUNDARY", "AT_NON_BOUNDARY"}
_SAFE_CATEGORIES = {"CATEGORY_DIGIT", "CATEGORY_WORD"}


def single_line_exact(regex: str) -> bool:
    r"""Whether Hyperscan reporting ``regex`` on a line means re finds it on that line.

    True for patterns built only from literals, ``.``, positive classes of letters, digits
    and word characters, repeats, groups, alternations and ``\b``: such a match never spans
    a newline, and Hyperscan (caseless ASCII, no DOTALL) and ``re`` on bytes agree on them.
    Anything else (``\s``, ``[^…]``, anchors, lookarounds, backreferences, inline flags) is
    confirmed with ``re``.
    """
    if _INLINE_FLAGS.search(regex):
        return False
    try:
        import re._parser as sre_parse  # the stdlib's parser: internal, hence the guard

        return _safe_items(list(sre_parse.parse(regex, 0)))
    except Exception:
        return False


def single_line_exact_all(regexes: Sequence[str]) -> list[bool]:
    """``[single_line_exact(r) for r in regexes]``, remembered on disk by the regexes (and
    Python's version, whose parser decides): parsing a whole catalog costs more at start-up
    than scanning megabytes."""
    import sys

    name = _cache.key(b"single-line-exact", repr(sys.version_info[:2]), repr(list(regexes)))
    blob = _cache.get("exact", name)
    if blob is not None and len(blob) == len(regexes) and set(blob) <= {0x30, 0x31}:
        return [b == 0x31 for b in blob]
    found = [single_line_exact(r) for r in regexes]
    _cache.put("exact", name, bytes(0x31 if ok else 0x30 for ok in found))
    return found


class _LazySearch:
    """A regex's ``search``, compiled at its first call, which then puts the compiled search
    in its place in ``table`` (see ``lazy_searches``)."""

    __slots__ = ("_compile", "_i", "_table")

    def __init__(self, table: list[Any], i: int, compile_: Callable[[], re.Pattern[bytes]]):
        self._table, self._i, self._compile = table, i, compile_

    def __call__(self, line: Any) -> re.Match[bytes] | None:
        search = self._compile().search
        self._table[self._i] = search
        return search(line)


def lazy_searches(compilers: Sequence[Callable[[], re.Pattern[bytes]]]) -> list[Any]:
    """``[c().search for c in compilers]``, each compiled when first called: most of a
    catalog's regexes never confirm a line of a given log, and compiling them all is a good
    part of a scan's start-up. (The catalog checked that they compile.)"""
    table: list[Any] = []
    for i, compile_ in enumerate(compilers):
        table.append(_LazySearch(table, i, compile_))
    return table


def _safe_items(items: list[Any]) -> bool:
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            ok = arg not in (10, 13)
        elif name == "ANY":
            ok = True
        elif name == "AT":
            ok = str(arg) in _SAFE_AT
        elif name == "IN":
            ok = all(_safe_class_item(o, a) for o, a in arg)
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            ok = _safe_items(list(arg[2]))
        elif name == "SUBPATTERN":
            ok = _safe_items(list(arg[3]))
        elif name == "BRANCH":
            ok = all(_safe_items(list(alt)) for alt in arg[1])
        else:
            ok = False
        if not ok:
            return False
    return True


def _safe_class_item(op: Any, arg: Any) -> bool:
    name = str(op)
    if name == "LITERAL":
        return arg not in (10, 13)
    if name == "RANGE":
        return not (arg[0] <= 10 <= arg[1] or arg[0] <= 13 <= arg[1])
    if name == "CATEGORY":
        return str(arg) in _SAFE_CATEGORIES
    return False  # NEGATE and everything else


def strip_ansi(data: bytes | bytearray) -> bytes:
    """``data`` without ANSI escape sequences."""
    return ANSI.sub(b"", data)


def ansi_lines(buf: Any, lo: int, hi: int) -> list[tuple[int, int, bytes]]:
    """The lines of ``buf[lo:hi]`` that hold ESC, as (start, end, text without escapes)."""
    out: list[tuple[int, int, bytes]] = []
    find, rfind = buf.find, buf.rfind
    esc = find(b"\x1b", lo, hi)
    while esc >= 0:
        ls = rfind(b"\n", lo, esc) + 1 or lo
        le = find(b"\n", esc, hi)
        le = hi if le < 0 else le
        out.append((ls, le, ANSI.sub(b"", buf[ls:le])))
        esc = find(b"\x1b", le, hi)
    return out


class Matcher(Protocol):
    patterns: Sequence[Pattern]

    def candidates(self, buf: Any, lo: int, hi: int) -> list[tuple[int, int]]: ...


# Hyperscan's compile flags (hs_compile.h): the same numbers in libhs and in the binding.
HS_FLAG_CASELESS = 1
HS_FLAG_MULTILINE = 4
HS_FLAG_PREFILTER = 128


def hyperscan_available() -> bool:
    """Whether Hyperscan can run here: the system's libhs through the native module (then the
    ``hyperscan`` package is not even imported: ~3 ms of a scan's start), else the package."""
    if _native.libhs() is not None:
        return True
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


class ReMatcher:
    """Candidate lines by Python ``re``: exact, and slow on big inputs."""

    def __init__(self, patterns: Sequence[Pattern]):
        self.patterns = list(patterns)
        parts = []
        for p in self.patterns:
            flag = "-i" if p.case_sensitive else "i"
            parts.append(b"(?" + flag.encode() + b":" + line_anchored(p.regex).encode("utf-8")
                         + b")")
        try:
            self._one: re.Pattern[bytes] | None = re.compile(b"|".join(parts), re.MULTILINE)
            self._each: list[re.Pattern[bytes]] = []
        except re.error:
            # Patterns with global inline flags cannot be joined: search them one by one.
            self._one = None
            self._each = [re.compile(line_anchored(p.regex).encode("utf-8"),
                                     p.flags | re.MULTILINE) for p in self.patterns]

    def candidates(self, buf: Any, lo: int, hi: int) -> list[tuple[int, int]]:
        if not self.patterns:
            return []
        offsets: set[int] = set()
        for rx in [self._one] if self._one is not None else self._each:
            pos = lo
            search = rx.search
            while pos < hi:
                m = search(buf, pos, hi)
                if m is None:
                    break
                start = m.start()
                offsets.add(start)
                nl = buf.find(b"\n", start, hi)
                pos = hi if nl < 0 else nl + 1
        return [(off, p.index) for off in sorted(offsets) for p in self.patterns]


class HyperscanMatcher:
    """Candidate lines by Hyperscan; ``leftover`` are the patterns it could not take.

    The database is compiled and scanned by the system's libhs through the native module
    where both are there (``_native.libhs``: matches go straight into a C ``Collector``),
    else by the ``hyperscan`` package's binding (a Python call per match)."""

    def __init__(self, patterns: Sequence[Pattern]):
        sp = _native.libhs()
        if sp is not None:
            self._backend: _Backend = _Libhs(sp)
        else:
            import hyperscan

            self._backend = _Binding(hyperscan)
        self.patterns: list[Pattern] = []
        self.leftover: list[Pattern] = []
        self.prefiltered: list[str] = []
        exact = list(patterns)
        base = [HS_FLAG_MULTILINE | (0 if p.case_sensitive else HS_FLAG_CASELESS)
                for p in exact]
        self._db: _Database | None = _compile(self._backend, exact, base)
        if self._db is not None:
            self.patterns = exact
        else:
            # Something did not compile: find out pattern by pattern (slow path, rare).
            flags: list[int] = []
            for p, flag in zip(exact, base, strict=True):
                found = self._flag_for(line_anchored(p.regex).encode("utf-8"), flag)
                if found is None:
                    self.leftover.append(p)
                    continue
                if found & HS_FLAG_PREFILTER:
                    self.prefiltered.append(p.id)
                self.patterns.append(p)
                flags.append(found)
            self._db = _compile(self._backend, self.patterns, flags)

    @property
    def backend(self) -> str:
        """``libhs`` or ``binding``: which Hyperscan scans."""
        return self._backend.name

    @property
    def native_db(self) -> Any:
        """The native module's database (``_speedups.HsDatabase``) on libhs, else None."""
        db = self._db
        return db.native if isinstance(db, _LibhsDatabase) else None

    def _flag_for(self, expr: bytes, base: int) -> int | None:
        """The flags that compile ``expr`` (exact, else prefilter), or None."""
        for flag in (base, base | HS_FLAG_PREFILTER):
            try:
                self._backend.compile([expr], [0], [flag])
            except _CompileError:
                continue
            return flag
        return None

    def candidates(self, buf: Any, lo: int, hi: int) -> list[tuple[int, int]]:
        if self._db is None or hi <= lo:
            return []
        return self._db.pairs(buf, lo, hi)

    def collect(self, buf: Any, lo: int, hi: int, handler: Any) -> None:
        """Scan ``buf[lo:hi]`` into ``handler``, a native collector (``_speedups.Collector``,
        shifted by ``lo - 1``) that keeps ``candidates``' pairs."""
        if self._db is None or hi <= lo:
            return
        self._db.collect(buf, lo, hi, handler)


class _CompileError(Exception):
    pass


class _Database(Protocol):
    def pairs(self, buf: Any, lo: int, hi: int) -> list[tuple[int, int]]: ...

    def collect(self, buf: Any, lo: int, hi: int, collector: Any) -> None: ...

    def dump(self) -> bytes: ...


class _Backend(Protocol):
    name: str
    version: str

    def compile(self, exprs: list[bytes], ids: list[int], flags: list[int]) -> _Database: ...

    def load(self, blob: bytes) -> _Database | None: ...


def _view(buf: Any, lo: int, hi: int) -> Any:
    return buf if lo == 0 and hi == len(buf) else memoryview(buf)[lo:hi]


class _BindingDatabase:
    def __init__(self, hs: Any, db: Any):
        self._hs = hs
        self._db = db
        self._local = threading.local()

    def _scratch(self) -> Any:
        # A scratch space may serve one scan at a time: one per thread.
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self._hs.Scratch(self._db)
        return scratch

    def pairs(self, buf: Any, lo: int, hi: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        add = out.append
        shift = lo - 1  # Hyperscan reports exclusive end offsets within the view

        def on_match(idx: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            add((to + shift, idx))

        self._db.scan(_view(buf, lo, hi), match_event_handler=on_match,
                      scratch=self._scratch())
        return out

    def collect(self, buf: Any, lo: int, hi: int, collector: Any) -> None:
        self._db.scan(_view(buf, lo, hi), match_event_handler=collector,
                      scratch=self._scratch())

    def dump(self) -> bytes:
        return bytes(self._hs.dumpb(self._db))


class _Binding:
    """The ``hyperscan`` package: its bundled Hyperscan, a Python call per match."""

    name = "binding"

    def __init__(self, hs: Any):
        self._hs = hs
        self.version = str(getattr(hs, "__version__", "?"))

    def compile(self, exprs: list[bytes], ids: list[int], flags: list[int]) -> _Database:
        db = self._hs.Database(mode=self._hs.HS_MODE_BLOCK)
        try:
            db.compile(expressions=exprs, ids=ids, elements=len(exprs), flags=flags)
        except self._hs.error as exc:
            raise _CompileError(str(exc)) from None
        return _BindingDatabase(self._hs, db)

    def load(self, blob: bytes) -> _Database | None:
        try:
            return _BindingDatabase(self._hs, self._hs.loadb(blob, self._hs.HS_MODE_BLOCK))
        except self._hs.error:
            return None  # built for another CPU or another Hyperscan


class _LibhsDatabase:
    def __init__(self, sp: Any, db: Any):
        self._sp = sp
        self.native = db  # the _speedups.HsDatabase

    def pairs(self, buf: Any, lo: int, hi: int) -> list[tuple[int, int]]:
        collector = self._sp.Collector()
        collector.reset(lo - 1)
        self.native.scan(buf, lo, hi, collector)
        return collector.pairs()  # type: ignore[no-any-return]

    def collect(self, buf: Any, lo: int, hi: int, collector: Any) -> None:
        self.native.scan(buf, lo, hi, collector)

    def dump(self) -> bytes:
        return bytes(self.native.dump())


class _Libhs:
    """The system's libhs through the native module: matches collected in C."""

    name = "libhs"

    def __init__(self, sp: Any):
        self._sp = sp
        self.version = f"libhs {sp.libhs_version()}"

    def compile(self, exprs: list[bytes], ids: list[int], flags: list[int]) -> _Database:
        try:
            return _LibhsDatabase(self._sp, self._sp.libhs_compile(exprs, flags, ids))
        except ValueError as exc:
            raise _CompileError(str(exc)) from None

    def load(self, blob: bytes) -> _Database | None:
        try:
            return _LibhsDatabase(self._sp, self._sp.libhs_load(blob))
        except ValueError:
            return None  # another libhs: compile again


def _compile(backend: _Backend, patterns: Sequence[Pattern], flags: Sequence[int]
             ) -> _Database | None:
    """A block-mode database, from the content-addressed cache when it was built before."""
    if not patterns:
        return None
    exprs = [line_anchored(p.regex).encode("utf-8") for p in patterns]
    ids = [p.index for p in patterns]
    name = _cache.key(backend.version, repr((exprs, ids, list(flags))).encode())
    blob = _cache.get("hs", name)
    if blob is not None:
        db = backend.load(blob)
        if db is not None:
            return db
    try:
        db = backend.compile(exprs, ids, list(flags))
    except _CompileError:
        return None
    _cache.put("hs", name, db.dump())
    return db


class Suppressor:
    """Which suppressions hold for a batch of matched lines.

    With Hyperscan the lines of a block are joined and scanned once to find the suppressions
    that may match each line; ``re`` then confirms those (the same truth as the ``re`` engine,
    which simply tries them all).
    """

    def __init__(self, suppressions: Sequence[Suppression], *, use_hyperscan: bool):
        self.suppressions = list(suppressions)
        self.search = lazy_searches([s.compiled for s in self.suppressions])
        self.codes = [frozenset(s.codes) for s in self.suppressions]
        self._sp = _native.speedups
        everyone = list(range(len(self.suppressions)))
        self._always = everyone
        self._db: Any = None
        if use_hyperscan and self.suppressions:
            exact = range(len(self.suppressions))
            fake = [Pattern(id=self.suppressions[k].id, regex=self.suppressions[k].regex,
                            code="S", priority=2, severity="info",
                            case_sensitive=self.suppressions[k].case_sensitive, index=k)
                    for k in exact]
            matcher = HyperscanMatcher(fake)
            if matcher.patterns:
                self._db = matcher
                taken = {p.index for p in matcher.patterns}
                self._always = [k for k in everyone if k not in taken]

    def candidates(self, lines: Sequence[bytes]) -> list[list[int]]:
        """For each line, the suppressions worth trying on it (in catalog order)."""
        if self._db is None or not lines:
            return [self._always] * len(lines)
        joined = b"\n".join(lines)
        sp = self._sp
        if sp is not None:  # the matches kept and grouped by line in C
            found = sp.Collector()
            found.reset(-1)
            self._db.collect(joined, 0, len(joined), found)
            return sp.line_sets(found, joined, len(lines), self._always)
        hits = self._db.candidates(joined, 0, len(joined))
        out = [self._always] * len(lines)
        if not hits:  # the common case: no line's offsets needed
            return out
        # A line's number is the newlines before its match, counted from the previous match
        # (no table of 100,000 line starts for a handful of matches).
        found: dict[int, set[int]] = {}
        count = joined.count
        n = at = 0
        for off, k in sorted(hits):
            n += count(b"\n", at, off)
            at = off
            got = found.get(n)
            if got is None:
                found[n] = {k}
            else:
                got.add(k)
        for n, got in found.items():
            out[n] = sorted(got.union(self._always))
        return out

    def verdict(self, line: bytes, ks: Sequence[int], codes: set[str]) -> set[str] | None:
        """None if the whole line is suppressed, else the codes suppressed on it."""
        gone: set[str] = set()
        for k in ks:
            limited = self.codes[k]
            if limited and not (limited & codes):
                continue
            if self.search[k](line):
                if not limited:
                    return None
                gone |= limited
        return gone


def line_starts(lines: Sequence[Any]) -> list[int]:
    """Where each of ``lines`` starts in ``b"\\n".join(lines)``, and (last) its length + 1."""
    return list(itertools.accumulate([len(line) + 1 for line in lines], initial=0))


class LineFlagger:
    """Which of many lines some expressions match anywhere: one Hyperscan scan over the lines
    joined by newlines (``^`` is a line's start), one report per match.

    Only exact: ``LineFlagger.build`` gives None when Hyperscan is missing or would only
    prefilter an expression, and the caller then tests each line itself.
    """

    def __init__(self, matcher: HyperscanMatcher):
        self._m = matcher

    @classmethod
    def build(cls, expressions: Sequence[tuple[str, bool]]) -> LineFlagger | None:
        """``expressions``: (regex, case-sensitive) pairs."""
        if not hyperscan_available():
            return None
        fake = [Pattern(id=f"flag-{k}", regex=rx, code="F", priority=2, severity="info",
                        case_sensitive=cs, index=k) for k, (rx, cs) in enumerate(expressions)]
        matcher = HyperscanMatcher(fake)
        if matcher.leftover or matcher.prefiltered or len(matcher.patterns) != len(fake):
            return None
        return cls(matcher)

    def flagged(self, lines: Sequence[Any], joined: Any = None) -> set[int]:
        """The indexes of the lines (none holds a newline) on which some expression matches;
        ``joined``: ``b"\\n".join(lines)`` if the caller has it."""
        if not lines:
            return set()
        if joined is None:
            joined = b"\n".join(lines)
        found = self._m.candidates(joined, 0, len(joined))
        if not found:
            return set()
        starts = line_starts(lines)
        right = bisect.bisect_right
        return {right(starts, off) - 1 for off, _ in found}
