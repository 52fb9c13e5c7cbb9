"""Pre-flight per agent: in a merged log each pod or service has its own 60-second window."""

from __future__ import annotations

from pathlib import Path

import pytest

from healer.detect.engine import Engine


def at(second: int) -> str:
    return f"2024-05-01T{10 + second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}.000Z"


def pod(name: str) -> str:
    return f"[pod/{name}/agent] "


# Eight pods started one after another, two minutes apart, each with a pre-flight failure 10 s
# after its own start (all must alert) and one 5 minutes after its start (none may).
MERGED = []
for n in range(8):
    p = pod(f"play-task-{n}-impl")
    MERGED.append(f"{p}{at(n * 120)} INFO agent starting")
    MERGED.append(f"{p}{at(n * 120 + 10)} ERROR Tool inventory MISMATCH for rex: missing: x")
for n in range(8):
    MERGED.append(f"{pod(f'play-task-{n}-impl')}{at(2000 + n)} ERROR mcp server failed to "
                  "initialize")


def alerts_by_kind(engine: Engine, text: str, tmp_path: Path, how: str) -> list[tuple[str, int]]:
    data = (text + "\n").encode()
    if how == "file":
        path = tmp_path / "merged.log"
        path.write_bytes(data)
        found = engine.scan_file(path, workers=1)
    elif how == "stream":
        s = engine.stream("kubectl")
        found = []
        for line in data.splitlines(keepends=True):  # as --follow reads them
            found += s.feed(line)
    else:
        found = engine.scan_bytes(data)
    return sorted((a.code, a.line_no) for a in found)


@pytest.mark.parametrize("how", ["file", "stream", "bytes"])
def test_every_pod_has_its_own_preflight_window(engine: Engine, tmp_path: Path,
                                                how: str) -> None:
    got = alerts_by_kind(engine, "\n".join(MERGED), tmp_path, how)
    assert got == [("A10", 2 * n + 2) for n in range(8)]


@pytest.mark.parametrize("how", ["file", "stream"])
def test_a_line_without_a_prefix_belongs_to_the_latest_started_source(
        engine: Engine, tmp_path: Path, how: str) -> None:
    lines = [f"{pod('a')}{at(0)} INFO start", f"{pod('b')}{at(600)} INFO start",
             f"{at(610)} ERROR Tool inventory MISMATCH: missing x",  # b's pre-flight: alerts
             f"{at(900)} ERROR Tool inventory MISMATCH: missing y"]  # nobody's: no alert
    got = alerts_by_kind(engine, "\n".join(lines), tmp_path, how)
    assert got == [("A10", 3)]


def test_compose_services_have_their_own_windows(engine: Engine, tmp_path: Path) -> None:
    lines = [f"api-1  | {at(0)} INFO up", f"worker-1  | {at(300)} INFO up",
             f"worker-1  | {at(305)} ERROR tools-server is unreachable",
             f"api-1  | {at(310)} ERROR tools-server is unreachable"]
    assert alerts_by_kind(engine, "\n".join(lines), tmp_path, "file") == [("A12", 3)]
