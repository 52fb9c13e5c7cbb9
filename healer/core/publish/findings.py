"""What the publication validator reports: ``Finding`` (one hit) and ``AnonymizationError``.

Both carry the kind and the place of a hit, never its value: they end up in logs, attempt
records and API answers, which must not repeat the secret they are about.
"""

from __future__ import annotations

from dataclasses import dataclass

from healer.errors import HealerError


class AnonymizationError(HealerError):
    """Text about to be published still contains secrets or personal data.

    ``what`` names the text (``"pr body"``, ``"diff"``, ``"seed file"``); ``findings`` lists
    the kinds found, never the values.
    """

    def __init__(self, what: str, findings: list[Finding]):
        self.what = what
        self.findings = findings
        kinds = ", ".join(sorted({f.kind for f in findings}))
        super().__init__(f"{what}: blocked, it still contains {kinds}")


@dataclass(frozen=True)
class Finding:
    """One hit of the validator: the kind, where, and a masked excerpt (never the value)."""

    kind: str
    start: int
    end: int
    hint: str

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "start": self.start, "end": self.end, "hint": self.hint}


def mask(value: str) -> str:
    """A hint that says where a hit was without repeating it."""
    flat = value.replace("\n", " ")
    if len(flat) <= 6:
        return "*" * len(flat)
    return flat[:3] + "…" + f"({len(flat)} chars)"
