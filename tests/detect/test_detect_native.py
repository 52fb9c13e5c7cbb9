"""The native fast paths (healer/detect/_speedups.c) give what their Python originals give, to
the bit and the byte: ISO timestamps, pass 1 (candidate lines, newline counts), judging and
timing hits, building alerts, JSON Lines. Whole-engine equality, with and without them, is
tests/detect/test_detect_fast_path.py's; here each piece meets its edge cases head on."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from healer.detect import _native, lines
from healer.detect._timestamps import _ISO_MINUTE, parse_ts_cached
from healer.detect.alert import Alert, json_bytes, json_lines
from healer.detect.catalog import Catalog
from healer.detect.engine import Engine

REPO = Path(__file__).resolve().parents[2]
T0 = 1714557600.0

needs_native = pytest.mark.skipif(_native.speedups is None,
                                  reason="the native module is not built here")


def test_the_native_module_is_built_where_it_can_be() -> None:
    """Where a compiler and Python's headers are, the install built it (else the engine
    silently runs its slower paths: this is the test that notices)."""
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which("cc") is None or not headers.exists():
        pytest.skip("no C compiler or Python headers: the pure-Python paths are the product")
    assert _native.speedups is not None, "run `python hatch_build.py` or reinstall healer"
    assert _native.speedups.VERSION == _native.VERSION


def test_healer_detect_native_0_turns_them_off() -> None:
    env = {**os.environ, "HEALER_DETECT_NATIVE": "0", "PYTHONPATH": str(REPO)}
    code = ("from healer.detect import _native, engine, catalog;"
            "print(_native.speedups, engine.Engine(catalog.Catalog.load())._speedups)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out == ["None", "None"]


def _stamps(rnd: random.Random) -> str:
    """Almost-timestamps: every part of the ISO form present, missing, cut or out of range."""
    date = rnd.choice(["2024-05-01", "2024-02-29", "2023-02-29", "2024-13-01", "0000-01-01",
                       "9999-12-31", "1969-12-31", "2024-00-10", "2024-04-31", "2024-5-01"])
    sep = rnd.choice(["T", " ", "t", "_"])
    clock = rnd.choice(["10:00:00", "23:59:59", "24:00:00", "10:60:00", "10:00:60", "10:00:61",
                        "00:00:00", "1:00:00", "10:00"])
    frac = rnd.choice(["", ".", ",", ".1", ".123", ",123", ".123456789", ".1234567890123",
                       ".9995", "." + "9" * rnd.randint(1, 12)])
    space = rnd.choice(["", "", " ", "\t", "  "])
    zone = rnd.choice(["", "Z", "z", "UTC", "+02:00", "-05:30", "+0200", "-0530", "+02:0",
                       "+2:00", "+02", "+14:00", "-00:00", "+99:99", "GMT"])
    return date + sep + clock + frac + space + zone


def _lines(n: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    out = [b"", b"no time", b"I0501 10:00:00.123456 klog", b'{"ts": 1714557600.25}']
    for _ in range(n):
        lead = rnd.choice(["", "x ", '{"ts":"', "[pod/a/b] ", "9" * rnd.randint(1, 8) + "-",
                           "a" * rnd.randint(120, 160)])
        text = lead + _stamps(rnd) + rnd.choice(["", " rest", "Z", "0", "1 more"])
        if rnd.random() < 0.1:
            text = text[:rnd.randint(0, len(text))]
        out.append(text.encode())
    return out


@needs_native
def test_iso_timestamps_are_parse_ts_cached_to_the_bit() -> None:
    parse_iso = _native.speedups.parse_iso
    for line in _lines(40_000, seed=1):
        want = parse_ts_cached(line, T0)
        got = parse_iso(line)
        if got is False:
            assert _ISO_MINUTE.search(line, 0, 160) is None, line
            continue
        assert (want is None and got is None) or (
            want is not None and got is not None and want.hex() == got.hex()), line
        assert parse_iso(bytearray(line)) == got
        assert parse_iso(memoryview(line)) == got


def _alert(rnd: random.Random, patterns: list, sources: list[str]) -> Alert:
    p = rnd.choice(patterns)
    text = "".join(rnd.choice(["a", " ", '"', "\\", "\n", "\r", "\t", "\b", "\f", "\x00",
                               "\x1f", "\x7f", "é", "€", "\u2028", "\ud800", "😀", "\U0010ffff",
                               "x" * 20]) for _ in range(rnd.randint(0, 30)))
    ts = rnd.choice([None, T0 + rnd.uniform(-1, 1e6), 0.0, 1714557600.0005, 1714557600.0015,
                     1714557659.9996, -1.5, 1e12, 253402300799.9996, 7,
                     rnd.uniform(0, 2e9)])
    labels = MappingProxyType({}) if rnd.random() < 0.9 else {"pod": "x\u00e9"}
    return Alert(p.code, p.id, p.priority, p.severity, rnd.choice(sources),
                 rnd.choice([1, 7, 10**12, rnd.randint(1, 10**6)]), text, ts, labels,
                 p if rnd.random() < 0.97 else None, "error", "")


@needs_native
def test_json_lines_are_to_json() -> None:
    """Escapes (quotes, controls, DEL, non-ASCII, astral, lone surrogates), times (rounding,
    before 1970, past 9999, an int), labels, no pattern, and more (pattern,
    source) pairs than the native fragment cache has slots."""
    rnd = random.Random(2)
    patterns = list(Catalog.load().patterns)
    sources = ["agent.log", "pod/x/y", "sé", *(f"s{k}" for k in range(40))]
    alerts = [_alert(rnd, patterns, sources) for _ in range(20_000)]
    want = "".join(a.to_json() + "\n" for a in alerts)
    assert json_lines(alerts) == want
    assert json_lines([]) == ""
    assert json_bytes(alerts) == want.encode("ascii")  # made as bytes, the same text
    assert json_bytes([]) == b""
    for line in want.splitlines()[:2000]:
        json.loads(line)



def _judge(found: list[Any]) -> tuple[Any, Any, list[bytes]]:
    """The native judge_lines over ``found``, and the lines it handed to Python's view."""
    viewed: list[bytes] = []

    def view(line: bytes) -> tuple[bytes, str, str, str]:
        viewed.append(bytes(line))
        return (line, "", "", lines.LOG)

    judged, bodies = _native.speedups.judge_lines(found, view, lines.SPEECH, lines.RANK, [0])
    return judged, bodies, viewed


