"""What a kind's verifier says about an attempt, and what the pipeline does next.

After the dispatcher hands back a run's outcome (the result document on the bus), the kind
checks the world — the play's agent is no longer broken, the fix passes the scenarios in a
clean checkout, the peer's channels answer again — and says so as a ``Verdict``:

- ``healed``: verified; the incident is resolved (or its fix awaits review);
- ``retry``: not healed, worth another attempt (with what this one taught);
- ``timeout``: the attempt ran out of time; another may be tried like ``retry``;
- ``give_up``: another attempt cannot help (the agent found the problem is not one it can
  fix — ``UNFIXABLE`` — or the plan has nothing left): a person must act now.

``next_step`` is the one rule every kind follows: healed ends it; ``give_up``, or a ``retry``/
``timeout`` at the last allowed attempt, escalates; anything else tries attempt n + 1.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, Protocol

HEALED, RETRY, TIMEOUT, GIVE_UP = "healed", "retry", "timeout", "give_up"
ESCALATE = "escalate"
Step = Literal["healed", "retry", "escalate"]


class Verdict(NamedTuple):
    outcome: str  # healed | retry | timeout | give_up
    reason: str = ""

    @property
    def healed(self) -> bool:
        return self.outcome == HEALED


class Verifier(Protocol):
    """A kind's check of one attempt: ``outcome`` is what the dispatcher returned."""

    async def verify(self, incident: str, attempt: int, outcome: Any) -> Verdict: ...


def next_step(verdict: Verdict, attempt: int, max_attempts: int) -> Step:
    """What follows ``verdict`` on attempt ``attempt`` of at most ``max_attempts``."""
    if verdict.outcome == HEALED:
        return "healed"
    if verdict.outcome == GIVE_UP or attempt >= max_attempts:
        return "escalate"
    if verdict.outcome not in (RETRY, TIMEOUT):
        raise ValueError(f"unknown verdict {verdict.outcome!r}")
    return "retry"
