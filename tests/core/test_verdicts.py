"""The one retry-or-escalate rule every kind follows after its verifier spoke."""

from __future__ import annotations

import pytest

from healer.core.verify import GIVE_UP, HEALED, RETRY, TIMEOUT, Verdict, next_step


@pytest.mark.parametrize(("outcome", "attempt", "most", "step"), [
    (HEALED, 1, 3, "healed"), (HEALED, 3, 3, "healed"),
    (RETRY, 1, 3, "retry"), (RETRY, 3, 3, "escalate"),
    (TIMEOUT, 2, 3, "retry"), (TIMEOUT, 3, 3, "escalate"),
    (GIVE_UP, 1, 3, "escalate"),
])
def test_next_step(outcome: str, attempt: int, most: int, step: str) -> None:
    assert next_step(Verdict(outcome), attempt, most) == step


def test_an_unknown_verdict_is_a_bug() -> None:
    with pytest.raises(ValueError, match="unknown verdict"):
        next_step(Verdict("maybe"), 1, 3)
