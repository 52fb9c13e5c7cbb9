"""Fingerprints: one stable id per distinct bug, whatever the ids, times and line numbers.

    fingerprint = sha256(error_type "||" call_site "||" normalised message)

* the message is normalised: UUIDs → ``<UUID>``, timestamps → ``<TS>``, every word that
  contains a digit → ``<ID>``, whitespace collapsed, cut to 500 characters;
* ``call_site`` is ``<repo-relative path>:<function>`` without a line number — the caller's,
  tidied, or else the innermost in-project frame of the traceback (site-packages, the standard
  library and ``<frozen …>`` frames are not the project's).

Two reports of one bug from different runs, users or line numbers get the same fingerprint;
a different exception type or a different function does not.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

MAX_NORMALISED = 500
UNKNOWN_SITE = "<unknown>"

_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                   r"[0-9a-fA-F]{12}\b")
# A date (``2024-05-06``, with a time and zone) or a time of day (``10:05:00``), each from a
# word's start: ``\d(?<!\w\d)`` is ``\b\d`` (a digit is a word character, so the boundary
# before it means no word character before it), written digit first so the engine jumps from
# digit to digit instead of trying every position.
_TS = re.compile(
    r"\d(?<!\w\d)(?:\d{3}-\d{2}-\d{2}"
    r"(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
    r"|\d?:\d{2}:\d{2}(?:[.,]\d+)?\b)"
)
# A match can only start where a word starts (it ends where one ends, and a digit is a word
# character): the look-behind says so, and spares the engine retrying every position inside
# each word without a digit (same matches, half the time). ``[^\W\d]*+\d`` is ``\w*\d``
# without the backtracking: the word characters before the first digit, never given back
# (every digit is a word character, so a word has a digit exactly when this finds one;
# the ``\w*`` after it still takes the rest of the word, so the matches are the same).
_DIGIT_WORD = re.compile(r"(?<!\w)[^\W\d]*+\d\w*(?:[.:/-][^\W\d]*+\d\w*)*")
# What every match of _UUID and of _TS contains, found by a literal-first (or set-first)
# search: the full patterns, which start with a class, run only where one may match (a
# scrubbed message always has "-" in its markers, so the mere "-" test let them run).
_UUID_HINT = re.compile(r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-")
_TS_HINT = re.compile(r"[-:]\d\d[-:]")

# Python frames; JavaScript/TypeScript "at fn (file:line:col)" frames as a courtesy.
_PY_FRAME = re.compile(r'File "(?P<path>[^"]+)", line \d+, in (?P<func>[^\s]+)')
_JS_FRAME = re.compile(
    r"^\s*at (?:(?P<func>[\w$.<>\[\] ]+?) \()?(?P<path>[^\s()]+?):\d+:\d+\)?\s*$", re.M)
_FOREIGN = ("site-packages/", "dist-packages/", "/lib/python", "node_modules/", "<frozen",
            "<string>", "<stdin>", "/usr/lib/", "/usr/local/lib/")
_LINE_PART = re.compile(r"^\d+$")


@dataclass(frozen=True)
class Identity:
    """What a report is, for dedup: the fingerprint and the parts it was made of."""

    fingerprint: str
    error_type: str
    call_site: str
    normalised: str

    @property
    def short(self) -> str:
        """The first 12 hex digits, used in branch names and PR titles."""
        return self.fingerprint[:12]


def normalise_message(message: str) -> str:
    """``message`` with the parts that vary between occurrences replaced by placeholders."""
    # Every report's message passes here: passes that cannot match are skipped (a UUID has
    # "-XXXX-XXXX-", a date "-00-", a time ":00:"), and split/join collapses whitespace as
    # ``\s+`` → " " would.
    text = _UUID.sub("<UUID>", message) if _UUID_HINT.search(message) else message
    if _TS_HINT.search(text):
        text = _TS.sub("<TS>", text)
    text = _DIGIT_WORD.sub("<ID>", text)
    return " ".join(text.split())[:MAX_NORMALISED]


def fingerprint(error_type: str, call_site: str, message: str) -> str:
    """sha256 hex of ``error_type||call_site||normalised message``."""
    return _digest(error_type.strip(), call_site, normalise_message(message))


def _digest(error_type: str, call_site: str, normalised: str) -> str:
    raw = f"{error_type}||{call_site}||{normalised}"
    return hashlib.sha256(raw.encode("utf-8", "replace")).hexdigest()


def _relative(path: str, root: str) -> str | None:
    """``path`` relative to the project, or None when the frame is not the project's.
    Remembered: the frames of one project's tracebacks recur in every report."""
    key = (path, root)
    try:
        return _RELATIVE[key]
    except KeyError:
        pass
    found = _relative_of(path, root)
    if len(_RELATIVE) >= _RELATIVE_MAX:
        _RELATIVE.clear()
    _RELATIVE[key] = found
    return found


_RELATIVE: dict[tuple[str, str], str | None] = {}
_RELATIVE_MAX = 4096


def _relative_of(path: str, root: str) -> str | None:
    path = path.replace("\\", "/")
    if root and path.startswith(root.rstrip("/") + "/"):
        path = path[len(root.rstrip("/")) + 1:]
    if any(marker in path for marker in _FOREIGN):
        return None
    if path.startswith(("/", "~")) or re.match(r"^[A-Za-z]:/", path):
        return None
    while path.startswith("./"):
        path = path[2:]
    return path or None


def _library_site(path: str, func: str) -> str:
    """A stable name for a frame outside the project: the path inside site-packages."""
    path = path.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/", "node_modules/"):
        if marker in path:
            return f"{path.split(marker, 1)[1]}:{func}"
    return f"{path.rsplit('/', 1)[-1]}:{func}"


def call_site_from_traceback(traceback: str, root: str = "") -> str:
    """The innermost in-project frame of ``traceback`` as ``relpath:function``.

    Falls back to the innermost frame of any kind (library path inside site-packages), and to
    ``<unknown>`` when the text holds no frames.
    """
    frames: list[tuple[str, str]] = _PY_FRAME.findall(traceback)  # (path, func) each
    if not frames:
        frames = [(m.group("path"), m.group("func") or "<anonymous>")
                  for m in _JS_FRAME.finditer(traceback)]
        frames.reverse()  # JS stacks list the innermost frame first
    for path, func in reversed(frames):
        rel = _relative(path, root)
        if rel is not None:
            return f"{rel}:{func}"
    if frames:
        path, func = frames[-1]
        return _library_site(path, func)
    return UNKNOWN_SITE


def normalise_call_site(site: str, root: str = "") -> str:
    """A caller's ``call_site`` tidied: line numbers dropped, project paths made relative."""
    site = site.strip().replace("\\", "/")
    if not site:
        return UNKNOWN_SITE
    path, sep, rest = site.partition(":")
    if re.match(r"^[A-Za-z]$", path) and rest:  # a Windows drive letter
        path2, sep, rest = rest.partition(":")
        path = f"{path}:{path2}"
    parts = [p for p in rest.split(":") if p and not _LINE_PART.match(p)] if sep else []
    rel = _relative(path, root)
    shown = rel if rel is not None else path
    return f"{shown}:{parts[-1]}" if parts else shown


def identify(error_type: str, message: str, *, traceback: str = "", call_site: str = "",
             root: str = "") -> Identity:
    """The identity of a report (call ``sanitize`` on the inputs first)."""
    site = normalise_call_site(call_site, root) if call_site.strip() else \
        call_site_from_traceback(traceback, root)
    etype = error_type.strip()
    norm = normalise_message(message)
    return Identity(_digest(etype, site, norm), etype, site, norm)
