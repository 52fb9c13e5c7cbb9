"""Another local user cannot redirect what healer writes, nor feed it through a folder of theirs.

Every folder healer writes into is opened without following a symlink (``healer.core.safedirs``):
a ``human/``, ``applied/`` or ``rejected/`` planted as a symlink gets nothing written through it;
a results dir another user owns, or anyone may write into, stops ``healer loop`` with one line
naming the folder and why, and ``healer doctor`` shows the same. Temp files are ``O_EXCL |
O_NOFOLLOW``; a result file whose name is not UTF-8 is set aside in ``rejected/`` with a reason.
The tests run as root, so "another user" is uid 65534 (nobody), given with chown.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from healer.config import load_settings
from healer.core import safedirs
from healer.core.bus import ResultsBus
from healer.core.escalation import Escalation, escalate
from healer.core.files import atomic_write_bytes
from healer.core.store import FileStore
from healer.errors import UnsafeDirError
from healer.testing.loop import drop_result
from healer.testing.wait import wait_for

NOBODY = 65534


def _settings(tmp_path: Path) -> object:
    return load_settings(env={}, overrides=[
        f"state_dir={tmp_path / 'state'}", f"fleet_dir={tmp_path / 'fleet'}",
        f"results_dir={tmp_path / 'results'}", f"selfheal.repo={tmp_path}", "node_id=testnode"])


def _bus(tmp_path: Path) -> ResultsBus:
    return ResultsBus(tmp_path / "results", FileStore(tmp_path / "state"), settle_s=0.2,
                      rescan_s=0.3, fleet_dir=tmp_path / "fleet", node="me")


def _elsewhere(tmp_path: Path) -> Path:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "theirs.txt").write_text("keep me\n")
    return target


def _untouched(target: Path) -> bool:
    return sorted(p.name for p in target.iterdir()) == ["theirs.txt"]


# -- escalation seed files ------------------------------------------------------------------

async def test_a_human_inbox_planted_as_a_symlink_gets_no_seed_file(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    target = _elsewhere(tmp_path)
    (tmp_path / "fleet").mkdir()
    (tmp_path / "fleet" / "human").symlink_to(target)
    esc = Escalation(title="Could not heal web-1", target="web-1", severity="high",
                     what_happened="The service stayed down.")
    rec = await escalate(_settings(tmp_path), FileStore(tmp_path / "state"), esc)
    assert rec.seed_file is None
    assert _untouched(target)
    lines = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("fleet/human" in m and "is a symlink" in m for m in lines), lines


def test_a_seed_archive_planted_as_a_symlink_is_refused(tmp_path: Path) -> None:
    from healer.core import seeds

    target = _elsewhere(tmp_path)
    path = seeds.write(tmp_path / "fleet", seeds.Seed(sender="a", to="b", subject="s", body="x"))
    (path.parent / "archive").symlink_to(target)
    with pytest.raises(UnsafeDirError, match=r"archive.*is a symlink"):
        seeds.archive(path)
    assert path.is_file() and _untouched(target)


# -- results intake -------------------------------------------------------------------------

@pytest.mark.parametrize("sub", ["applied", "rejected"])
def test_a_bus_subdir_planted_as_a_symlink_stops_the_start(tmp_path: Path, sub: str) -> None:
    target = _elsewhere(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / sub).symlink_to(target)
    drop_result(tmp_path / "results", "diagnose", "mac1")
    bus = _bus(tmp_path)
    with pytest.raises(UnsafeDirError, match=f"results/{sub}: is a symlink"):
        bus.start()
    assert _untouched(target)


@pytest.mark.parametrize("sub", ["applied", "rejected"])
def test_a_bus_subdir_swapped_for_a_symlink_while_running_gets_nothing(
        tmp_path: Path, sub: str) -> None:
    target = _elsewhere(tmp_path)
    bus = _bus(tmp_path)
    bus.start()
    try:
        (tmp_path / "results" / sub).rmdir()
        (tmp_path / "results" / sub).symlink_to(target)
        if sub == "applied":
            path = drop_result(tmp_path / "results", "diagnose", "mac1")
            wait_for(lambda: bus.stats.applied == 1)
        else:
            path = tmp_path / "results" / "not-a-result.json"
            path.write_text("{}")
            wait_for(lambda: bus.stats.rejected >= 1)
        assert bus.drain(10)
        assert path.is_file()  # stays where it was, visible to a person
        assert _untouched(target)
    finally:
        bus.stop()


def test_a_name_that_is_not_utf8_goes_to_rejected_with_a_reason(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    fd = os.open(os.fsencode(results) + b"/bad\xff.json", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"{}")
    os.close(fd)
    bus = _bus(tmp_path)
    bus.start()
    try:
        wait_for(lambda: bus.stats.rejected == 1)
        assert bus.drain(10)
    finally:
        bus.stop()
    assert os.listdir(os.fsencode(results)).count(b"bad\xff.json") == 0
    reasons = list((results / "rejected").glob("*.reason"))
    assert len(reasons) == 1
    text = reasons[0].read_text()
    assert "not UTF-8" in text and "b'bad\\xff.json'" in text
    moved = reasons[0].with_name(reasons[0].name.removesuffix(".reason"))
    assert moved.read_bytes() == b"{}"


# -- who owns the folders: every start, and doctor ------------------------------------------

@pytest.mark.parametrize("how", ["owner", "mode"])
def test_a_results_dir_not_private_stops_the_loop_with_one_line(cli, dirs, how: str) -> None:  # type: ignore[no-untyped-def]
    if how == "owner":
        os.chown(dirs.results, NOBODY, NOBODY)
        why = "owned by nobody (uid 65534)" if _has_nobody() else "owned by uid 65534"
    else:
        os.chmod(dirs.results, 0o777)  # noqa: S103 - the open folder under test
        why = "writable by group/others (mode 0777)"
    drop_result(dirs.results, "diagnose", "mac1")
    r = cli("loop", "--once")
    assert r.code == 2, r.err
    assert r.err.strip().splitlines() == [r.err.strip()], r.err  # one line, no traceback
    assert str(dirs.results) in r.err and why in r.err
    assert sorted(p.name for p in dirs.results.iterdir()) == [
        next(dirs.results.iterdir()).name]  # nothing applied, nothing created
    d = cli("doctor", "--json")
    assert d.code == 1
    check = {c["name"]: c for c in json.loads(d.out)["checks"]}["dir: results"]
    assert check["ok"] is False and why in check["detail"]


def _has_nobody() -> bool:
    import pwd

    try:
        return pwd.getpwuid(NOBODY).pw_name == "nobody"
    except KeyError:
        return False


def test_doctor_shows_a_line_per_folder(cli, dirs) -> None:  # type: ignore[no-untyped-def]
    r = cli("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(r.out)["checks"]}
    for label, path in (("state", dirs.state), ("results", dirs.results),
                        ("fleet messages", dirs.fleet)):
        assert checks[f"dir: {label}"]["ok"] is True
        assert checks[f"dir: {label}"]["detail"].startswith(f"{path}: ok")


def test_folders_healer_creates_are_private(tmp_path: Path) -> None:
    safedirs.ensure_own_dirs(_settings(tmp_path))
    _bus(tmp_path).check_dirs()
    for rel in ("state", "results", "results/applied", "results/rejected", "fleet",
                "fleet/me"):
        assert (tmp_path / rel).stat().st_mode & 0o777 == 0o700, rel


def test_a_human_inbox_planted_as_a_symlink_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "fleet").mkdir()
    (tmp_path / "fleet" / "human").symlink_to(_elsewhere(tmp_path))
    with pytest.raises(UnsafeDirError, match="fleet/human: is a symlink"):
        safedirs.ensure_own_dirs(_settings(tmp_path))


def test_an_ancestor_symlink_only_roots_is_followed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    assert safedirs.ensure_private_dir(link / "state").is_dir()  # root's: /var/run -> /run
    assert (real / "state").is_dir()
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(UnsafeDirError, match="symlink owned by"):
        safedirs.ensure_private_dir(link / "state")
    with pytest.raises(UnsafeDirError, match="is a symlink"):
        safedirs.ensure_private_dir(link)  # the configured dir itself: never


def test_an_ancestor_another_user_owns_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(UnsafeDirError, match="a folder above it is owned by"):
        safedirs.ensure_private_dir(theirs / "state")
    assert not (theirs / "state").exists()


# -- temp files -----------------------------------------------------------------------------

def test_an_atomic_write_never_writes_through_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    folder = tmp_path / "state"
    folder.mkdir()
    (folder / "loop.json").symlink_to(victim)
    atomic_write_bytes(folder / "loop.json", b"new\n")
    assert victim.read_text() == "keep me\n"
    assert not (folder / "loop.json").is_symlink()
    assert (folder / "loop.json").read_bytes() == b"new\n"


def test_a_planted_temp_name_is_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    folder = tmp_path / "fleet"
    with safedirs.opened(folder) as fd:
        os.symlink(victim, folder / "x.md")
        assert safedirs.create_file(fd, "x.md", b"new") is False
    assert victim.read_text() == "keep me\n"
