"""What ``healer eval`` shows and writes: a table, a summary, the JSON document."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from healer.code.eval import grade
from healer.code.eval.runner import CaseResult

SCHEMA_VERSION = 1
_STYLE = {grade.FIXED: "green", grade.UNFIXABLE_CORRECT: "green", grade.CAUGHT: "cyan",
          grade.GOT_THROUGH: "bold red", grade.MISSED: "yellow", grade.GAVE_UP: "yellow",
          grade.NO_FIX: "yellow", grade.ERROR: "red"}


def summary(results: Sequence[CaseResult]) -> dict[str, Any]:
    """Counts per grade, per replay, and how many met their expectation."""
    by_replay: dict[str, dict[str, int]] = {}
    for r in results:
        row = by_replay.setdefault(r.replay, {"cases": 0, "as_expected": 0})
        row["cases"] += 1
        row["as_expected"] += int(r.ok)
    return {"cases": len(results), "as_expected": sum(r.ok for r in results),
            "grades": dict(Counter(r.grade for r in results)), "by_replay": by_replay,
            "turns": sum(r.turns or 0 for r in results),
            "cost_usd": round(sum(r.cost_usd for r in results), 6),
            "duration_s": round(sum(r.duration_s for r in results), 1)}


def document(results: Sequence[CaseResult], executor: str) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "executor": executor,
            "summary": summary(results), "cases": [r.as_dict() for r in results]}


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def render(results: Sequence[CaseResult], executor: str) -> Any:
    """A rich renderable: one row per case, then the summary line."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"healer eval — executor {executor}", header_style="bold")
    for col in ("fixture", "replay", "grade", "expected", "status", "hidden", "turns",
                "cost", "time"):
        table.add_column(col, justify="right" if col in ("turns", "cost", "time") else "left")
    for r in results:
        mark = "" if r.ok else " ✗"
        table.add_row(r.fixture, r.replay, Text(r.grade + mark, style=_STYLE.get(r.grade, "")),
                      r.want, r.status, r.hidden, "-" if r.turns is None else str(r.turns),
                      f"${r.cost_usd:.4f}", f"{r.duration_s:.1f}s")
    s = summary(results)
    parts = [f"{s['as_expected']}/{s['cases']} as expected"]
    parts += [f"{g}: {n}" for g, n in sorted(s["grades"].items(),
                                             key=lambda kv: grade.GRADES.index(kv[0]))]
    parts.append(f"cost ${s['cost_usd']:.4f}, {s['duration_s']:.0f}s")
    return Group(table, Text(" · ".join(parts),
                             style="green" if s["as_expected"] == s["cases"] else "bold red"))
