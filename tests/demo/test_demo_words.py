"""What the demo tells a person survives and reads as a sentence.

* The escalation file it shows is kept in ``<state dir>/demo/`` (the fleet's folder with the
  original is removed when the demo ends), private to its user.
* A seed inbox blocked by a file is diagnosed in words, not as a bare ``File exists``.
"""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

from healer.config import load_settings


def test_the_escalation_file_is_kept_in_the_state_dir(tmp_path: Path) -> None:
    from healer.demo.run import _keep_escalation

    seed = tmp_path / "fleet" / "human" / "20261206-061740-from-ops.md"
    seed.parent.mkdir(parents=True)
    seed.write_text("---\nsubject: n3 needs a person\n---\n## What you should do next\n")
    settings = load_settings(None, overrides=[f"state_dir={tmp_path / 'state'}"])
    kept = Path(_keep_escalation(settings, seed))
    assert kept.parent == tmp_path / "state" / "demo"
    assert kept.read_text() == seed.read_text()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    seed.unlink()  # the demo removes its fleet's folder: the copy stays
    assert kept.exists()


def test_a_blocked_inbox_is_diagnosed_in_words(tmp_path: Path) -> None:
    from healer.agents.probes import probe_seed

    box = tmp_path / "fleet" / "n2"
    box.parent.mkdir()
    box.write_text("not an inbox\n")
    probe = asyncio.run(probe_seed(box))
    assert not probe.ok
    assert probe.detail == (f"the seed inbox {box} is a file, not a folder: no seed file can "
                            "go in it")
