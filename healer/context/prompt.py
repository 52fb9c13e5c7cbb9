"""What the healing agent is told: the layers for one error, as template variables.

``context_vars`` builds the variables of ``prompts/self-healing-context.md.j2`` (also the
living-context-healer task prompt, which includes that block, with ``iteration_vars``);
``render_context`` renders the block alone — ``healer context render`` prints exactly what the
agent reads. The error, what Sentry sent and incident memory (agents wrote it) are fenced as
untrusted data by the template.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from healer.context.ingest import NormalizedError
from healer.context.layers import FileContext, Invariant, Layers

TEMPLATE = "self-healing-context.md.j2"


def _check_text(inv: Invariant) -> str:
    if inv.check is None:
        return ""
    return inv.check.value if inv.check.kind == "command" else f"{inv.check.kind}: " \
        f"{inv.check.value}"


def context_vars(error: NormalizedError, fc: FileContext, *, max_blast_radius: int
                 ) -> dict[str, Any]:
    """The template variables for ``error`` and what the layers say about its file."""
    from healer.agents.context import LivingContext

    impact: dict[str, Any] = {}
    if fc.impact is not None:
        impact = {"blast_radius": fc.blast_radius, "affected": list(fc.affected),
                  "change_risk": fc.impact.change_risk,
                  "depends_on": list(fc.impact.depends_on)}
    living = LivingContext(
        error=error.as_dict(),
        scenarios=tuple({"id": s.id, "name": s.name, "why": s.why, "constraint": s.constraint,
                         "test_command": s.test_command, "tags": list(s.tags)}
                        for s in fc.scenarios),
        invariants=tuple({"id": i.id, "rule": i.rule, "severity": i.severity,
                          "files": list(i.files), "category": i.category,
                          "check": _check_text(i)} for i in fc.invariants),
        impact=impact,
        incidents=tuple({"id": p.id, "error": p.error, "anti_pattern": p.anti_pattern,
                         "lesson": p.lesson, "fix": p.fix, "root_cause": p.root_cause,
                         "success": p.success, "timestamp": p.timestamp}
                        for p in fc.incidents))
    return {"living": living, "max_blast_radius": max_blast_radius,
            "sentry": dict(error.sentry)}


def iteration_vars(base: Mapping[str, Any], *, iteration: int, max_iterations: int,
                   previous_failure: str, branch: str) -> dict[str, Any]:
    """The living-context-healer's variables for one iteration: the block's (``base``, from
    ``context_vars``), the iteration, the verifier's reasons for rejecting the last one
    (fenced: they quote the agent) and the attempt's branch."""
    return {**base, "iteration": iteration, "max_iterations": max_iterations,
            "previous_failure": previous_failure, "branch": branch}


def render_context(error: NormalizedError, layers: Layers, *, max_blast_radius: int) -> str:
    """The "Self-Healing Context" block for ``error``, as the agent receives it."""
    from healer.agents.prompts import render

    fc = layers.for_file(error.file)
    return render(TEMPLATE, context_vars(error, fc, max_blast_radius=max_blast_radius))
