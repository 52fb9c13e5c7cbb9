"""Fixtures for the dashboard: the system Chromium driven by Playwright, one per module."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("HEALER_CHROMIUM", "/usr/bin/chromium")
# As root, in a container, on loopback only: no sandbox, no GPU, and nothing that phones home
# (without the background-networking flags Chromium dials out and logs refused connections).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium (Debian's ``chromium``; Playwright's own download is not used).
    Playwright gives it a fresh profile directory of its own."""
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"{CHROMIUM} is not installed (scripts/setup.sh --test installs chromium)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the views' screenshots go: ``HEALER_SCREENSHOTS`` if set (to look at them)."""
    wanted = os.environ.get("HEALER_SCREENSHOTS", "")
    if wanted:
        folder = Path(wanted)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        return folder
    return tmp_path_factory.mktemp("screenshots")
