"""An escalation always reaches a person: the seed file is written even when its text names
healer's own random-looking identifiers, or still holds something that looks secret."""

from __future__ import annotations

from pathlib import Path

from healer.config import load_settings
from healer.core.escalation import Escalation, escalate
from healer.core.store import FileStore


def _settings(tmp_path: Path) -> object:
    return load_settings(env={}, overrides=[
        f"state_dir={tmp_path / 'state'}", f"fleet_dir={tmp_path / 'fleet'}",
        f"results_dir={tmp_path / 'results'}", f"selfheal.repo={tmp_path}", "node_id=testnode"])


async def test_an_incident_key_that_looks_random_is_written_and_published(tmp_path: Path
                                                                         ) -> None:
    settings = _settings(tmp_path)
    store = FileStore(tmp_path / "state")
    key = "sentry-61c4038fbe057fd02708"  # digest keys: healer's own, random by construction
    esc = Escalation(title=f"Could not heal {key}", target=key, severity="high",
                     what_happened=f"The fix for {key} did not pass (attempt "
                                   "20261202T185516-ab12cd34).",
                     incident=key, own=("20261202T185516-ab12cd34",))
    rec = await escalate(settings, store, esc)
    assert rec.seed_file is not None and rec.seed_file.is_file()
    text = rec.seed_file.read_text()
    assert key in text and "20261202T185516-ab12cd34" in text
    assert rec.issue is not None  # the local forge's issue took the same identifiers
    assert key in Path(rec.issue.url.removeprefix("file://")).read_text()


async def test_what_still_looks_secret_is_blanked_not_a_reason_to_stay_silent(
        tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    store = FileStore(tmp_path / "state")
    token = "slack-9e107d9d372bb6826bd8"  # the scrubber's rules leave it; the census does not
    esc = Escalation(title="Could not heal play-task-4", target="play-task-4", severity="high",
                     what_happened=f"The agent printed {token} and stopped.")
    rec = await escalate(settings, store, esc)
    assert rec.seed_file is not None
    text = rec.seed_file.read_text()
    assert token not in text and "[REDACTED-HIGH-ENTROPY]" in text
    assert "The agent printed" in text
