"""Small helpers the fleet tests share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def result_files(settings: Any, kind: str, peer: str) -> list[Path]:
    """Result files of ``kind`` for ``peer``, oldest first (published or already applied)."""
    root = Path(settings.results_dir)
    found = list(root.glob(f"heal-{kind}-{peer}-*.json"))
    found += list((root / "applied").glob(f"heal-{kind}-{peer}-*.json"))
    return sorted(found, key=lambda p: p.name)


def results(settings: Any, kind: str, peer: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in result_files(settings, kind, peer)]


def human_seeds(settings: Any) -> list[Path]:
    folder = Path(settings.fleet_dir) / "human"
    return sorted(folder.glob("*.md")) if folder.is_dir() else []


