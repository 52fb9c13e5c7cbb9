"""The machinery behind the sanitiser's detectors: cheap locators, then the full pattern.

Python's regex engine is only fast when a pattern starts with a literal: a pattern such as "a
phone number" or "a host name" starts with a character class and crawls through every byte of
every traceback. So each ``Detector`` has a *locator* that finds the few places worth looking
at — a substring (``"@"``, ``"://"``, ``"eyJ"``), a literal-first hint regex, or a literal in
the *digit-folded* text (every digit turned into ``0``, so ``"000-00-0000"`` is a plain
substring search for an SSN) — and the full pattern only runs in a window around each one.
Case-insensitive detectors run on the lower-cased text (same positions for ASCII) and match the
original again for the replacement. A ``View`` caches the lower-cased and digit-folded forms
and the substring positions that several detectors share.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import re
import string
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

MARK = "[REDACTED-"

Window = tuple[int, int]
Hit = tuple[int, int, str]  # start, end, replacement
Replacer = Callable[[re.Match[str]], str | None]

_FOLD = bytes.maketrans(b"123456789", b"000000000")
# Every upper-case letter as "A", lower-case as "a", digit as "0": shapes become substrings
# (an IBAN starts with "AA00").
_SHAPE = bytes.maketrans(
    (string.ascii_uppercase + string.ascii_lowercase + "123456789").encode(),
    (b"A" * 26 + b"a" * 26 + b"0" * 9))
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def marker(kind: str) -> str:
    return f"{MARK}{kind}]"


def has_mark(value: str) -> bool:
    return MARK in value


class View:
    """One text and the derived forms the locators share (computed on first use)."""

    __slots__ = ("_folded", "_low", "_pos", "_shape", "text")

    def __init__(self, text: str):
        self.text = text
        self._low: str | None = None
        self._folded: bytes | bool | None = False
        self._shape: bytes | bool | None = False
        self._pos: dict[tuple[str, bool], list[int]] = {}

    @property
    def low(self) -> str:
        """The lower-cased text, position for position like the original."""
        if self._low is None:
            low = self.text.lower()
            if len(low) != len(self.text):  # e.g. "İ" lower-cases to two characters
                low = self.text.translate(_ASCII_LOWER)
            self._low = low
        return self._low

    @property
    def folded(self) -> bytes | None:
        """The text with every digit as ``0`` (ASCII texts only; None otherwise)."""
        if self._folded is False:
            self._folded = self.text.encode().translate(_FOLD) if self.text.isascii() else None
        return self._folded  # type: ignore[return-value]

    @property
    def shape(self) -> bytes | None:
        """The text with letters as ``A``/``a`` and digits as ``0`` (ASCII texts only)."""
        if self._shape is False:
            self._shape = self.text.encode().translate(_SHAPE) if self.text.isascii() else None
        return self._shape  # type: ignore[return-value]

    def positions(self, needle: str, lower: bool = False) -> list[int]:
        key = (needle, lower)
        found = self._pos.get(key)
        if found is None:
            hay = self.low if lower else self.text
            found = []
            i = hay.find(needle)
            while i != -1:
                found.append(i)
                i = hay.find(needle, i + 1)
            self._pos[key] = found
        return found


Locator = Callable[[View], list[Window] | None]  # None: the whole text


def _merge(windows: list[Window]) -> list[Window]:
    windows.sort()
    out: list[Window] = []
    for ws, we in windows:
        if out and ws <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], we))
        else:
            out.append((ws, we))
    return out


def needles(*words: str, back: int, fwd: int, lower: bool = False) -> Locator:
    """Windows around every occurrence of any of ``words``."""

    def locate(v: View) -> list[Window]:
        n = len(v.text)
        found = [(max(0, i - back), min(n, i + len(w) + fwd))
                 for w in words for i in v.positions(w, lower)]
        return _merge(found) if found else []

    return locate


def hints(*patterns: str, back: int, fwd: int) -> Locator:
    """Windows around the hits of literal-first hint regexes."""
    compiled = [re.compile(p) for p in patterns]

    def locate(v: View) -> list[Window]:
        n = len(v.text)
        found = [(max(0, m.start() - back), min(n, m.end() + fwd))
                 for h in compiled for m in h.finditer(v.text)]
        return _merge(found) if found else []

    return locate


def folded(*patterns: bytes, back: int, fwd: int, fallback: str) -> Locator:
    """Windows around literal-first hits in the digit-folded text (``fallback``: a hint regex
    on the original, for texts that are not ASCII)."""
    compiled = [re.compile(p) for p in patterns]
    slow = hints(fallback, back=back, fwd=fwd)

    def locate(v: View) -> list[Window]:
        data = v.folded
        if data is None:
            return slow(v)
        n = len(v.text)
        found = [(max(0, m.start() - back), min(n, m.end() + fwd))
                 for h in compiled for m in h.finditer(data)]
        return _merge(found) if found else []

    return locate


def long_tokens(min_len: int) -> Locator:
    """Whitespace-separated tokens at least ``min_len`` long with both letter cases."""

    def locate(v: View) -> list[Window]:
        text = v.text
        found: list[Window] = []
        cursor = 0
        for tok in [t for t in text.split() if len(t) >= min_len]:
            i = text.find(tok, cursor)
            cursor = i + len(tok)
            if tok.lower() != tok and tok.upper() != tok:
                found.append((i, cursor))
        return found

    return locate


def everywhere(_v: View) -> None:
    return None


@dataclass(frozen=True)
class Detector:
    """One kind of secret: where to look, what it looks like, what replaces it.

    ``census``: regexes (Hyperscan syntax, ASCII) of which one matches whenever the locator
    would find anything — the one-pass pre-filter (see ``Census``). ``gate``: literals of which
    one occurs whenever it would (the pre-filter without Hyperscan); by default the census
    itself when it is all plain literals.
    """

    kind: str
    pattern: re.Pattern[str]
    replace: Replacer
    locate: Locator = everywhere
    lower: bool = False  # the pattern is written for the lower-cased text
    census: tuple[str, ...] = ()
    gate: tuple[str, ...] = ()

    def find(self, v: View) -> list[Hit]:
        """(start, end, replacement) of every hit, in order, not overlapping."""
        windows = self.locate(v)
        if windows == []:
            return []
        return self._collect(self.pattern, v.low if self.lower else v.text, v.text, windows)

    @functools.cached_property
    def _exact(self) -> re.Pattern[str]:
        """The pattern for the original text (case-insensitive), compiled once."""
        return re.compile(self.pattern.pattern, re.I)

    def _collect(self, pattern: re.Pattern[str], hay: str, text: str,
                 windows: list[Window] | None) -> list[Hit]:
        out: list[Hit] = []
        last = 0
        exact = self._exact if hay is not text else None
        for ws, we in windows if windows is not None else [(0, len(hay))]:
            for m in pattern.finditer(hay, max(ws, last), we):
                if m.end() == we < len(hay):
                    # The window cut the match short: match again without the end limit.
                    m = pattern.match(hay, m.start()) or m
                if m.start() < last:
                    continue
                om = exact.match(text, m.start()) if exact else m
                rep = self.replace(om or m)
                if rep is not None:
                    out.append((m.start(), m.end(), rep))
                    last = m.end()
        return out


@dataclass(frozen=True)
class CustomDetector:
    """A detector with its own finder, for kinds a windowed regex cannot do fast."""

    kind: str
    finder: Callable[[View], list[Hit]]
    census: tuple[str, ...] = ()
    lower: bool = False
    gate: tuple[str, ...] = ()

    def find(self, v: View) -> list[Hit]:
        return self.finder(v)


_META = frozenset(".^$*+?{}[]|()")


def plain_literal(expr: str) -> str | None:
    """The text a regex matches if it is a plain literal (``\\.`` escapes allowed), else None."""
    out: list[str] = []
    i = 0
    while i < len(expr):
        c = expr[i]
        if c == "\\":
            if i + 1 >= len(expr) or expr[i + 1].isalnum():
                return None  # \d, \b …: a class or an anchor
            out.append(expr[i + 1])
            i += 2
            continue
        if c in _META:
            return None
        out.append(c)
        i += 1
    return "".join(out)


def gate_of(det: Detector | CustomDetector) -> tuple[str, ...] | None:
    """The literals that gate ``det`` without Hyperscan (None: it must always run)."""
    if det.gate:
        return det.gate
    lits = [plain_literal(e) for e in det.census]
    if not lits or any(lit is None for lit in lits):
        return None
    return tuple(lit for lit in lits if lit is not None)


_DATABASES: dict[Any, Any] = {}
_SHORT = 256  # texts this short get the regex-gated detectors decided by their regexes


class Census:
    """Which detectors may find something in a text, decided before any of them runs.

    Every detector states what must occur for it to find anything. With Hyperscan (an
    optional dependency) one pass scans for all of their census regexes at once (each reported
    at most once). Without it, the ``literal`` engine checks each detector's gate literals
    with ``in`` (a C-speed substring test); detectors gated by a regex always run. Either way
    only the detectors let through run: same results as running them all, faster.

    ``engine``: ``"auto"`` (Hyperscan if installed, else literal), ``"hyperscan"``,
    ``"literal"``; an empty detector list means no pre-filter.
    """

    def __init__(self, detectors: list[Detector | CustomDetector], engine: str = "auto"):
        self._db: object | None = None
        self._gates: list[tuple[int, tuple[str, ...], bool]] | None = None
        self._always: frozenset[int] = frozenset()
        self._local = threading.local()
        self.engine = ""
        if not detectors:
            return
        if engine in ("auto", "hyperscan") and self._compile(detectors):
            self.engine = "hyperscan"
            return
        gates, always = [], set()
        exprs: list[tuple[int, re.Pattern[str]]] = []
        for i, det in enumerate(detectors):
            lits = gate_of(det)
            if lits is None:
                always.add(i)
                exprs += [(i, re.compile(e, re.I if det.lower else 0)) for e in det.census]
            else:
                gates.append((i, tuple(x.lower() for x in lits) if det.lower else lits,
                              det.lower))
        self._gates, self._always = gates, frozenset(always)
        # For short texts (a marker and what is glued to it) the regex-gated detectors are
        # decided by their census regexes in Python: cheap at that length, and precise.
        self._short = exprs
        self._short_ok = all(detectors[i].census for i in always)
        self.engine = "literal"

    def _compile(self, detectors: list[Detector | CustomDetector]) -> bool:
        try:
            import hyperscan as hs
        except ImportError:
            return False
        if any(not det.census for det in detectors):
            return False  # a detector that must always run: no pre-filter possible
        key = tuple((det.census, det.lower) for det in detectors)
        db = _DATABASES.get(key)
        if db is None:
            exprs, ids, flags = [], [], []
            for i, det in enumerate(detectors):
                for expr in det.census:
                    exprs.append(expr.encode())
                    ids.append(i)
                    flags.append(hs.HS_FLAG_SINGLEMATCH
                                 | (hs.HS_FLAG_CASELESS if det.lower else 0))
            db = hs.Database(mode=hs.HS_MODE_BLOCK)
            db.compile(expressions=exprs, ids=ids, elements=len(exprs), flags=flags)
            _DATABASES[key] = db  # compiling takes tens of ms: once per process
        self._hs = hs
        self._db = db
        return True

    @property
    def active(self) -> bool:
        return bool(self.engine)

    def __call__(self, text: str) -> set[int] | None:
        """The indexes of the detectors worth running (None: all of them)."""
        if self._gates is not None:
            return self._literal(text)
        if self._db is None:
            return None
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self._hs.Scratch(self._db)
        found: set[int] = set()
        add = found.add
        self._db.scan(text.encode("utf-8", "surrogatepass"),  # type: ignore[attr-defined]
                      match_event_handler=lambda i, _f, _t, _fl, _c: add(i), scratch=scratch)
        return found

    def _literal(self, text: str) -> set[int]:
        if len(text) <= _SHORT and self._short_ok:
            found = {i for i, e in self._short if e.search(text)}
        else:
            found = set(self._always)
        low: str | None = None
        for i, lits, lower in self._gates or ():
            if lower:
                if low is None:
                    low = text.lower()
                hay = low
            else:
                hay = text
            for lit in lits:
                if lit in hay:
                    found.add(i)
                    break
        return found


def apply(text: str, hits: Iterable[Hit]) -> str:
    parts: list[str] = []
    pos = 0
    for start, end, rep in hits:
        parts.append(text[pos:start])
        parts.append(rep)
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def expand(text: str, i: int, j: int, chars: frozenset[str]) -> tuple[int, int]:
    """Grow the span ``[i, j)`` left and right over ``chars``."""
    while i > 0 and text[i - 1] in chars:
        i -= 1
    n = len(text)
    while j < n and text[j] in chars:
        j += 1
    return i, j


# --- predicates -------------------------------------------------------------------------------

_SECRETISH_VALUE = re.compile(r"[A-Za-z0-9+/=_~!@#$%^*.:-]{4,}")
_DOTTED_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
PLACEHOLDERS = frozenset({"", "none", "null", "nil", "true", "false", "***", "xxx", "changeme",
                          "redacted", "secret", "password", "token", "<redacted>", "..."})
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]{20,}")


def looks_secret(value: str) -> bool:
    """An unquoted assignment value that is a credential rather than code (``token=token``)."""
    if has_mark(value) or value.lower() in PLACEHOLDERS:
        return False
    if not _SECRETISH_VALUE.fullmatch(value):
        return False
    if _DOTTED_IDENT.fullmatch(value) and not any(c.isdigit() for c in value):
        return False
    return any(c.isdigit() for c in value) or any(c in "+/=~!@#$%^*" for c in value)


def random_looking(token: str) -> bool:
    """A generated key rather than a path, an identifier or a git SHA: a long alphanumeric run,
    upper and lower case mixed throughout (not CamelCase), digits, high character entropy."""
    if not _ALNUM_RUN.search(token):
        return False
    upper = sum(c.isupper() for c in token)
    lower = sum(c.islower() for c in token)
    digits = sum(c.isdigit() for c in token)
    if digits < 2 or not upper or not lower or not 0.2 <= upper / (upper + lower) <= 0.8:
        return False
    counts = Counter(token)
    n = len(token)
    entropy = -sum(c / n * math.log2(c / n) for c in counts.values())
    return entropy >= 3.8


def luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def keep_ip(text: str) -> bool:
    """Loopback, unspecified and broadcast addresses identify nobody; non-addresses stay."""
    if "." in text and ":" not in text:  # dotted quad, already range-checked by the pattern
        return text.startswith("127.") or text in ("0.0.0.0", "255.255.255.255")  # noqa: S104
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return True  # a time of day, a C++ scope, a MAC: not an IP address
    if ip.is_loopback or ip.is_unspecified:
        return True
    return isinstance(ip, ipaddress.IPv4Address) and str(ip) == "255.255.255.255"


def boundary_ok(m: re.Match[str], before: str, after: str) -> bool:
    """The characters just outside the match are not in ``before`` / ``after``."""
    s = m.string
    i, j = m.start(), m.end()
    return not ((i > 0 and s[i - 1] in before) or (j < len(s) and s[j] in after))