@needs_native
def test_the_native_judge_views_the_lines_needs_view_names() -> None:
    """needs_view in C: prefixes, JSON, escapes, '| ', the low level words in any case, at
    and around the 160-byte head."""
    rnd = random.Random(3)
    triggers = ["{", "\x1b", "| ", "|", "info", "INFO", "Debug", "tRaCe", "notice", "inf",
                "[pod/", "<", "nfo", "notic", "ı"]
    found = []
    for k in range(6000):
        pos = rnd.choice([0, 1, 5, 150, 155, 156, 157, 158, 159, 160, 161, rnd.randint(0, 300)])
        word = rnd.choice(triggers)
        line = ("x" * pos + word + " connection refused" * rnd.randint(0, 3)).encode()
        if rnd.random() < 0.5:
            line = line[:rnd.randint(0, len(line))] or b"x"
        found.append((k, 0, line if rnd.random() < 0.5 else bytearray(line), [0]))
    judged, bodies, viewed = _judge(found)
    sp = _native.speedups
    # The native line model views what it can; the rest goes to view_fields (here: `view`).
    assert viewed == [bytes(f[2]) for f in found
                      if lines.needs_view(f[2]) and sp.view_line(f[2]) is None]
    assert len(judged) == len(bodies) == len(found)
    for f, row in zip(found, judged, strict=True):
        if not lines.needs_view(f[2]):
            assert row[4:] == (f[2], "", "")
        elif sp.view_line(f[2]) is not None:
            body, level, source, _ = lines.view_fields(f[2])
            assert row[4:] == (body, source, level)


# Pieces of lines for the line model: every prefix, level and JSON form, whole, cut, too long
# and next to each other (the regexes' backtracking edges).
_PIECES = [
    b"[pod/a-1/main] ", b"[pod/x/y/z] ", b"[pod//c] ", b"[pod/a/b]", b"[pod/a b/c] ",
    b"[pod/" + b"n" * 253 + b"/c] ", b"[pod/" + b"n" * 254 + b"/c] ",
    b"[pod/a/" + b"c" * 63 + b"] ",
    b"[pod/a/" + b"c" * 64 + b"] ", b"[pod/\xc3\xa9/c] ", b"2024-05-01T10:00:00Z ",
    b"2024-05-01 10:00:00.123 ", b"2024-05-01T10:00:00.123456789 ",
    b"2024-05-01T10:00:00.1234567890 ", b"2024-05-01T10:00:00+05:30 ",
    b"2024-05-01T10:00:00+0530 ", b"2024-05-01T10:00:00+05:3 ", b"2024-05-01T10:00:00z",
    b"2024-05-01T10:00:00,5-01:00 ", b"2024-05-01T10:00:00. ", b"2024-05-01T10:00:00Zx ",
    b"web-1  | ", b"web_1\t| ", b"w" * 63 + b" | ", b"w" * 64 + b" | ", b"api" + b" " * 40 + b"| ",
    b"api" + b" " * 41 + b"| ", b"a.b-c| ", b"x |", b"-bad | ", b"{", b" {", b"\t{", b"}",
    b'"type"', b'"msg": {', b'"msg":{', b'"msg":  {', b'"level"', b'"levelname"', b'"log.level"',
    b'"lvl"', b'"severity"', b'"loglevel"', b" : ", b":", b'"INFO"', b'"warning"', b'"e"',
    b'"abcdefghijkl"', b'"abcdefghijklm"', b'"Err"', b"30", b"50", b"1234", b"5x", b"60,",
    b"level=", b"LVL=", b'severity="', b"loglevel=", b"info", b"warning", b"error2",
    b"abcdefgh", b"abcdefghi", b"err_", b"[", b"<", b"(", b"]", b">", b")", b" ", b"\t", b"INFO",
    b"WARN", b"WARNING", b"ERR", b"Error", b"Critical", b"Debug", b"CRIT", b"notice",
    b"information", b"PANIC", b"FATAL", b"TRACE", b":", b"|", b"-", b"x", b"\r", b"\n",
    b"\x1b[31m", b"<134>", b"<3>", b"<191>", b"<192>", b"<1234>", b"<12", b"I0501 10:00:00",
    b"E1231 23:59:59.1", b"W0101 10:00:0", b"F0501 10:00:00 ", b"connection refused", b"\xff",
    b"\x00", b"0", b"9", b"a" * 90, b"_",
    b'{"type":"assistant","message":{"content":[{"type":"text","text":"timeout"}]}}',
    b'{"type":"user","message":{"content":[{"type":"tool_result","is_error":true}]}}',
    b'{"msg":{"type":"agent_message"}}', b'{"level":"error","msg":"x"}',
]


def _assert_native_view(line: bytes | bytearray) -> bool:
    """The native view of ``line`` is view_fields' (True when it decided without Python)."""
    want = lines.view_fields(line)
    got = _native.speedups.view_line(line, lines.view_document)
    if got is None:  # escape codes: left to view_fields
        assert b"\x1b" in line
    else:
        assert got == want and type(got[0]) is type(want[0]), line
    alone = _native.speedups.view_line(line)
    assert alone is None or alone == want, line
    return alone is not None


