"""``SourceStarts.first_of`` (one source's start by a search for its prefix) against ``track``
(every line read): the same start for every source, on logs built to trip it up; and a
merged log scanned from a file (which looks sources up) against the same bytes streamed
(which tracks every line)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from healer.detect.catalog import Catalog
from healer.detect.engine import Engine
from healer.detect.lines import UNKNOWN, SourceStarts

SEEN = 1_000.0

TRICKY = b"".join([
    b"[pod/api-1/app] 2025-12-01T10:00:05Z starting\n",
    b"web-1  | 2025-12-01T10:00:07Z up\n",
    b"web-1x | 2025-12-01T10:00:08Z another service, whose name starts like web-1\n",
    b"web-10 is not a prefix: no pipe\n",
    b"web-10| 2025-12-01T10:00:09Z no space before the pipe is a prefix too\n",
    b"  [pod/api-2/app] 2025-12-01T10:00:10Z indented: not a prefix\n",
    b"\x1b[31m[pod/api-3/app]\x1b[0m 2025-12-01T10:00:11Z colour first: not a prefix\n",
    b"[pod/api-2/app] no timestamp: the time it was seen\n",
    b"[pod/api-3/app] 2025-12-01T10:00:13Z\n",
    b"db-1 |no space after the pipe: not a prefix\n",
    b"db-1 | 2025-12-01T10:00:15Z now it is\n",
    b"[pod/" + b"n" * 260 + b"/c] too long a name\n",
    b"[pod/caf\xc3\xa9/app] 2025-12-01T10:00:16Z a name that is not ASCII\n",
    b"[pod/api-1/app] 2025-12-01T10:00:20Z later line of a known source\n",
])


def _same_starts(data: bytes) -> None:
    tracked = SourceStarts()
    tracked.track(data, 0, len(data), SEEN)
    for name, start in tracked.starts.items():
        found = SourceStarts.first_of(data, name, SEEN)
        assert found is UNKNOWN or found == start, name
        if name.isascii():
            assert found == start, name
    for name in ("pod/api-9/app", "web-2", "pod/a b/c", "x" * 70, "db"):
        assert name not in tracked.starts
        assert SourceStarts.first_of(data, name, SEEN) is None, name


def test_first_of_agrees_with_track_on_tricky_prefixes() -> None:
    _same_starts(TRICKY)
    _same_starts(TRICKY[TRICKY.index(b"\n") + 1:])  # a compose line first in the file
    assert SourceStarts.first_of(b"[pod/x/y] no stamp\n", "pod/x/y", SEEN) == SEEN
    assert SourceStarts.first_of(TRICKY, "pod/caf\ufffd/app", SEEN) is UNKNOWN


def test_first_of_agrees_with_track_on_shuffled_logs() -> None:
    lines = TRICKY.splitlines(keepends=True)
    rnd = random.Random(38)
    for _ in range(50):
        rnd.shuffle(lines)
        _same_starts(b"".join(lines))


def test_a_merged_log_gives_the_same_alerts_from_a_file_as_streamed(tmp_path: Path) -> None:
    log = b"".join([
        b"[pod/a-1/agent] 2025-12-01T10:00:00Z level=info msg=starting\n",
        b"[pod/b-1/agent] 2025-12-01T10:01:30Z level=info msg=starting\n",
        # a's pre-flight window is over, b's is not: only b's failure counts
        b"[pod/a-1/agent] 2025-12-01T10:01:40Z level=error msg=\"Tool inventory MISMATCH\"\n",
        b"[pod/b-1/agent] 2025-12-01T10:01:41Z level=error msg=\"Tool inventory MISMATCH\"\n",
    ] * 3)
    path = tmp_path / "merged.log"
    path.write_bytes(log)
    engine = Engine(Catalog.load())
    from_file = engine.scan_file(path, workers=1)
    streamed = engine.scan_bytes(log, source=str(path))
    assert [(a.line_no, a.code) for a in from_file] == [(a.line_no, a.code) for a in streamed]
    assert {a.origin for a in from_file if a.code.startswith("A")} == {"pod/b-1/agent"}


def _many_starts(data: bytes) -> None:
    """first_of_many for every name a test asks about is what track notes (the native pass
    finds a compose start first_of would give up on as UNKNOWN; a name no line can start
    with is None)."""
    tracked = SourceStarts()
    tracked.track(data, 0, len(data), SEEN)
    names = [*tracked.starts, "pod/api-9/app", "web-2", "pod/a b/c", "x" * 70, "db"]
    many = SourceStarts.first_of_many(data, names, SEEN)
    assert set(many) == set(names)
    for name in names:
        one = SourceStarts.first_of(data, name, SEEN)
        want = tracked.starts.get(name)
        assert many[name] == want or (many[name] is UNKNOWN and not name.isascii()), name
        assert one is UNKNOWN or one == many[name], name


def test_first_of_many_agrees_with_track(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from healer.detect import _native

    lines = TRICKY.splitlines(keepends=True)
    rnd = random.Random(7)
    for native in (True, False):
        if not native:
            monkeypatch.setattr(_native, "speedups", None)
        _many_starts(TRICKY)
        for _ in range(20):
            rnd.shuffle(lines)
            _many_starts(b"".join(lines))


def test_the_native_pass_finds_prefixes_where_first_of_does() -> None:
    """Edge cases of the one-pass search: a prefix on the first line or the last (with no
    newline after it), a compose name followed by 40 spaces or 41, or by a pipe with no space,
    a name that only starts a longer one; nothing asked, nothing found."""
    from healer.detect import _native

    sp = _native.speedups
    if sp is None:
        pytest.skip("the native module is not built here")
    data = (b"[pod/a/b] 2025-12-01T10:00:01Z first\n"
            + b"web" + b" " * 41 + b"| too many spaces\n"
            + b"web-1|no space after the pipe\n"
            + b"web-10 | a longer name\n"
            + b"web" + b" " * 40 + b"| forty spaces\n"
            + b"[pod/c/d] 2025-12-01T10:00:09Z last, no newline")
    pods, composes = sp.first_prefixed_lines(data, [b"[pod/a/b] ", b"[pod/c/d] ", b"[pod/x/y] "],
                                             [b"web", b"web-1", b"web-10"])
    assert pods[0] == len(b"[pod/a/b] ") and pods[2] == -1
    assert data[pods[1]:].startswith(b"2025-12-01T10:00:09Z last")
    assert data[composes[0]:].startswith(b"forty spaces") and composes[1] == -1
    assert data[composes[2]:].startswith(b"a longer name")
    assert sp.first_prefixed_lines(data, [], []) == ([], [])
    for name in ("pod/a/b", "pod/c/d", "pod/x/y", "web", "web-1", "web-10"):
        many = SourceStarts.first_of_many(data, [name], SEEN)[name]
        assert many == SourceStarts.first_of(data, name, SEEN), name


def test_a_file_looks_its_expected_sources_up_in_one_pass(tmp_path: Path,
                                                          monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The sources the hits to render name are looked up together, at the first one asked:
    one pass over the file, and the same starts as asking one by one."""
    from healer.detect import _files, _native

    sp = _native.speedups
    if sp is None:
        pytest.skip("the native module is not built here")
    log = b"".join(b"[pod/p-%d/agent] 2025-12-01T10:%02d:00Z level=info msg=starting\n"
                   % (k % 9, k % 60) for k in range(2000))
    path = tmp_path / "merged.log"
    path.write_bytes(log)
    passes: list[int] = []
    real = sp.first_prefixed_lines
    monkeypatch.setattr(sp, "first_prefixed_lines",
                        lambda buf, pods, composes: passes.append(len(pods)) or real(
                            buf, pods, composes))
    fd = os.open(path, os.O_RDONLY)
    try:
        sources = _files.FileSources(fd, SEEN)
        names = [f"pod/p-{k}/agent" for k in range(9)]
        sources.expect([*names, ""])
        got = [sources.start_of(name, 0.0) for name in reversed(names)]
    finally:
        os.close(fd)
    assert passes == [9]
    assert got == [SourceStarts.first_of(log, name, SEEN) for name in reversed(names)]
