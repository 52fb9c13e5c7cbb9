"""Strict JSON for untrusted input: what ``json.loads`` lets through, refused with a reason.

Python's ``json`` module accepts more than RFC 8259: ``NaN``, ``Infinity`` and ``-Infinity``;
numbers such as ``1e400`` that silently become ``inf``; lone UTF-16 surrogates (``"\\ud800"``)
that later break every encoder; integers whose conversion raises a bare ``ValueError`` past
Python's digit limit; and nesting that recurses as deep as the input. ``loads_strict`` refuses
all of them — and invalid UTF-8 — with a ``StrictJSONError`` whose message a person can act on
and whose fields a caller can branch on::

    try:
        doc = loads_strict(body, max_depth=64)
    except StrictJSONError as exc:
        reply(400, exc.reason)           # "NaN is not valid JSON (no NaN or Infinity)"
        if exc.truncated: ...            # more bytes could still make the document valid

Duplicate object keys are allowed (the last one wins, as in ``json.loads``).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import sys
from typing import Any, Literal

__all__ = ["ErrorKind", "StrictJSONError", "loads_strict", "nesting_depth"]

ErrorKind = Literal["utf8", "syntax", "constant", "float_range", "int_digits", "surrogate",
                    "depth"]

# Every string literal (an unterminated one runs to the end), so brackets inside strings are
# not counted as nesting.
_STRING = re.compile(r'"(?:[^"\\]|\\[\s\S])*"?')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DELTA = {"[": 1, "{": 1, "]": -1, "}": -1}
# Lone surrogates can only come from a \\uD800-\\uDFFF escape (or a str input that has one).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# A short run of literal/number characters at the end: a token cut off by the end of input.
_CUT_TOKEN = re.compile(r"[A-Za-z0-9.+-]{1,24}")


class StrictJSONError(ValueError):
    """Input that is not strict JSON. ``str(exc)`` and ``reason`` are the readable reason.

    ``kind`` says which rule failed (``utf8``, ``syntax``, ``constant`` — NaN/Infinity,
    ``float_range``, ``int_digits``, ``surrogate``, ``depth``); ``pos`` is the byte (utf8) or
    character offset when known; ``truncated`` is True when the input ends before the document
    does, so more bytes could still make it valid (a writer that has not finished).
    """

    def __init__(self, reason: str, *, kind: ErrorKind, pos: int | None = None,
                 truncated: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.kind: ErrorKind = kind
        self.pos = pos
        self.truncated = truncated


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in JSON text, without recursing (strings skipped)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(map(_DELTA.__getitem__, brackets)), default=0)


def _clip(token: str) -> str:
    return token if len(token) <= 40 else f"{token[:20]}…{token[-8:]} ({len(token)} chars)"


def _reject_constant(token: str) -> Any:
    raise StrictJSONError(f"{token} is not valid JSON (no NaN or Infinity)", kind="constant")


def _float(token: str) -> float:
    value = float(token)
    if math.isinf(value):
        raise StrictJSONError(f"number {_clip(token)} is out of range (it overflows to "
                              "infinity)", kind="float_range")
    return value


def _int_parser(limit: int) -> Any:
    def parse(token: str) -> int:
        digits = len(token) - token.startswith("-")
        if digits > limit:
            raise StrictJSONError(f"integer with {digits} digits exceeds the {limit}-digit "
                                  "limit", kind="int_digits")
        return int(token)

    return parse


@functools.cache
def _decoder(limit: int) -> json.JSONDecoder:
    """The strict decoder for a digit limit, made once: json.loads with hooks builds a new
    decoder (and its scanner) on every call."""
    return json.JSONDecoder(parse_constant=_reject_constant, parse_float=_float,
                            parse_int=_int_parser(limit))


def _path(parts: tuple[str | int, ...]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _check_surrogates(doc: Any) -> None:
    """Refuse any string (key or value) holding a lone surrogate; iterative, any depth."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(doc, ())]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            if m := _SURROGATE.search(value):
                raise StrictJSONError(f"lone surrogate {ascii(m.group())[1:-1]} in the string "
                                      f"at {_path(where)}", kind="surrogate")
        elif isinstance(value, dict):
            for key, item in value.items():
                if m := _SURROGATE.search(key):
                    raise StrictJSONError(f"lone surrogate {ascii(m.group())[1:-1]} in a key "
                                          f"at {_path(where)}", kind="surrogate")
                stack.append((item, (*where, _SURROGATE.sub("?", key))))
        elif isinstance(value, list):
            stack.extend((item, (*where, i)) for i, item in enumerate(value))


def _truncated(text: str, exc: json.JSONDecodeError) -> bool:
    """Whether the syntax error is the end of input cutting a document short."""
    if exc.msg.startswith("Unterminated string"):
        return True
    if exc.msg.startswith("Extra data"):
        return False
    tail = text[exc.pos:].rstrip()
    return not tail or bool(_CUT_TOKEN.fullmatch(tail))


def loads_strict(raw: bytes | bytearray | memoryview | str, max_depth: int = 64) -> Any:
    """Parse ``raw`` (UTF-8 bytes, or text) as strict JSON; ``StrictJSONError`` otherwise.

    Refused: invalid UTF-8 (a UTF-8 byte-order mark is a syntax error, as in ``json.loads``),
    lone surrogates in keys or values, ``NaN``/``Infinity``/``-Infinity``, numbers that overflow
    to infinity, integers longer than Python's digit limit (``sys.get_int_max_str_digits()``,
    4300 when unlimited), and arrays/objects nested deeper than ``max_depth``.
    """
    if isinstance(raw, str):
        text = raw
    else:
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            cut = exc.reason == "unexpected end of data"
            raise StrictJSONError(f"not UTF-8 (byte {exc.start})", kind="utf8",
                                  pos=exc.start, truncated=cut) from None
    if text.count("[") + text.count("{") > max_depth:  # cheap test first; most inputs pass
        depth = nesting_depth(text)
        if depth > max_depth:
            raise StrictJSONError(f"JSON nested deeper than {max_depth} (depth {depth})",
                                  kind="depth")
    limit = sys.get_int_max_str_digits() or 4300
    try:
        if text.startswith("\ufeff"):  # as json.loads words it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        doc = _decoder(limit).decode(text)
    except json.JSONDecodeError as exc:
        raise StrictJSONError(f"not valid JSON: {exc}", kind="syntax", pos=exc.pos,
                              truncated=_truncated(text, exc)) from None
    except RecursionError:  # only when max_depth exceeds what the interpreter allows
        raise StrictJSONError(f"JSON nested too deep for this interpreter (limit {max_depth})",
                              kind="depth") from None
    if _SURROGATE_ESCAPE.search(text) or (isinstance(raw, str) and _SURROGATE.search(text)):
        _check_surrogates(doc)
    return doc
