"""``atomic_create_bytes``: create-only, complete or absent, on both of its paths.

Where the system allows it the file is written unnamed (O_TMPFILE) and linked in when
complete; elsewhere through a named temp file. Both must behave alike.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from healer.core import files
from healer.core.files import atomic_create_bytes


@pytest.fixture(params=["unnamed", "named"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "named":
        monkeypatch.setattr(files, "_UNNAMED", [False])
    elif not files._UNNAMED[0]:
        pytest.skip("this system cannot create files unnamed")
    return str(request.param)


def test_a_create_writes_once_with_its_mode_and_leaves_nothing_else(way: str,
                                                                     tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    assert atomic_create_bytes(target, b'{"n": 1}\n', mode=0o640)
    assert target.read_bytes() == b'{"n": 1}\n'
    st = target.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_nlink == 1
    assert atomic_create_bytes(target, b'{"n": 2}\n') is False
    assert target.read_bytes() == b'{"n": 1}\n'
    assert os.listdir(tmp_path) == ["a.json"]  # no temp file left behind


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o777])
def test_the_mode_asked_for_is_the_mode_made_whatever_the_umask(way: str, tmp_path: Path,
                                                                 umask: int,
                                                                 monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """The unnamed file is made with its mode and chmod-ed only where the umask takes bits
    away; either way the file has exactly the mode asked for."""
    monkeypatch.setattr(files, "_UMASK", umask)
    old = os.umask(umask)
    try:
        for mode in (0o644, 0o600, 0o640):
            target = tmp_path / f"{mode:o}.json"
            assert atomic_create_bytes(target, b"{}\n", mode=mode, durable=False)
            assert stat.S_IMODE(target.stat().st_mode) == mode
    finally:
        os.umask(old)


def test_the_process_umask_is_read_without_changing_it() -> None:
    old = os.umask(0o027)
    try:
        assert files._read_umask() == 0o027
        assert os.umask(0o027) == 0o027
    finally:
        os.umask(old)


def test_a_create_in_a_missing_folder_makes_the_folder(way: str, tmp_path: Path) -> None:
    target = tmp_path / "new" / "b.json"
    assert atomic_create_bytes(target, b"x")
    assert target.read_bytes() == b"x"
    assert files._UNNAMED[0] == (way == "unnamed")  # a missing folder is no reason to stop


def test_a_symlink_planted_at_the_name_is_never_written_through(way: str,
                                                                tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (tmp_path / "c.json").symlink_to(victim)
    assert atomic_create_bytes(tmp_path / "c.json", b"new") is False
    assert victim.read_text() == "keep me\n"
