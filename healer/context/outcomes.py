"""What a living-context heal leaves in incident memory (the PR body and the escalation are
the code kind's: ``healer.code.attempt``, ``healer.code.escalation``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from healer.code.attempt import AttemptEnd


def memory_entry(inc: Mapping[str, Any], attempt_id: str, end: AttemptEnd, *, success: bool,
                 now: float | None = None) -> dict[str, Any]:
    """The incident-memory entry of one healing run (fixed or escalated)."""
    err = inc["error"]
    n = len(end.iterations)
    entry: dict[str, Any] = {
        "id": f"INC-{attempt_id}",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now or time.time())),
        "error": " ".join(err.get("message", "error").split())[:4000] or "error",
        "file": err.get("file", ""),
        "line": err.get("line"),
        "root_cause": end.summary[:4000],
        "healing_iterations": n,
        "success": success,
        "source": inc["source"],
        "incident": inc["key"],
    }
    if success:
        entry["fix"] = "; ".join(s for _, s in end.commits)[:4000] or "fixed"
        entry["lesson"] = f"verified on iteration {n}"
        if end.record.get("pr_url"):
            entry["pr_url"] = end.record["pr_url"]
    else:
        entry["fix"] = "not fixed: escalated to a person"
        reasons = [str(r) for it in end.iterations for r in it.get("reasons", [])]
        entry["lesson"] = ("healing gave up; rejected fixes: " + " | ".join(reasons[-5:]))[:4000]
        bad = [r for r in reasons if "critical invariant" in r or "anti-pattern" in r]
        if bad:
            entry["anti_pattern"] = bad[-1][:2000]
    return {k: v for k, v in entry.items() if v not in ("", None)}
