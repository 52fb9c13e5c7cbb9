"""Strict JSON: what json.loads lets through (NaN, 1e400, lone surrogates …) is refused."""

from __future__ import annotations

import json
import sys
import time

import pytest

from healer.core.strict_json import StrictJSONError, loads_strict, nesting_depth


def refused(raw: bytes | str, max_depth: int = 64) -> StrictJSONError:
    with pytest.raises(StrictJSONError) as info:
        loads_strict(raw, max_depth)
    assert isinstance(info.value, ValueError)  # callers may catch ValueError
    assert str(info.value) == info.value.reason
    return info.value


class TestAccepted:
    @pytest.mark.parametrize("doc", [
        {"kind": "diagnose", "n": [1, -2, 3.5, 1e308, -1e-400, 0], "ok": True, "x": None},
        [], {}, "plain", 0, -0.0, False,
        {"emoji": "\U0001f600", "accents": "éü", "escaped": "tab\tnewline\n\u2028"},
        {"deep": [[[[{"a": [1]}]]]]},
        {"big": 10 ** 4299},
    ])
    def test_round_trip(self, doc: object) -> None:
        """Ordinary JSON (bytes or text, ASCII-escaped or not) parses as json.loads does."""
        for text in (json.dumps(doc), json.dumps(doc, ensure_ascii=False)):
            assert loads_strict(text.encode(), 64) == doc
            assert loads_strict(text, 64) == doc

    def test_surrogate_pair_is_fine(self) -> None:
        """An escaped surrogate *pair* is one character, not a lone surrogate."""
        assert loads_strict(b'{"e": "\\ud83d\\ude00"}') == {"e": "\U0001f600"}

    def test_duplicate_keys_last_wins(self) -> None:
        """Duplicate keys are allowed; the last one wins, as in json.loads."""
        assert loads_strict(b'{"a": 1, "a": 2}') == {"a": 2}

    def test_brackets_inside_strings_are_not_nesting(self) -> None:
        """Depth counts arrays and objects only, never brackets inside strings."""
        assert loads_strict(json.dumps({"s": "[[[[{{{{" * 50}).encode(), 4) == {
            "s": "[[[[{{{{" * 50}
        assert nesting_depth('{"a": "]]]", "b": [["\\"[["]]}') == 3

    def test_exactly_max_depth(self) -> None:
        """Nesting equal to max_depth is accepted; one more is refused."""
        assert loads_strict(b"[" * 8 + b"]" * 8, 8) is not None
        assert refused(b"[" * 9 + b"]" * 9, 8).kind == "depth"


class TestRefused:
    @pytest.mark.parametrize("raw,kind,fragment", [
        (b'{"a": NaN}', "constant", "NaN"),
        (b'{"a": Infinity}', "constant", "Infinity"),
        (b'{"a": -Infinity}', "constant", "-Infinity"),
        (b'[1e400]', "float_range", "1e400"),
        (b'[-1e400]', "float_range", "out of range"),
        (b'[' + b"9" * 400 + b'.5]', "float_range", "out of range"),
        (b'[' + b"1" * 5000 + b']', "int_digits", "5000 digits"),
        (b'{"a": -' + b"1" * 4400 + b'}', "int_digits", "4400 digits"),
        (b'{"a": "\\ud800"}', "surrogate", "\\ud800"),
        (b'{"a": "x\\udfffy"}', "surrogate", "\\udfff"),
        (b'{"\\ud800": 1}', "surrogate", "in a key"),
        (b'{"a": {"b": ["ok", "\\ude00"]}}', "surrogate", "$.a.b[1]"),
        (b'{"a": "\\ude00\\ud83d"}', "surrogate", "lone surrogate"),  # reversed pair
        (b'{"a": "\xff"}', "utf8", "byte 7"),
        ('{"a": 1}'.encode("utf-16"), "utf8", "not UTF-8"),
        (b'\xef\xbb\xbf{"a": 1}', "syntax", "BOM"),
        (b'{"a": 1} trailing', "syntax", "Extra data"),
        (b"{'a': 1}", "syntax", "not valid JSON"),
        (b'{"a": "\x01"}', "syntax", "Invalid control character"),
        (b"[" * 65 + b"]" * 65, "depth", "deeper than 64"),
    ])
    def test_refused_with_reason(self, raw: bytes, kind: str, fragment: str) -> None:
        """Each kind of non-strict input is refused with a reason naming the problem."""
        exc = refused(raw)
        assert exc.kind == kind, exc
        assert fragment in exc.reason, exc.reason
        assert not exc.truncated

    def test_lone_surrogate_in_text_input(self) -> None:
        """A str holding a raw lone surrogate (no escape) is refused too."""
        assert refused('{"a": "\ud800"}').kind == "surrogate"

    def test_deep_nesting_without_recursion(self) -> None:
        """A million open brackets are refused quickly, with no RecursionError."""
        start = time.monotonic()
        exc = refused(b"[" * 1_000_000)
        assert exc.kind == "depth" and time.monotonic() - start < 5

    def test_depth_beyond_the_interpreter(self) -> None:
        """A max_depth above what json's recursion allows still ends in StrictJSONError."""
        depth = sys.getrecursionlimit() * 4
        exc = refused(b"[" * depth + b"]" * depth, max_depth=depth + 1)
        assert exc.kind == "depth"


class TestTruncated:
    def test_every_prefix_is_truncated(self) -> None:
        """Any prefix of a valid document is refused as truncated (a writer not done yet)."""
        doc = json.dumps({"kind": "diagnose", "n": -1.5e-3, "t": True, "f": False, "z": None,
                          "s": "é\\\"\n\U0001f600", "a": [1, {"b": []}]},
                         ensure_ascii=False).encode()
        for cut in range(len(doc)):
            exc = refused(doc[:cut])
            assert exc.truncated, (doc[:cut], exc.reason)

    def test_complete_but_invalid_is_not_truncated(self) -> None:
        """Errors no further bytes could fix are not marked truncated."""
        for raw in (b'{"a": 1}}', b'{"a" 1}', b"[1,]", b'{"a": "\xff"}'):
            assert not refused(raw).truncated, raw
