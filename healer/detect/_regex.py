"""Regexes compiled at their first use.

``healer scan`` imports the line model and the timestamp parser, whose regexes serve only the
pure-Python paths and the rarer line shapes: compiling them all at import costs each scan
more (~3 ms) than most of them are ever used for. A ``LazyRegex`` is a module-level regex
that compiles when first used, then answers as the compiled pattern (its methods are kept on
the object: no lookup beyond the first).
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_METHODS = ("match", "search", "fullmatch", "finditer", "findall", "sub", "split")


class LazyRegex:
    """``re.compile(pattern, flags)``, done when first used."""

    __slots__ = ("_args", *_METHODS)

    def __init__(self, pattern: bytes | str, flags: int = 0):
        self._args = (pattern, flags)

    def __getattr__(self, name: str) -> Any:  # only while a method is not yet set
        compiled = re.compile(*self._args)
        for method in _METHODS:
            setattr(self, method, getattr(compiled, method))
        return getattr(compiled, name)