@needs_native
@pytest.mark.parametrize("seed", range(4))
def test_the_native_line_model_is_view_fields(seed: int) -> None:
    """view_fields in C (kubectl, timestamp and compose prefixes, plain-text, syslog, klog and
    JSON-field levels; JSON documents handed to lines.view_document), on pieces of lines
    put together at random."""
    rnd = random.Random(seed)
    decided = 0
    for _ in range(8000):
        line = b"".join(rnd.choice(_PIECES) for _ in range(rnd.randint(1, 8)))
        if rnd.random() < 0.3:
            line += b"\n"
        for form in (line, bytearray(line)):
            decided += _assert_native_view(form)
    assert decided > 8000  # most of them without Python


@needs_native
def test_the_native_line_model_on_the_realistic_corpus() -> None:
    """Every line of the realistic mixed-format corpus (kubectl and compose prefixes, logfmt,
    JSON, klog, ANSI, Claude Code and Codex transcripts) is viewed as view_fields views it."""
    import realistic_corpus

    for text, _ in realistic_corpus.generate(20000, seed=7):
        _assert_native_view(text.encode("utf-8") + b"\n")


def test_a_json_body_is_read_as_json_loads_reads_it() -> None:
    """lines._json skips json.loads's encoding detection: the same documents, the same
    refusals (invalid UTF-8, lone surrogates, UTF-16, not an object)."""
    for text in [b'{"a": 1}', b' {"a": "\\ud800"}', b'{"a": "\xff"}', b'{"a": "\xed\xa0\x80"}',
                 b'{\x00"\x00}\x00', b"{", b" [1]", b'{"a": "\xc3\xa9"}', b"{}", b' \t{"a":1} \r\n',
                 b'{"a":1} x', b'{"a":1}{}', b'{"a":1}\x0b', b"  ", b' {"a": [1, {"b": null}]}  ']:
        try:
            want = json.loads(text)
        except ValueError:
            want = None
        assert lines._json(text) == (want if isinstance(want, dict) else None), text


@needs_native
@pytest.mark.parametrize("seed", range(6))
def test_native_pass_one_is_the_python_loop(seed: int) -> None:
    """scan_block in C against scan_block in Python: candidate lines, confirmation, newline
    counts and the hits, on blocks whose lines are short and long (the vectorized count's
    edges), with ANSI lines and candidates sharing lines."""
    rnd = random.Random(seed)
    words = ["connection refused", "timeout", "\x1b[31mERROR\x1b[0m fatal error", "ok",
             "panicked at", "", "x" * rnd.choice([7, 31, 32, 33, 8159, 8160, 8161])]
    data = b"".join((" ".join(rnd.choice(words) for _ in range(rnd.randint(0, 4))) +
                     "\n").encode() for _ in range(rnd.randint(1, 4000)))
    if rnd.random() < 0.5:
        data = data.rstrip(b"\n")
    native = Engine(Catalog.load(), clock=lambda: T0)
    python = Engine(Catalog.load(), clock=lambda: T0)
    python._speedups = None
    assert native._speedups is not None
    for buf in (data, bytearray(data)):
        for lo in (0, data.find(b"\n") + 1):
            want = python.scan_block(buf, lo, len(data), [], 5)
            got = native.scan_block(buf, lo, len(data), [], 5)
            assert got == want and want[0] == data.count(b"\n", lo)


@needs_native
def test_the_collector_holds_what_the_python_handler_would() -> None:
    """Hyperscan's matches kept in C (_speedups.Collector): the pairs the Python handler of
    HyperscanMatcher.candidates makes, and pass 1 reads them as it reads the sorted list,
    NotImplemented included (a line with more candidates than the C loop holds)."""
    from healer.detect import _match

    sp = _native.speedups
    catalog = Catalog.load()
    matcher = _match.HyperscanMatcher(catalog.patterns)
    data = b"ok\nconnection refused; panicked at x\n\nfatal error: timeout\nok\n" * 50
    confirm = [p.compiled().search for p in catalog.patterns]
    trusted = [False] * len(confirm)
    for lo in (0, 3):
        col = sp.Collector()
        col.reset(lo - 1)
        matcher.collect(data, lo, len(data), col)
        col.extend([(lo, 0)])
        want = sorted([*matcher.candidates(data, lo, len(data)), (lo, 0)])
        assert len(col) == len(want) and col.pairs() == want
        assert sp.confirm_lines(data, lo, len(data), col, 7, {}, confirm, trusted) == \
            sp.confirm_lines(data, lo, len(data), want, 7, {}, confirm, trusted)
    rnd = random.Random(14)
    for _ in range(200):  # the matches in order, then a second run (ANSI lines' candidates)
        col = sp.Collector()
        col.reset(-1)
        matcher.collect(data, 0, len(data), col)
        tail = [(rnd.randint(0, len(data) - 1), rnd.randrange(len(confirm)))
                for _ in range(rnd.choice([1, 2, 5, 40]))]
        if rnd.random() < 0.5:
            tail.sort()
        col.extend(tail)
        want = sorted([*matcher.candidates(data, 0, len(data)), *tail])
        assert sp.confirm_lines(data, 0, len(data), col, 0, {}, confirm, trusted) == \
            sp.confirm_lines(data, 0, len(data), want, 0, {}, confirm, trusted)
    crowded = sp.Collector()
    crowded.extend([(0, i) for i in range(65)])
    many = (confirm * 2)[:65]
    assert sp.confirm_lines(data, 0, len(data), crowded, 0, {}, many, [False] * 65) is \
        NotImplemented
    assert crowded.pairs() == [(0, i) for i in range(65)]
    with pytest.raises(TypeError):
        sp.confirm_lines(data, 0, len(data), (), 0, {}, confirm, trusted)


