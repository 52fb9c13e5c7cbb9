"""Agent result files on the bus: naming, checking, and the failed result healer writes.

Every run ends with ``<results dir>/heal-<kind>-<target>-<epoch>.json`` valid against
``schemas/agent-result.schema.json``. The executor chooses the name before the run. An agent
(Claude, a command) writes its result under that name in its run's folder
(``<state>/agents/runs/<run_id>/``), out of the bus's sight — so neither a half-written file
nor the Write tool's temp file is ever picked up — and healer checks it and publishes it
atomically in the results dir when the run ends. When the agent left none, or an invalid one,
healer writes a failed result instead, so whoever waits on the bus always hears back (or a
``deferred`` one, when the model API kept refusing with a transient failure).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from healer.core.bus import RESULT_NAME, SUBDIRS
from healer.core.files import atomic_write_json
from healer.core.schemas import errors as schema_errors

SUCCESS = frozenset({"ok", "diagnosed", "healed", "fixed"})
# Not done yet, and not a failed attempt: the model API was rate-limited, overloaded or
# unreachable past the run's time limit (the result carries ``retry_at`` and ``failure``).
# Counts for no breaker or cooldown (``healer.core.gate.DEFERRED``).
DEFERRED = "deferred"
STATUSES = frozenset({*SUCCESS, "partial", "retrying", "failed", "escalated", "unfixable",
                      "timeout", DEFERRED})  # = the schema's enum

_reserved: set[str] = set()
_lock = threading.Lock()


def result_name(kind: str, target: str, epoch: int) -> str:
    name = f"heal-{kind}-{target}-{epoch}.json"
    if not RESULT_NAME.fullmatch(name):
        raise ValueError(f"not a valid result file name: {name!r}")
    return name


def reserve_result_path(results_dir: Path, kind: str, target: str,
                        now: float | None = None) -> Path:
    """A result path no earlier run in this process or on the bus has used.

    The epoch is the start time in seconds; when two runs for one kind and target start in
    the same second, the later one takes the next free second.
    """
    epoch = int(time.time() if now is None else now)
    with _lock:
        while True:
            name = result_name(kind, target, epoch)
            taken = name in _reserved or any(
                os.path.lexists(p) for p in
                (results_dir / name, *(results_dir / s / name for s in SUBDIRS)))
            if not taken:
                _reserved.add(name)
                return results_dir / name
            epoch += 1


def problems(data: Any, kind: str, target: str) -> str:
    """Why ``data`` is not a valid result for ``kind``/``target`` ('' when it is)."""
    found = schema_errors("agent-result", data)
    if found:
        key, message = found[0]
        return f"schema: {key + ': ' if key else ''}{message}"
    if data["kind"] != kind or data["target"] != target:
        return f"expected {kind}/{target}, the file says {data['kind']}/{data['target']}"
    return ""


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_result(path: Path, data: Mapping[str, Any]) -> dict[str, Any]:
    """Validate and write a result atomically; returns what was written."""
    doc = {k: v for k, v in data.items() if v is not None or k == "pr_url"}
    m = RESULT_NAME.fullmatch(path.name)
    if not m:
        raise ValueError(f"not a result file name: {path.name!r}")
    problem = problems(doc, m["kind"], m["target"])
    if problem:
        raise ValueError(f"refusing to write an invalid result: {problem}")
    atomic_write_json(path, doc)
    return doc


def clip(text: str, limit: int = 20000) -> str:
    """Cut free text to what the schema allows."""
    return text if len(text) <= limit else text[: limit - 20] + " [... cut]"
