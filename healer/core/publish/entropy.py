"""The validator's second opinion: an entropy census over the tokens of outbound text.

The scrubber recognises secrets by what they look like — a vendor's prefix, a name such as
``password``, a URL's userinfo. Whatever it has no rule for, it misses. The census knows no
shapes and no names: it cuts the text into runs of key-alphabet characters (base64, base64url,
hex) and asks of each run only whether it is *random*, measured three ways:

* Shannon entropy of its characters, against what a random string of that length reaches;
* how often neighbouring characters change class (lower, upper, digit) — random keys change
  all the time, identifiers only at word boundaries;
* how much of it is made of words (runs of lower-case letters) — names, paths and prose are.

So a key in a format nobody wrote a rule for, under a name nobody listed, is still blocked at
publish time. What it lets pass on purpose: redaction markers; digests where they are digests
(40/64 hex digits — git SHAs, sha256 sums, healer's own fingerprints — unless the same line
names a key or a secret just before; hex after words such as ``commit``, ``trace_id``,
``sha256:``); memory addresses (``0x…``); UUIDs (the scrubber's rules own those); numbers,
versions, timestamps, paths and identifiers (not random by the measures above).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Iterator

KIND = "HIGH-ENTROPY"
MIN_LEN = 16
MIN_HEX = 20

# Runs of the characters keys are written in. "." and "%" end a run: dotted names, JWT parts,
# URL-encoding and file extensions split into their pieces.
# "=" only at the end (base64 padding): inside a run it is an assignment, and splits it.
_TOKEN = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,3}")
_EDGES = "+/=_-"
_SEPARATORS = re.compile(r"[-_/+=]+")
_HEX = frozenset("0123456789abcdefABCDEF")
_UUIDISH = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                      r"[0-9a-fA-F]{12}")
_WORDS = re.compile(r"[A-Z]?[a-z]{3,}")
_VOWEL = re.compile(r"[aeiouy]", re.I)
_CLUSTER = re.compile(r"[bcdfghjklmnpqrstvwxz]{4}", re.I)
# A vendor prefix glued to a hex body (``SK…``, ``dapi…``, ``shpat_…``, ``dop_v1_…``).
_PREFIXED_HEX = re.compile(r"([A-Za-z][A-Za-z0-9]{0,7}[_-]?(?:v\d[_-])?)([0-9a-fA-F]{20,})")
# Just before a hex run, these say what it is: a digest or an identifier, not a key.
_DIGEST_BEFORE = re.compile(
    r"(?:commit|sha\d*|hash|digest|rev(?:ision)?|object|tree|blob|parent|merge|head|base|"
    r"fingerprint|etag|checksum|md5|crc\d*|trace|span|request|req|event|build|run|index|oid|"
    r"ref|id|fp|uuid|guid|version|integrity)s?[\"'`]?\s*(?:[:=#@/_-]|\.\.|is|at|of)?\s*[\"'`(\[]*$",
    re.I)
# Naming a key or a secret on the same line overrides the above (``private_key_id: <hex>``).
_SECRET_BEFORE = re.compile(r"pass|pwd|secret|token|key|auth|credential|signature|sig\b|"
                            r"private|cookie|bearer|session", re.I)
_CONTEXT = 40


def shannon(s: str) -> float:
    """Bits per character of ``s`` (0 for an empty string)."""
    n = len(s)
    if not n:
        return 0.0
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


def _cls(c: str) -> int:
    return 0 if c.islower() else 1 if c.isupper() else 2 if c.isdigit() else 3


def switch_rate(s: str) -> float:
    """How often two neighbouring letters/digits differ in class (0 … 1)."""
    alnum = [_cls(c) for c in s if c.isalnum()]
    if len(alnum) < 2:
        return 0.0
    return sum(a != b for a, b in itertools.pairwise(alnum)) / (len(alnum) - 1)


def word_cover(s: str) -> float:
    """The share of letters in word-like runs — three or more lower-case letters, capitalised
    or not, with a vowel and no four consonants in a row (``Table``, ``error``; not
    ``qtwrx``): names, paths and prose score high, random keys low."""
    letters = sum(c.isalpha() for c in s)
    if not letters:
        return 0.0
    return sum(len(w) for w in _WORDS.findall(s)
               if _VOWEL.search(w) and not _CLUSTER.search(w)) / letters


def _entropy_floor(n: int) -> float:
    """What a random string of ``n`` key characters nearly always reaches: a little below
    log2(n) for short strings (repeats are likely), capped for long ones."""
    return min(4.0, math.log2(n) - 0.6)


def random_token(tok: str) -> bool:
    """Whether a run of key characters (not hex-only) looks generated rather than written."""
    n = len(tok)
    digits = sum(c.isdigit() for c in tok)
    upper = sum(c.isupper() for c in tok)
    lower = sum(c.islower() for c in tok)
    if n < MIN_LEN or digits == 0 or upper + lower < 0.4 * n:
        return False
    if shannon(tok) < _entropy_floor(n) or _sequential(tok):
        return False
    if upper and lower:
        # Short ones are often names with a number in them (``ChaCha20Poly1305``); long ones
        # that mix a lot may contain a few pronounceable runs by chance.
        switches = switch_rate(tok)
        limit = 0.3 if n < 20 else 0.6 if n >= 24 and switches >= 0.45 else 0.5
        return switches >= 0.35 and word_cover(tok) <= limit
    # One case only: word-likeness cannot tell random from written (a random lower-case
    # string is all letter runs), so it takes more length and more digits. Callers pass the
    # pieces between separators, so ``healing-3f2a9c-a1b2`` never gets here whole.
    return n >= 20 and digits >= 0.15 * n


def _sequential(tok: str) -> bool:
    """Alphabets and counters (``0123456789abcdef``): most neighbours are successive."""
    steps = sum(ord(b) - ord(a) == 1 for a, b in itertools.pairwise(tok))
    return steps * 2 >= len(tok)


def random_hex(tok: str) -> bool:
    """A hex run that is random (not ``deadbeef…``, not only digits, not an alphabet). Short
    ones (span ids, alert fingerprints, hash codes) are identifiers more often than keys."""
    digits = sum(c.isdigit() for c in tok)
    return (len(tok) >= MIN_HEX and 0 < digits < len(tok) and shannon(tok) >= 3.0
            and not _sequential(tok))


def _hex_verdict(tok: str, before: str, *, prefixed: bool = False) -> bool:
    """``prefixed``: the hex follows a vendor-style prefix in the same token, so a digest's
    length proves nothing (``dop_v1_`` + 64 hex digits is a key)."""
    if tok[:2] in ("0x", "0X") or before[-2:] in ("0x", "0X"):
        return False  # a memory address or a constant
    named_secret = _SECRET_BEFORE.search(before) is not None
    if not named_secret and (_DIGEST_BEFORE.search(before)
                             or (len(tok) in (40, 64) and not prefixed)):
        return False
    return random_hex(tok)


def census(text: str) -> Iterator[tuple[int, int]]:
    """The spans of ``text`` that look like generated secrets."""
    if not text:
        return
    for m in _TOKEN.finditer(text):
        start, end = m.span()
        raw = m.group(0)
        tok = raw.strip(_EDGES)
        if len(tok) < MIN_LEN:
            continue
        start += raw.index(tok)
        end = start + len(tok)
        if text.startswith("REDACTED-", start) or "REDACTED-" in tok:
            continue
        if _UUIDISH.search(tok):
            continue  # UUIDs are the rules' business (they may be in a non-data position)
        line_start = text.rfind("\n", 0, start) + 1
        before = text[max(line_start, start - _CONTEXT):start]
        if all(c in _HEX for c in tok):
            if _hex_verdict(tok, before):
                yield start, end
            continue
        if _mixed_case(tok) and random_token(tok):
            yield start, end
            continue
        hexed = _PREFIXED_HEX.fullmatch(tok)
        if hexed and _hex_verdict(hexed.group(2), before + hexed.group(1), prefixed=True):
            yield start, end
            continue
        # Judged by pieces: one-case tokens (``lin_api_<key>``, ``key-<hex>``), and mixed ones
        # whose random part sits between words (``ghp_…``).
        offset = 0
        for piece in _SEPARATORS.split(tok):
            at = tok.index(piece, offset)
            offset = at + len(piece)
            if len(piece) < MIN_LEN:
                continue
            if all(c in _HEX for c in piece):
                # A vendor prefix (``sbp_``, ``dop_v1_``) is short and the hex ends the token;
                # ``heal-healing-<sha>-<epoch>`` is a name with a digest in it.
                glued = 0 < at <= 8 and tok[at - 1] in "_-" and offset == len(tok)
                if _hex_verdict(piece, before + tok[:at], prefixed=glued):
                    yield start, end
                    break
            elif random_token(piece):
                yield start, end
                break


def _mixed_case(tok: str) -> bool:
    return any(c.isupper() for c in tok) and any(c.islower() for c in tok)