def _ansi_log(rnd: random.Random, n: int) -> bytes:
    """Lines of words, failures, escapes, empty lines and long lines."""
    parts = [b"ok", b"fatal error", b"\x1b[31mERROR\x1b[0m timeout", b"", b"\x1b[1m",
             b"connection refused " * 30, b"\x1b]0;title\x07x", b"\x1b", b"Unauthorized",
             b"plain \xff\xfe bytes", b"\tpanicked at main.rs"]
    return b"\n".join(b" ".join(rnd.choice(parts) for _ in range(rnd.randint(1, 3)))
                      for _ in range(n))


@needs_native
def test_tail_heads_are_what_the_python_original_finds() -> None:
    """The heads of a block's last lines (for borrowed timestamps): the same list from C as
    from engine._tail_heads' Python loop, at every block edge: a final newline or none, an
    empty block, a block start inside the buffer, fewer lines than asked, old heads kept."""
    from healer.detect import engine

    sp = _native.speedups
    rnd = random.Random(38)
    for _ in range(300):
        data = _ansi_log(rnd, rnd.choice([0, 1, 3, 70, 200]))
        if rnd.random() < 0.5:
            data += b"\n"
        buf = bytearray(data) if rnd.random() < 0.5 else data
        lo = rnd.randint(0, len(data))
        lo = data.find(b"\n", lo) + 1 if rnd.random() < 0.7 else lo
        hi = rnd.randint(lo, len(data))
        tail = [b"old %d" % k for k in range(rnd.choice([0, 5, 64]))]
        want = engine._tail_heads(buf, lo, hi, tail)
        assert engine._tail_heads(buf, lo, hi, tail, sp) == want
    with pytest.raises(ValueError, match="bad bounds"):
        sp.tail_heads(b"abc", 2, 1, 64, 160)


@needs_native
def test_matches_grouped_by_line_in_c_are_what_python_groups() -> None:
    """Matches over lines joined by newlines, placed on their lines in C: the suppressions to
    try on each line (Suppressor.candidates) and an ANSI line's candidates at its start
    (Engine._clean_candidates), as the Python originals place them."""
    from healer.detect import _match

    sp = _native.speedups
    catalog = Catalog.load()
    rnd = random.Random(5)
    python = _match.Suppressor(catalog.suppressions, use_hyperscan=True)
    native = _match.Suppressor(catalog.suppressions, use_hyperscan=True)
    python._sp = None
    eng = Engine(catalog)
    specific = placed = 0
    for _ in range(60):
        lines = [rnd.choice([b"ok", b"0 errors", b'"errors": []', b"failed: 0", b"timeout=30s",
                             b"fatal error", b"", b"x" * 300, b"retrying (attempt 2 of 5)"])
                 for _ in range(rnd.randint(1, 40))]
        got, want = native.candidates(lines), python.candidates(lines)
        assert got == want
        specific += sum(k is not native._always for k in got)
        # (a line with nothing to try shares the one list, as in Python)
        assert all(k is native._always for k, w in zip(got, want, strict=True)
                   if w is python._always)
        data = _ansi_log(rnd, rnd.randint(1, 50))
        ansi = sp.ansi_lines(data, 0, len(data))
        cands = sp.Collector()
        if ansi:
            eng._clean_candidates_native(sp, cands, ansi)
        assert sorted(cands.pairs()) == sorted(eng._clean_candidates([], ansi))
        placed += len(cands)
    assert specific > 100 and placed > 100  # (both sides really had matches to place)
    col = sp.Collector()
    col.extend([(5, 1)])
    with pytest.raises(ValueError, match="outside"):
        sp.line_sets(col, b"abc", 1, [])
    col.reset(0)
    col.extend([(2, 1)])
    with pytest.raises(ValueError, match="past the last line"):
        sp.lines_at(col, b"a\nb", [0], 0, sp.Collector())


needs_libhs = pytest.mark.skipif(_native.libhs() is None,
                                 reason="no libhs here (Debian: apt-get install libhyperscan5)")


@needs_libhs
def test_libhs_compiles_scans_into_a_collector_and_round_trips() -> None:
    """The system libhs through the native module: matches go into a Collector at their end
    offset plus its shift, from any buffer and within bounds; a dumped database loads again and
    scans the same; what libhs refuses is a ValueError that says why (and which expression)."""
    sp = _native.speedups
    db = sp.libhs_compile([b"fatal error", b"time(d )?out", b"^ok$"], [1 | 4, 1 | 4, 4],
                          [7, 8, 9])
    data = b"ok\nFATAL ERROR: timed out\nnot ok\nok"
    col = sp.Collector()
    col.reset(-1)
    db.scan(data, 0, len(data), col)
    assert col.pairs() == [(1, 9), (13, 7), (24, 8), (34, 9)]
    col.reset(2)  # a view from offset 3: its offsets shifted back into the buffer
    db.scan(bytearray(data), 3, 25, col)
    assert col.pairs() == [(13, 7), (24, 8)]
    again = sp.libhs_load(db.dump())
    col.reset(-1)
    again.scan(memoryview(data), 0, len(data), col)
    assert col.pairs() == [(1, 9), (13, 7), (24, 8), (34, 9)]
    with pytest.raises(ValueError) as bad:
        sp.libhs_compile([b"fine", b"broken(", b"x"], [0, 0, 0], [0, 1, 2])
    assert bad.value.args[1] == 1 and "parenthesis" in bad.value.args[0]
    for exprs, flags, ids in (([], [], []), ([b"a\0b"], [0], [0]), (["text"], [0], [0]),
                              ([b"a"], [0, 0], [0]), ([b"a"], [-1], [0])):
        with pytest.raises((ValueError, OverflowError)):
            sp.libhs_compile(exprs, flags, ids)
    with pytest.raises(ValueError, match="not a database"):
        sp.libhs_load(b"not a database")
    for lo, hi in ((-1, 3), (3, 2), (0, len(data) + 1)):
        with pytest.raises(ValueError, match="bad bounds"):
            db.scan(data, lo, hi, col)
    with pytest.raises(TypeError):
        db.scan(data, 0, 3, [])


