"""The engine's block-at-a-time path (``Engine(fast=True)``, what ``healer scan`` runs) gives
byte for byte what judging, confirming and rendering each line on its own gives
(``fast=False``): the alerts, their JSON and text as ``healer scan`` prints them, the counts and
the per-service tally — on a mixed corpus of every line shape the engine meets and its edge
cases, with both matchers, in one block and in many, in one process and in two; with its
native pieces (healer/detect/_speedups.c) and with their Python originals."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from detect_helpers import CORPUS, scan_env
from realistic_corpus import generate

from healer.commands._scan_run import _Output
from healer.detect import _files, _native, lines
from healer.detect._timestamps import iso, parse_ts, parse_ts_cached
from healer.detect.alert import Alert
from healer.detect.catalog import Catalog
from healer.detect.engine import Engine

T0 = 1714557600.0  # 2024-05-01T10:00:00Z
# The Python originals of the native pieces run in `make test-all` (the native module is built
# wherever `make test` runs: its set-up compiles it).
@pytest.fixture(params=["native", pytest.param("python", marks=pytest.mark.exhaustive)],
                autouse=True)
def fast_pieces(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: the fast path with its native pieces, and with the Python ones."""
    if request.param == "native":
        if _native.speedups is None:
            pytest.skip("the native module is not built here")
        return "native"
    monkeypatch.setattr(_native, "speedups", None)
    return "python"

PODS = [f"play-task-{n}-{kind}-x7k2p" for n in range(1, 4) for kind in ("impl", "test")]
ERRORS = [
    "thread 'main' panicked at src/agent.rs:214:9: called `Option::unwrap()` on a `None` value",
    "fatal error: runtime: out of memory",
    "request to tools-server failed: timeout after 30s",
    "dial tcp 127.0.0.1:3000: connect: connection refused",
    "max retries exceeded with url: /v1/messages",
    "permission denied while writing /workspace/out.json (read-only filesystem)",
    "github api returned 401 Unauthorized",
    "template not found: prompts/impl/rust.md.j2",
    "Tool inventory MISMATCH: declared tools missing: github_create_pull_request",
    "cto-config.json missing from /etc/cto",
    "mcp server github failed to initialize: exit status 1",
    "API Error: Request rejected (429) · rate limit",
    "API Error: 503 upstream connect error",
    "Error: Session ID 0f6b2f3e is already in use.",
    "ERROR: something broke",
    "timeout connection refused fatal error",  # several codes on one line
]
LOOKALIKES = [
    'level=info msg="request finished" error=nil status=200',
    '{"level":"info","msg":"validation done","errors": []}',
    "lint summary: errors: 0, warnings: 2",
    'level=info msg="config loaded" timeout=30s retries=3',
    "W0501 10:00:00.123456 1 reflector.go:424] watch closed, will retry",
    "test client::tests::handles_timeout ... ok",
    'level=debug msg="retrying after timeout"',
]


def _stamp(t: float, rnd: random.Random) -> str:
    """Timestamps in every shape parse_ts reads, valid and not."""
    base = iso(t)
    pick = rnd.random()
    if pick < 0.55:
        return base
    if pick < 0.65:
        return base.replace("T", " ").replace(".", ",")[:-1]  # Python logging
    if pick < 0.72:
        return base[:-1] + rnd.choice(["+02:00", "-0530", "+00:00", "UTC", "z", ""])
    if pick < 0.78:
        return base[:19] + "." + "".join(rnd.choice("0123456789") for _ in range(9)) + "Z"
    if pick < 0.82:
        return base[:17] + rnd.choice(["60", "59.9995", "61", "99"]) + "Z"  # leap, out of range
    if pick < 0.86:
        return rnd.choice(["2024-02-30", "2024-13-01", "2023-02-29", "2024-02-29"]) + base[10:]
    if pick < 0.93:
        return base[:19]  # no fraction, no zone
    return ""  # none: the line borrows one (or not)


