"""``SourceStarts.first_of`` (one source's start by a search for its prefix) against ``track``
(every line read): the same start for every source, on logs built to trip it up; and a
merged log scanned from a file (which looks sources up) against the same bytes streamed
(which tracks every line)."""

from __future__ import annotations

import random
from pathlib import Path

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