@needs_libhs
def test_libhs_and_the_binding_find_the_same_alerts(tmp_path: Path) -> None:
    """The engine on libhs (the default where it is installed) and on the hyperscan package's
    binding (HEALER_DETECT_LIBHS=0): the same alerts, byte for byte, on the realistic corpus and
    on a log of the patterns' edge cases, with the suppressions' and line flags' scans too."""
    sys.path.insert(0, str(Path(__file__).parent))
    from realistic_corpus import generate

    log = tmp_path / "mixed.log"
    log.write_text("".join(line + "\n" for line, _ in generate(6000, seed=3)) +
                   "Error: 429 Too Many Requests\n\x1b[31mfatal error\x1b[0m: boom\n"
                   "0 rate limits hit\npanicked at x\n" * 20, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HEALER_CACHE_DIR": str(tmp_path / "c")}
    outs = {}
    for mode in ("1", "0"):
        code = ("import sys; from healer.detect import engine, catalog;"
                "e = engine.Engine(catalog.Catalog.load());"
                "print(e.matchers[0].backend, 'hyperscan' in sys.modules, file=sys.stderr);"
                f"alerts = e.scan_file({str(log)!r});"
                "sys.stdout.write(''.join(a.to_json() + chr(10) for a in alerts))")
        proc = subprocess.run([sys.executable, "-c", code],
                              env={**env, "HEALER_DETECT_LIBHS": mode}, capture_output=True,
                              text=True, timeout=120, check=True)
        outs[proc.stderr.strip()] = proc.stdout
    # (with libhs the hyperscan package is not even imported: it is part of every start)
    assert set(outs) == {"libhs False", "binding True"}
    assert outs["libhs False"] == outs["binding True"]
    assert outs["libhs False"].count("\n") > 300


@needs_libhs
def test_a_cached_database_scans_without_loading_the_compiler(tmp_path: Path) -> None:
    """libhs's compiler (libhs.so.5, C++: it brings libstdc++) is loaded only to compile: a scan
    whose database is cached runs on the runtime library alone, and finds the same alerts."""
    if not Path("/usr/lib/x86_64-linux-gnu/libhs_runtime.so.5").exists():
        pytest.skip("no libhs_runtime.so.5 here: libhs.so.5 does both")
    log = tmp_path / "a.log"
    log.write_text("ok\nconnection refused\nfatal error\n" * 50, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HEALER_CACHE_DIR": str(tmp_path / "c")}
    code = ("import sys; from healer.detect import engine, catalog;"
            f"alerts = engine.Engine(catalog.Catalog.load()).scan_file({str(log)!r});"
            "libs = {line.split('/')[-1].split('.so')[0] for line in open('/proc/self/maps')"
            "        if '.so' in line};"
            "print(len(alerts), sorted(libs & {'libhs', 'libhs_runtime', 'libstdc++'}))")
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=120, check=True).stdout.strip()
            for _ in range(2)]
    assert runs == ["100 ['libhs', 'libhs_runtime', 'libstdc++']",  # compiled, then cached
                    "100 ['libhs_runtime']"]


@needs_libhs
def test_prefetch_reads_and_scans_until_asked_on_its_own_thread(tmp_path: Path) -> None:
    """Prefetch reads a file's next part into a buffer on a native thread, then Hyperscans
    its whole lines into a Collector a slice at a time, until result() is asked for (or to
    the end with result(True)); the scan, rebased, finds the rest: together, the matches of
    one scan. Without a collector it only reads. Errors (a bad descriptor, misuse) are Python
    exceptions; the buffer cannot be resized while the thread writes it; close() ends the
    thread."""
    sp = _native.speedups
    db = sp.libhs_compile([b"fatal error", b"refused"], [1 | 4, 1 | 4], [0, 1])
    lines = [b"ok %d" % i if i % 7 else b"fatal error %d refused" % i for i in range(40_000)]
    data = b"\n".join(lines) + b"\ntail without newline"
    path = tmp_path / "a.log"
    path.write_bytes(data)
    whole = sp.Collector()
    fd = os.open(path, os.O_RDONLY)
    try:
        hi = len(data) - 100  # the region ends before the file does
        buf = bytearray(400_000)
        buf[:3] = b"ab\n"  # a carried-over line start
        p = sp.Prefetch(fd, hi, db)
        for finish in (True, False, False):
            col = sp.Collector()
            p.start(buf, 3, hi, 0, col)
            got, cut, upto = p.result(finish)
            assert got == len(buf) - 3 and bytes(buf[3:]) == data[:got]
            assert cut == buf.rindex(b"\n") + 1 and 0 <= upto <= cut
            assert upto == cut if finish else upto == 0 or buf[upto - 1:upto] == b"\n"
            col.rebase(upto - 1)
            db.scan(buf, upto, cut, col)
            whole.reset(-1)
            db.scan(buf, 0, cut, whole)
            assert col.pairs() == whole.pairs() and len(whole.pairs()) > 5000
        col = sp.Collector()
        p.start(buf, 0, 150, hi - 150, col)  # to the region's end: all of it is whole lines
        assert p.result(True) == (150, 150, 150)
        # signals stay with Python's main thread (SIGINT: KeyboardInterrupt there)
        assert _prefetch_threads() == ["healer-prefetch"]
        blocked = [line for task in os.listdir("/proc/self/task")
                   if "healer-prefetch" in Path(f"/proc/self/task/{task}/comm").read_text()
                   for line in Path(f"/proc/self/task/{task}/status").read_text().splitlines()
                   if line.startswith("SigBlk:")]
        assert int(blocked[0].split()[1], 16) & (1 << (2 - 1))  # SIGINT is 2
        p.start(buf, 0, 150, 0)  # no collector: only read
        assert p.result() == (150, -1, -1) and bytes(buf[:150]) == data[:150]
        with pytest.raises(RuntimeError, match="no job"):
            p.result()
        p.start(buf, 0, 10, 0)
        with pytest.raises(RuntimeError, match="not taken"):
            p.start(buf, 0, 10, 0)
        p.close()  # waits for the job, ends the thread
        p.close()
        assert not _prefetch_threads()
        p.start(buf, 0, 10, 0)
        with pytest.raises(BufferError):
            buf.extend(b"x" * 10000)  # held until the result is taken
        assert p.result()[0] == 10
        buf.extend(b"x")
        with pytest.raises(TypeError, match="needs a database"):
            sp.Prefetch(fd, hi).start(buf, 0, 10, 0, sp.Collector())
        with pytest.raises(ValueError, match="bad bounds"):
            p.start(buf, len(buf) + 1, 10, 0)
        with pytest.raises(TypeError):
            sp.Prefetch(fd, hi, "not a database")
        bad = sp.Prefetch(10_000, hi)
        bad.start(buf, 0, 10, 0)
        with pytest.raises(OSError):
            bad.result()
        del p, bad
    finally:
        os.close(fd)
    assert not _prefetch_threads()


