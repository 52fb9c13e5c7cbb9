"""Reading one run's result file back, wherever the bus has put it by now."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from healer.core.strict_json import StrictJSONError, loads_strict

MAX_RESULT_BYTES = 1 << 20


def find_result(path: Path) -> Path | None:
    """Where the result file is now: still in the results dir, or moved by the bus."""
    for candidate in (path, path.parent / "applied" / path.name,
                      path.parent / "rejected" / path.name):
        if candidate.is_file() and not candidate.is_symlink():
            return candidate
    return None


def read_result(path: Path) -> tuple[dict[str, Any] | None, str]:
    """(the agent's result, '') or (None, why it is missing or unusable)."""
    for _ in range(3):  # the bus may move the file between its finding and its reading
        try:
            return _read_found(path)
        except FileNotFoundError:
            continue
    return None, "the agent's result file kept moving while it was read"


def _read_found(path: Path) -> tuple[dict[str, Any] | None, str]:
    where = find_result(path)
    if where is None:
        return None, "the agent wrote no result file"
    if where.parent.name == "rejected":
        reason = where.with_name(where.name + ".reason")
        lines = reason.read_text(errors="replace").splitlines() if reason.is_file() else []
        why = lines[0] if lines else "?"
        return None, f"the bus rejected the agent's result: {why}"
    try:
        if where.stat().st_size > MAX_RESULT_BYTES:
            return None, f"the agent's result is larger than {MAX_RESULT_BYTES} bytes"
        data = loads_strict(where.read_bytes())
    except FileNotFoundError:
        raise
    except (OSError, StrictJSONError) as exc:
        return None, f"the agent's result is not valid JSON: {exc}"
    if not isinstance(data, dict):
        return None, "the agent's result is not a JSON object"
    return data, ""
