"""Path logic for matching an error's file to the layers: normalised, repo-relative, globbed.

Errors name files in many ways — ``/srv/app/services/pay.py`` on a server, ``services/pay.py``
relative to ``sys.path``, ``webpack:///./src/cart.ts`` from a browser, ``C:\\build\\src\\x.py``.
The layers name them repo-relative, possibly as globs (``services/**/*.py``). Matching is
component-wise, never substring: ``services/pay.py`` matches neither ``old_services/pay.py``
nor ``services/pay.py.bak``.

* ``normalise(raw, root)`` → a repo-relative POSIX path (``""`` if there is none): URL schemes
  and query strings dropped, ``\\`` → ``/``, ``.``/``..`` resolved; an absolute path inside
  ``root`` made relative; an absolute path elsewhere (a deployed copy) mapped to the longest
  trailing part that exists in ``root``.
* ``match(pattern, path)`` → glob match of two normalised paths: ``*`` and ``?`` stay inside
  one component, ``**`` spans any number of components, ``[...]`` is a character class, and a
  pattern ending in ``/`` matches everything below that folder.
"""

from __future__ import annotations

import posixpath
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/{2,3}")
_DRIVE = re.compile(r"^[A-Za-z]:/")
GLOB_CHARS = frozenset("*?[")


def normalise(raw: object, root: Path | str | None = None) -> str:
    """``raw`` as a repo-relative POSIX path, or ``""`` when it names no file."""
    if not isinstance(raw, str):
        return ""
    text = raw.strip().replace("\\", "/")
    if not text or "\0" in text:
        return ""
    text = _SCHEME.sub("/", text)  # webpack:///./src/x.ts, app:///x.js, file:///srv/x.py
    text = text.split("?", 1)[0].split("#", 1)[0]
    absolute = text.startswith("/") or bool(_DRIVE.match(text))
    if _DRIVE.match(text):
        text = text[2:]
    clean = posixpath.normpath(text)
    if clean in (".", "/", ""):
        return ""
    if not absolute:
        return "" if clean == ".." or clean.startswith("../") else clean.lstrip("/")
    if root is not None:
        inside = _inside(clean, str(Path(root)))
        if inside is None:
            inside = _inside(clean, _resolved(str(root)))
        if inside is not None:
            return inside
        mapped = _longest_existing_suffix(clean, Path(root))
        if mapped:
            return mapped
    return clean.lstrip("/")


def _resolved(root: str) -> str:
    try:
        return str(Path(root).resolve())
    except OSError:
        return root


def _inside(path: str, root: str) -> str | None:
    root = posixpath.normpath(root.replace("\\", "/"))
    if root in ("/", "."):
        return None
    if path == root:
        return None
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1:]
    return None


def _longest_existing_suffix(path: str, root: Path) -> str:
    parts = [p for p in path.split("/") if p]
    for i in range(len(parts)):
        candidate = "/".join(parts[i:])
        if (root / candidate).is_file():
            return candidate
    return ""


def is_glob(pattern: str) -> bool:
    return any(c in GLOB_CHARS for c in pattern)


def clean_pattern(pattern: str) -> str:
    """A layer's path or glob, tidied like a path (keeps a trailing ``/``)."""
    text = pattern.strip().replace("\\", "/")
    folder = text.endswith("/")
    while text.startswith("./"):
        text = text[2:]
    text = text.lstrip("/")
    if not is_glob(text):
        text = posixpath.normpath(text) if text else ""
        text = "" if text == "." else text
    return text.rstrip("/") + "/" if folder and text else text


@lru_cache(maxsize=4096)
def _compile(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append(r"(?:[^/]+/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(r".*")
            i += 2
        elif c == "*":
            out.append(r"[^/]*")
            i += 1
        elif c == "?":
            out.append(r"[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 2)
            if end == -1:
                out.append(re.escape(c))
                i += 1
                continue
            body = pattern[i + 1:end]
            negate = body.startswith(("!", "^"))
            body = body[1:] if negate else body
            body = body.replace("\\", "\\\\").replace("/", "")
            out.append(f"[{'^/' if negate else ''}{body}]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


@lru_cache(maxsize=4096)
def _matcher(pattern: str) -> tuple[str, Any]:
    clean = clean_pattern(pattern)
    if clean.endswith("/"):
        return "folder", clean
    if not is_glob(clean):
        return "exact", clean
    return "glob", _compile(clean)


def match(pattern: str, path: str) -> bool:
    """Whether repo-relative ``path`` is ``pattern`` (exact, folder prefix, or glob)."""
    if not path or not pattern:
        return False
    kind, value = _matcher(pattern)
    if kind == "exact":
        return bool(value == path)
    if kind == "folder":
        return path.startswith(value)
    return value.match(path) is not None


def match_any(patterns: list[str] | tuple[str, ...], path: str) -> bool:
    return any(match(p, path) for p in patterns)