def _prefetch_threads() -> list[str]:
    names = []
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            names.append(Path(f"/proc/self/task/{task}/comm").read_text().strip())
    return [n for n in names if n == "healer-prefetch"]


_EVENT_TYPES = ["assistant", "assistant", "item.completed", "item.started", "item.updated",
                "user", "result", "error", "x", 5, None]
_ITEM_TYPES = ["agent_message", "reasoning", "todo_list", "file_change", "command_execution",
               "error", "other", 3, None]
_JSON_SNIPS = [b'"type": "assistant"', b'"type":"item.completed"', b'"msg": {}', b",", b"{",
               b"}", b"[", b"]", b'"', b"\\", b"\\u00", b"NaN", b"-Infinity", b"1e", b"01",
               b"-", b"\x00", b"\x1f", b"\xff", b"\xed\xa0\x80", b"\xc3\xa9",
               b"\xf0\x9f\x98\x80", b" ", b"\t", b"\x0b", b'"type": 5',
               b'"typ\\u0065": "assistant"', b'"it\\u0065m": {}', b"9" * 120, b"true", b"nul",
               b'"item": {"type": "agent_message"}', b'"item": {"type": "error", "type": 1}']


@needs_native
@pytest.mark.parametrize("seed", range(3))
def test_the_native_transcript_events_are_view_document(seed: int) -> None:
    """Claude Code assistant messages and Codex item events read in C: the same view as
    json + lines._structured, on documents with repeated keys (the last one counts), escaped
    keys, nesting, and bytes broken at random (invalid JSON or UTF-8 goes to Python)."""
    rnd = random.Random(seed)
    events = 0
    for _ in range(6000):
        doc: dict[str, object] = {}
        for _ in range(rnd.randint(0, 4)):
            key = rnd.choice(["type", "type", "item", "msg", "message", "subtype", "text"])
            doc[key] = rnd.choice([rnd.choice(_EVENT_TYPES), [1, 2.5e3, -0.1, True, None],
                                   {"type": rnd.choice(_ITEM_TYPES), "text": "timeout é"},
                                   "x\ny", {"a": {"b": [{}]}}])
        text = json.dumps(doc, ensure_ascii=rnd.random() < 0.5,
                          separators=rnd.choice([(",", ":"), (", ", ": ")])).encode()
        if rnd.random() < 0.3:
            text = text.replace(b'"type"', b'"type": "assistant", "type"', 1)
        for _ in range(rnd.choice([0, 0, 0, 1, 2])):
            pos = rnd.randint(0, len(text))
            text = text[:pos] + rnd.choice(_JSON_SNIPS) + text[pos + rnd.choice([0, 1]):]
        text = rnd.choice([b"", b"", b" ", b" \t"]) + text + rnd.choice([b"", b"", b" ", b"\r"])
        if rnd.random() < 0.3:
            text = rnd.choice([b"[pod/a/b] ", b"2024-05-01T10:00:00Z ", b"web-1 | "]) + text
        _assert_native_view(text)
        got = _native.speedups.view_line(text)
        events += got is not None and b'"type"' in text
    assert events > 100  # (most documents here are broken or of other kinds)


_PARTS = [{"type": "tool_result", "is_error": True}, {"type": "tool_result", "is_error": False},
          {"type": "tool_result", "is_error": 1}, {"type": "tool_result"}, {"type": "text"},
          {"is_error": True}, {"type": ["tool_result"], "is_error": True}, "tool_result",
          [{"type": "tool_result", "is_error": True}], {"x": {"type": "tool_result",
                                                              "is_error": True}}]
_SUBTYPES = ["success", "error_max_turns", "error", "api_error", "init", "", 5, None, True,
             ["error"], {"e": "error"}, "Error"]


