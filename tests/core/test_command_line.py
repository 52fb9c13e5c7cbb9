"""The `healer` command: help everywhere, version, unknown commands, doctor."""

from __future__ import annotations

import json

from healer.cli import _command_modules


class TestCli:
    def test_root_help_lists_commands(self, cli) -> None:  # type: ignore[no-untyped-def]
        """`healer --help` lists every command with its one-line help."""
        r = cli("--help")
        assert r.code == 0
        for name in _command_modules():
            assert f"  {name}" in r.out

    def test_every_command_has_help(self, cli) -> None:  # type: ignore[no-untyped-def]
        """Each command answers --help with exit 0 and a usage line."""
        for name in _command_modules():
            r = cli(name, "--help")
            assert r.code == 0, (name, r.err)
            assert f"healer {name}" in r.out, name

    def test_version(self, cli) -> None:  # type: ignore[no-untyped-def]
        from healer import __version__

        r = cli("--version")
        assert r.code == 0 and r.out.strip() == f"healer {__version__}"

    def test_unknown_command(self, cli) -> None:  # type: ignore[no-untyped-def]
        """An unknown command is a usage error (2) with a hint, not a traceback."""
        r = cli("heal-everything")
        assert r.code == 2 and "unknown command" in r.err and "Traceback" not in r.err

    def test_no_arguments(self, cli) -> None:  # type: ignore[no-untyped-def]
        r = cli()
        assert r.code == 2 and "usage: healer" in r.out

    def test_bad_flag(self, cli) -> None:  # type: ignore[no-untyped-def]
        r = cli("doctor", "--frobnicate")
        assert r.code == 2 and "unrecognized arguments" in r.err


class TestDoctor:
    def test_json_report(self, cli, dirs) -> None:  # type: ignore[no-untyped-def]
        """doctor --json reports each check; the test machine has everything required."""
        r = cli("doctor", "--json")
        assert r.code == 0, r.err
        report = json.loads(r.out)
        names = {c["name"]: c for c in report["checks"]}
        assert report["ok"] is True
        assert names["tool: git"]["ok"]
        assert names["dir: state"]["detail"].startswith(f"{dirs.state}: ok")
        assert "executor" in names

    def test_unwritable_dir_fails(self, cli, dirs) -> None:  # type: ignore[no-untyped-def]
        """A results dir that cannot be created is a failed required check: exit 1."""
        blocker = dirs.root / "file"
        blocker.write_text("not a dir")
        r = cli("doctor", "--json", "--results-dir", str(blocker / "results"))
        assert r.code == 1
        checks = {c["name"]: c for c in json.loads(r.out)["checks"]}
        assert checks["dir: results"]["ok"] is False


class TestStatusOverview:
    def test_overview_shows_what_needs_a_person(self, cli, dirs) -> None:  # type: ignore[no-untyped-def]
        """`healer status` tells what is broken, what is being done, and what needs a person;
        an escalation waiting in the human inbox makes it exit 1."""
        from healer.core import seeds
        from healer.core.store import FileStore
        from healer.play.sessions import SessionRegistry

        reg = SessionRegistry(FileStore(dirs.state))
        reg.start({"play_id": "play-7", "repository": "o/r",
                   "cto_config": {"agents": {"rex": {}}}})
        reg.add_issue("play-7", {"issue_type": "tool_mismatch", "severity": "critical",
                                 "agent": "rex", "description": "rex is missing brave_search"})
        r = cli("status")
        assert r.code == 0, r.err
        assert "plays: 1 active, 1 open issue(s)" in r.out
        assert "play-7: rex is missing brave_search" in r.out
        seeds.write(dirs.fleet, seeds.Seed(sender="healer", to="human", subject="mac3 is down",
                                           body="restart it", severity="critical"))
        r = cli("status", "--json")
        assert r.code == 1
        data = json.loads(r.out)["overview"]
        assert data["needs_a_person"][0]["subject"] == "mac3 is down"
        assert data["loop"]["state"] == "never run"

    def test_status_names_the_agents_holding_slots(self, cli, dirs) -> None:  # type: ignore[no-untyped-def]
        """What runs now: each held agent slot, whichever process holds it."""
        from healer.core.slots import SlotPool

        slot = SlotPool(dirs.state / "slots" / "agents", 4).try_acquire(
            {"run_id": "run-abc", "agent": "daemon-restarter", "kind": "restart",
             "target": "n2"})
        assert slot is not None
        try:
            r = cli("status")
            assert "agents running: 1 of 4" in r.out, r.err
            assert "daemon-restarter (restart) on n2, run run-abc" in r.out
        finally:
            slot.release()
        assert "agents running: 0 of 4" in cli("status").out


def test_only_the_process_s_own_command_freezes_its_imports() -> None:
    """The `healer` command loads its command with the cyclic collector paused and freezes
    what the imports made (start-up time); a caller's `main(argv)` leaves the collector as it
    was and freezes nothing (freezing would keep the caller's uncollected garbage)."""
    import contextlib
    import gc
    import subprocess
    import sys

    from healer.cli import main

    code = ("import gc, sys\n"
            "from healer import cli\n"
            "sys.argv = ['healer', 'status', '--help']\n"
            "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
            "print(gc.get_freeze_count() > 1000, gc.isenabled())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.splitlines()[-1] == "True True"
    frozen = gc.get_freeze_count()
    with contextlib.suppress(SystemExit):
        main(["status", "--help"])
    assert gc.get_freeze_count() == frozen and gc.isenabled()