def mixed_lines(n: int, seed: int = 11) -> list[bytes]:
    """``n`` lines (with newlines): benchmark-like agent logs with a high failure share, the
    realistic corpus's formats, and the edge cases of decoding, cutting, prefixes and time."""
    rnd = random.Random(seed)
    realistic = [line.encode() + b"\n" for line, _ in generate(max(2000, n // 2), seed=seed)]
    out: list[bytes] = []
    t = T0
    for i in range(n):
        t += rnd.uniform(0, 0.4)
        ts, pod = _stamp(t, rnd), rnd.choice(PODS)
        sp = " " if ts else ""
        err = rnd.choice(ERRORS)
        r = rnd.random()
        if r < 0.30:
            line = realistic[i % len(realistic)].rstrip(b"\n").decode()
        elif r < 0.40:
            line = f'{ts}{sp}level=error msg="{err}" pod={pod}'
        elif r < 0.48:
            line = json.dumps({"ts": ts, "level": rnd.choice(["error", "warn", "info", 50, 30,
                                                               "ERR", "fatal"]),
                               "pod": pod, "msg": err})
        elif r < 0.54:
            line = f"{ts}{sp}{rnd.choice(['ERROR', 'WARN', 'INFO', 'FATAL', 'Error'])} {pod} {err}"
        elif r < 0.58:
            line = f"\x1b[31m{ts}{sp}ERROR\x1b[0m {pod} {err}"
        elif r < 0.62:
            line = f"[pod/{pod}/agent] {ts}{sp}level=error msg=\"{err}\""
        elif r < 0.64:
            line = f"\x1b[32m[pod/{pod}/agent]\x1b[0m {ts}{sp}ERROR {err}"
        elif r < 0.67:
            line = f"{rnd.choice(['web-1', 'tools-server-1', 'db'])}  | {ts}{sp}ERROR {err}"
        elif r < 0.70:
            line = f"{ts}{sp}{rnd.choice(LOOKALIKES)}"
        elif r < 0.72:
            line = f"E0501 10:{i % 60:02d}:00.{i:06d}       1 worker.go:42] {err}"
        elif r < 0.73:
            line = f"<{rnd.choice([3, 11, 14, 30, 191, 200])}>{ts} agent: {err}"
        elif r < 0.74:
            line = f"[POD/{pod}/agent] {ts} ERROR {err}"  # not kubectl's prefix
        elif r < 0.75:
            line = f"<not syslog> {err}"
        elif r < 0.76:
            line = f"{ts} ERROR {err}\r"  # CRLF
        elif r < 0.77:
            line = f"{ts} ERROR\t{err} \x01\x07 bell \x7f del\r\r"
        elif r < 0.78:
            line = f"{ts} ERROR {'é' * rnd.randint(50, 400)} {err} {'€' * rnd.randint(0, 300)}"
        elif r < 0.79:
            line = f"{ts} ERROR {err} " + "x" * rnd.randint(150, 3000)
        elif r < 0.80:
            line = " " * 150 + f"info {err}"  # a level word past the judged head
        elif r < 0.81:
            line = json.dumps({"type": "assistant", "message": {"content": [
                {"type": "text", "text": f"I will fix: {err}"}]}})
        elif r < 0.82:
            line = json.dumps({"type": "user", "message": {"content": [
                {"type": "tool_result", "is_error": True, "content": err}]}})
        elif r < 0.83:
            line = json.dumps({"type": "item.completed", "item": {
                "type": "command_execution", "exit_code": rnd.choice([0, 1]),
                "aggregated_output": err}})
        elif r < 0.835:
            line = ""
        elif r < 0.84:  # a lone ESC is no escape sequence: it stays in the cleaned line
            line = f"{ts} {rnd.choice(['WARN', 'ERROR', 'DEBUG'])} {err} \x1b{rnd.choice('z~')}"
        else:
            line = f'{ts}{sp}level=info msg="heartbeat" pod={pod} duration={i % 900}ms'
        data = line.encode("utf-8")
        if r >= 0.84 and rnd.random() < 0.01:
            data += b" data=\xff\xfe\xc3(\x80 " + err.encode()  # invalid UTF-8
        if 0.78 <= r < 0.79 and rnd.random() < 0.3:
            data = data[:rnd.randint(700, 900)] + b"\xe2\x82 " + err.encode()  # cut mid-char
        out.append(data + b"\n")
    out[-1] = out[-1].rstrip(b"\n")  # a last line without newline
    return out


@pytest.fixture(scope="module")
def mixed_logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per matcher: the re matcher confirms every pattern on every candidate line, so it gets
    a shorter log."""
    out = {}
    for kind, n in (("hyperscan", 30_000), ("re", 3_000)):
        path = tmp_path_factory.mktemp("mixed") / f"mixed-{kind}.log"
        path.write_bytes(b"".join(mixed_lines(n)))
        out[kind] = path
    return out


CATALOGS = {"embedded": lambda: Catalog.load(),
            "seed": lambda: Catalog.load().select(generic=False)}


def _render(engine: Engine, path: Path, as_json: bool, workers: int) -> list[Any]:
    out = _Output(as_json, io.StringIO(), live=False)
    return engine.render_file(path, out.render, workers=workers)


# The `re` matcher's renders run in `make test-all`; its alerts are compared below.
@pytest.mark.parametrize("kind", ["hyperscan", pytest.param("re", marks=pytest.mark.exhaustive)])
@pytest.mark.parametrize("catalog", sorted(CATALOGS))
def test_fast_path_renders_what_the_line_by_line_path_renders(
        mixed_logs: dict[str, Path], kind: str, catalog: str,
        monkeypatch: pytest.MonkeyPatch, fast_pieces: str) -> None:
    """JSON and text output, counts and service tallies: identical, in one block and in many
    (lookback across blocks), in one process and in two."""
    mixed_log = mixed_logs[kind]
    cat = CATALOGS[catalog]()
    fast = Engine(cat, engine=kind, clock=lambda: T0 + 3600)
    slow = Engine(cat, engine=kind, clock=lambda: T0 + 3600, fast=False)
    assert fast.fast and not slow.fast
    assert (fast._speedups is not None) == (fast_pieces == "native")
    monkeypatch.setattr(_files, "PARALLEL_MIN_BYTES", 0)
    for block in (_files.BLOCK_BYTES, 64 << 10):
        monkeypatch.setattr(_files, "BLOCK_BYTES", block)
        for as_json in (True, False):
            for workers in (1, 2):
                want = _render(slow, mixed_log, as_json, workers)
                assert len(want) == workers and all(w[0] and w[1] for w in want)
                assert _render(fast, mixed_log, as_json, workers) == want, (block, as_json,
                                                                            workers)


@pytest.mark.parametrize("kind", ["hyperscan", "re"])
def test_fast_path_finds_the_same_alerts(mixed_logs: dict[str, Path], kind: str) -> None:
    """Every field of every alert, from files, buffers and streams fed in pieces, with --since,
    a given start and short lines; and each alert's JSON is its to_dict()."""
    mixed_log = mixed_logs[kind]
    cat = Catalog.load()
    data = mixed_log.read_bytes()
    for kw in ({}, {"max_line_chars": 30}):
        fast = Engine(cat, engine=kind, clock=lambda: T0 + 3600, **kw)
        slow = Engine(cat, engine=kind, clock=lambda: T0 + 3600, fast=False, **kw)
        want = slow.scan_file(mixed_log, workers=1)
        got = fast.scan_file(mixed_log, workers=1)
        assert got == want and len(want) > 1000
        for a in got[:3000]:
            assert a.to_json() == json.dumps(a.to_dict(), ensure_ascii=True,
                                             separators=(",", ":"))
        for args in ({"start_time": T0 + 100, "not_before": T0 + 300},
                     {"labels": {"pod": "x", "ns": "cto"}}):
            assert fast.scan_bytes(data, seen_at=T0, **args) == \
                slow.scan_bytes(data, seen_at=T0, **args)
        streams = [e.stream("pipe") for e in (fast, slow)]
        got_s: list[list[Alert]] = [[], []]
        for k in range(0, len(data), 50_000):
            for s, acc in zip(streams, got_s, strict=True):
                acc += s.feed(data[k:k + 50_000], seen_at=T0 + k)
        for s, acc in zip(streams, got_s, strict=True):
            acc += s.flush(seen_at=T0)
        assert got_s[0] == got_s[1] and got_s[0]


def test_healer_scan_prints_what_the_reference_path_renders(mixed_logs: dict[str, Path],
                                                            tmp_path: Path) -> None:
    """End to end: `healer scan --json` and the text form print the reference's bytes."""
    mixed_log = mixed_logs["hyperscan"]
    for flags, as_json in ((["--json"], True), ([], False)):
        native = "1" if _native.speedups is not None else "0"
        proc = subprocess.run([sys.executable, "-m", "healer", "scan", "--no-summary",
                               "--start", str(T0), *flags, str(mixed_log)], cwd=tmp_path,
                              env=scan_env(tmp_path, HEALER_DETECT_NATIVE=native),
                              capture_output=True, timeout=120, check=False)
        assert proc.returncode == 1, proc.stderr
        out = _Output(as_json, io.StringIO(), live=False)
        slow = Engine(Catalog.load(), fast=False)
        want = "".join(r[0] for r in slow.render_file(mixed_log, out.render, start_time=T0))
        assert proc.stdout.decode() == want


def test_corpus_alerts_are_unchanged(corpus: Any) -> None:
    """The labelled corpus: the fast path is the reference, alert for alert."""
    for kind in ("hyperscan", "re"):
        fast = Engine(Catalog.load(), engine=kind)
        slow = Engine(Catalog.load(), engine=kind, fast=False)
        assert fast.scan_file(CORPUS / "agent.log") == slow.scan_file(CORPUS / "agent.log")


def test_line_views_do_not_depend_on_the_caches() -> None:
    """view() caches level words and plain-text levels: warm caches give what cold ones do."""
    lines_ = [line.rstrip(b"\n") for line in mixed_lines(6000, seed=4)]
    # the same head, a level word further and further in (past the 96 bytes that are read)
    for k in range(0, 130, 3):
        for word in (b"ERROR", b"INFO", b"WARN", b"[debug]", b"level=trace"):
            for prefix in (b"", b"[pod/a-1/agent] ", b"web-1  | ", b"2024-05-01T10:00:00Z "):
                lines_.append(prefix + b"x" * k + b" " + word + b" connection refused")
    random.Random(2).shuffle(lines_)

    def cold() -> None:
        lines._LEVELS_SEEN.clear()
        lines._JSON_WORDS.clear()

    want = []
    for line in lines_:
        cold()
        want.append(lines.view_fields(line))
    cold()
    assert [lines.view_fields(line) for line in lines_] == want
    assert [lines.view_fields(bytearray(line)) for line in lines_] == want


def test_cached_timestamps_are_parse_ts_to_the_bit() -> None:
    rnd = random.Random(3)
    lines = [b"", b"no time here", b"I0501 10:00:00.123456 klog", b'{"ts": 1714557600.25}']
    for _ in range(20_000):
        lines.append((rnd.choice(["", "x ", '{"ts":"', "a" * 150]) + _stamp(
            T0 + rnd.uniform(-1e9, 1e9), rnd) + " rest").encode())
    for line in lines:
        want = parse_ts(line, T0)
        got = parse_ts_cached(line, T0)
        assert (want is None and got is None) or (want is not None and got is not None
                                                  and want.hex() == got.hex()), line


def test_joined_lines_decode_like_each_line() -> None:
    """What _texts relies on: UTF-8 decoding never runs across an ASCII newline."""
    rnd = random.Random(5)
    alphabet = [b"a", b"\n", b"\xc3", b"\xa9", b"\xe2", b"\x82", b"\xac", b"\xf0", b"\x9f",
                b"\x98", b"\x80", b"\xff", b"\xed", b"\xa0", b"\xc0", b"\r", b"\x01"]
    engine = Engine(Catalog.load(), max_line_chars=20)
    for _ in range(3000):
        raws = [b"".join(rnd.choice(alphabet[:1] + alphabet[2:])
                         for _ in range(rnd.randint(0, 40)))
                for _ in range(rnd.randint(1, 5))]
        assert engine._texts(raws) == [engine._text(r) for r in raws]