@pytest.mark.parametrize("seed", range(3))
@needs_native
def test_the_native_claude_events_are_view_document(seed: int) -> None:
    """Claude Code user, result, system and error events read in C: a tool_result part with
    is_error true (and only such a part, directly in the last message's last content list)
    makes a user event an error; a result's is_error and subtype, a system event's subtype
    (str() of it: an array may say error) — repeated keys, escaped strings and broken bytes
    included, as json + lines._structured read them."""
    rnd = random.Random(seed)
    decided: dict[tuple[str, str, str], int] = {}  # (level, source, part) → lines
    for _ in range(6000):
        doc: dict[str, object] = {}
        for _ in range(rnd.randint(1, 5)):
            key = rnd.choice(["type", "type", "message", "message", "subtype", "is_error",
                              "content", "text"])
            if key == "type":
                doc[key] = rnd.choice(["user", "result", "system", "error", "assistant", 5])
            elif key == "message":
                doc[key] = rnd.choice([
                    {"role": "user", "content": rnd.sample(_PARTS, rnd.randint(0, 3))},
                    {"content": "a prompt"}, {"content": rnd.sample(_PARTS, 1),
                                              "content ": []}, "text", None])
            elif key == "subtype":
                doc[key] = rnd.choice(_SUBTYPES)
            elif key == "is_error":
                doc[key] = rnd.choice([True, False, 1, "true", None])
            else:
                doc[key] = rnd.choice(_PARTS)
        text = json.dumps(doc, ensure_ascii=rnd.random() < 0.5,
                          separators=rnd.choice([(",", ":"), (", ", ": ")])).encode()
        if rnd.random() < 0.2:  # a key again (the last one counts), or one spelled with escapes
            text = text.replace(b"{", rnd.choice([
                b'{"message": {"content": [{"type": "tool_result", "is_error": true}]}, ',
                b'{"subtype": "error_x", ', b'{"subtype": "\\u0065rror", ',
                b'{"is_error": true, ', b'{"typ\\u0065": "user", ',
                b'{"message": {"cont\\u0065nt": []}, ']), 1)
        for _ in range(rnd.choice([0, 0, 0, 1])):
            pos = rnd.randint(0, len(text))
            text = text[:pos] + rnd.choice(_JSON_SNIPS) + text[pos + rnd.choice([0, 1]):]
        if rnd.random() < 0.3:
            text = rnd.choice([b"[pod/a/b] ", b"2024-05-01T10:00:00Z "]) + text
        _assert_native_view(text)
        got = _native.speedups.view_line(text)
        if got is not None:
            decided[got[1:]] = decided.get(got[1:], 0) + 1
    # Most are decided in C (the rest: escapes, broken JSON), both ways for each kind.
    assert sum(decided.values()) > 1500
    assert min(decided.get((level, "", part), 0) for level, part in [
        ("error", "log"), ("info", "log"), ("info", "speech")]) > 100


@needs_native
def test_ansi_lines_are_the_regex_s() -> None:
    """ansi_lines in C: the lines holding ESC and their text as _match.ANSI strips it — every
    sequence form (CSI, OSC ended by BEL or ST, two-byte), cut or unended ones, lone ESCs, at
    the ends of the block and of the buffer, from bytes and bytearrays."""
    from healer.detect import _match

    rnd = random.Random(7)
    pieces = [b"\x1b", b"[", b"]", b"\\", b"\x07", b"\n", b"31m", b"0;1", b" ", b"!", b"/",
              b"@", b"~", b"a", b"Z", b"_", b"^", b"?", b"8;;http://x", b"\x1b\\", b"\x7f",
              b"\x80", b"[0m", b"(B", b"\x1b]", b"\x1b[", b"error"]
    sp = _native.speedups
    for _ in range(20_000):
        data = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 40)))
        starts = [0] + [i + 1 for i, c in enumerate(data) if c == 10]
        lo = rnd.choice(starts)
        hi = rnd.choice([len(data), rnd.randint(lo, len(data))])
        for buf in (data, bytearray(data)):
            assert sp.ansi_lines(buf, lo, hi) == _match.ansi_lines(buf, lo, hi), (data, lo, hi)


@needs_native
def test_json_times_are_iso_s_from_1970_to_9999() -> None:
    """The alert time in C (days to a date without gmtime): _timestamps.iso's text for any
    millisecond of the years it renders, leap days and the ends of months and years too."""
    from healer.detect._timestamps import iso

    rnd = random.Random(8)
    pattern = Catalog.load().patterns[0]
    stamps = [rnd.uniform(0, 253402300799.999) for _ in range(20_000)]
    stamps += [day * 86400.0 + off for day in range(0, 2_932_897, 97)
               for off in (0.0, 86399.9994)]
    stamps += [951782400.0, 951868799.999, 4107542400.0, 68256000000.0]  # 2000-02-29, 2100
    alerts = [Alert(pattern.code, pattern.id, pattern.priority, pattern.severity, "s", 7, "x",
                    ts, MappingProxyType({}), pattern, "error", "") for ts in stamps]
    got = json_lines(alerts).splitlines()
    assert [json.loads(line)["ts"] for line in got] == [iso(ts) for ts in stamps]


@needs_native
@pytest.mark.parametrize(("generic", "kind"), [(False, bytes), (True, bytes),
                                               (True, bytearray)])
def test_pass_1_drops_only_what_the_judge_drops(generic: bool, kind: type) -> None:
    """confirm_lines given the line model's ranks drops a candidate line before it becomes
    objects only when judge_lines would drop it (speech, a level under every candidate
    pattern's min_level), and hands the lines it viewed over judged (judge_lines passes them
    on): what the judge keeps is the same, on every line shape of the mixed corpus and the
    realistic one, with the embedded catalog and the seed one, from bytes and from the file
    scan's bytearray."""
    from test_detect_fast_path import mixed_lines

    cat = Catalog.load() if generic else Catalog.load().select(generic=False)
    engine = Engine(cat, engine="hyperscan")
    data = kind(b"".join(mixed_lines(6000, seed=5)) + b"\n")
    sp = _native.speedups
    cands = sp.Collector()
    cands.reset(-1)
    engine.matchers[0].collect(data, 0, len(data), cands)
    confirm, trusted = engine._confirm, engine._trusted
    n_all, found_all = sp.confirm_lines(data, 0, len(data), cands, 0, {}, confirm, trusted)
    n_cut, found_cut = sp.confirm_lines(data, 0, len(data), cands, 0, {}, confirm, trusted,
                                        lines.RANK, engine._min_rank)
    assert n_all == n_cut and len(found_cut) < len(found_all)
    judge = [lines.view_fields, lines.SPEECH, lines.RANK, engine._min_rank, lines.view_document]
    assert sp.judge_lines(found_cut, *judge) == sp.judge_lines(found_all, *judge)
    judged = [row for row in found_cut if len(row) == 7]
    assert {len(row) for row in found_all} == {4} and len(judged) > len(found_cut) // 2
    assert any(row[5] for row in judged) and any(row[4] != row[2] for row in judged)
    assert any(len(row) == 4 for row in found_cut)  # (a JSON document: Python reads it)
    assert all(type(row[4]) is kind for row in judged)


@needs_native
def test_native_line_texts_are_the_joined_decoding() -> None:
    """line_texts (each line on its own in C) gives what _texts' joined decoding gives: ASCII
    lines as they are, cut at max_line_chars with an ellipsis; tabs kept; CR, controls, DEL,
    invalid and valid UTF-8, bytearrays handed to _text."""
    rnd = random.Random(11)
    alphabet = [b"a", b"Z", b" ", b"~", b"\t", b'"', b"\\", b"\r", b"\x01", b"\x7f", b"\xc3\xa9",
                b"\xe2\x80\xa6", b"\xff", b"\xf0\x9f\x98\x80", b"\xed\xa0\x80"]
    native = Engine(Catalog.load(), max_line_chars=20)
    joined = Engine(Catalog.load(), max_line_chars=20)
    joined._speedups = None  # the pure-Python original: join, decode, split
    for _ in range(2000):
        raws: list[bytes | bytearray] = []
        for _ in range(rnd.randint(1, 6)):
            ascii_only = rnd.random() < 0.6
            pool = alphabet[:5] if ascii_only else alphabet
            raw = b"".join(rnd.choice(pool) for _ in range(rnd.randint(0, 30)))
            raws.append(bytearray(raw) if rnd.random() < 0.1 else raw)
        assert native._texts(raws) == joined._texts(raws), raws


@needs_native
def test_native_alert_counts_are_the_python_tally() -> None:
    """The scan's summary counts (per pattern, per service kind) from alert_counts are what
    the Python loops count, in the same order: runs of one pattern and one kind, equal
    values in different objects, alerts without a pattern; anything but a list of alerts
    is left to Python."""
    from healer.commands import _scan_run

    rnd = random.Random(12)
    patterns = list(Catalog.load().patterns)[:6]
    levels = ["", "error", "warn", "".join(["err", "or"])]  # the last: equal, not identical
    alerts = []
    for _ in range(5000):
        p = rnd.choice(patterns)
        origin = rnd.choice(["", "pod/a/b", "".join(["pod/", "c/d"]), "api"])
        a = Alert(p.code, p.id, p.priority, p.severity, rnd.choice(["x.log", "y.log"]), 1,
                  "line", None, MappingProxyType({}), p if rnd.random() < 0.95 else None,
                  rnd.choice(levels), origin)
        alerts.extend([a] * rnd.choice([1, 1, 3]))
    sp = _native.speedups
    # A few kinds (counted in slots), then more kinds than slots (a new origin object per
    # alert): the slots' counts first, the rest counted directly.
    for some in (alerts[:50], alerts):
        counts, kinds = sp.alert_counts(some)
        want_kinds: dict[tuple[str, str, str, str], int] = {}
        want_counts: dict[int, int] = {}
        for a in some:
            key = (a.origin, a.source, a.level, a.severity)
            want_kinds[key] = want_kinds.get(key, 0) + 1
            if a.pattern is not None:
                want_counts[a.pattern.index] = want_counts.get(a.pattern.index, 0) + 1
        assert list(kinds.items()) == list(want_kinds.items())
        assert list(counts.items()) == list(want_counts.items())
    assert sp.alert_counts([]) == ({}, {})
    assert sp.alert_counts(tuple(alerts)) is NotImplemented
    assert sp.alert_counts([*alerts, ("not", "an", "alert")]) is NotImplemented
    native = _scan_run._tally(alerts)
    try:
        _native.speedups = None
        python = _scan_run._tally(alerts)
    finally:
        _native.speedups = sp
    assert native == python


@needs_native
def test_needs_view_in_c_at_every_offset() -> None:
    """needs_view in C skips 16 bytes at a time where no trigger pair starts: lines of the
    trigger letters and their neighbours in both cases (pairs that almost make a word, '|'
    without its space, '[' and ';' that look like '{' and ESC once lower-cased), every
    length around the 16-byte steps and the 160-byte head."""
    rnd = random.Random(13)
    alphabet = list(b"iInNdDeEtTrRoOfFgbuUcac|{[;\x1b .x")
    words = ["info", "INFO", "Notice", "dEbUg", "trace", "| ", "{", "\x1b", "inf", "notic",
             "debu", "trac", "[", ";", "|x", "in", "de", "tr", "no"]
    found = []
    for k in range(20_000):
        n = rnd.choice([rnd.randint(0, 40), rnd.randint(140, 180), rnd.randint(0, 400)])
        line = bytearray(rnd.choice(alphabet) if rnd.random() < 0.2 else 0x78 for _ in range(n))
        if rnd.random() < 0.7:  # one word at any offset, the filler left and right of it
            at = rnd.randint(0, n)
            line[at:at] = rnd.choice(words).encode()
        found.append((k, 0, bytes(line), [0]))
    judged, _, viewed = _judge(found)
    sp = _native.speedups
    for f, row in zip(found, judged, strict=True):
        if not lines.needs_view(f[2]):
            assert row[4:] == (f[2], "", ""), f[2]
    assert viewed == [f[2] for f in found
                      if lines.needs_view(f[2]) and sp.view_line(f[2]) is None]
    assert sum(map(lines.needs_view, (f[2] for f in found))) > 1000  # both kinds, plenty
