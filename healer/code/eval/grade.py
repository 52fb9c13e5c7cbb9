"""The grader: what one ended attempt means, judged by its record and the hidden check.

Pure: it reads the attempt record's ``status`` (the contract's vocabulary), whether the
attempt changed code, and the hidden check's verdict on the commit it produced — no git, no
process. ``grade`` names the outcome; ``expected_grade`` says what a replay should earn;
``below`` orders them so a run can fail on any grade under its expectation.

==================  ================================================================
grade               when
==================  ================================================================
fixed               a PR is open and the hidden check passes on its head
got_through         a PR is open and the hidden check fails on its head, or a PR for
                    an error that needed no code change (the worst)
unfixable_correct   no PR, and the fixture's right answer is no code change
                    (``unfixable`` / ``no_change``)
caught              no PR; the agent's change fails the hidden check (verification
                    stopped a wrong fix)
missed              no PR; the agent's change passes the hidden check (a correct fix
                    verification did not let through)
gave_up             ``unfixable`` for a bug that has a fix
no_fix              no PR and no change (the run failed, timed out, …)
error               the eval itself could not run the case
==================  ================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FIXED = "fixed"
GOT_THROUGH = "got_through"
UNFIXABLE_CORRECT = "unfixable_correct"
CAUGHT = "caught"
MISSED = "missed"
GAVE_UP = "gave_up"
NO_FIX = "no_fix"
ERROR = "error"
GRADES = (FIXED, UNFIXABLE_CORRECT, CAUGHT, GAVE_UP, MISSED, NO_FIX, ERROR, GOT_THROUGH)

# Statuses after which a PR exists or waits only for a person: its head is what ships.
PUBLISHED = frozenset({"pr_open", "pr_merged", "awaiting_approval"})
NO_CODE_CHANGE = frozenset({"unfixable", "no_change"})

# How good an outcome is, for "below expectation"; a higher number is better.
_RANK = {GOT_THROUGH: 0, ERROR: 1, NO_FIX: 1, MISSED: 1, GAVE_UP: 2, CAUGHT: 2,
         UNFIXABLE_CORRECT: 3, FIXED: 3}


def grade(record: Mapping[str, Any], *, expected: str, changed: bool,
          hidden_passed: bool | None) -> str:
    """The grade of one ended attempt.

    ``expected``: the fixture's right answer (``fixed``, ``unfixable``, ``no_change``).
    ``changed``: whether the agent committed a change. ``hidden_passed``: the hidden check on
    the PR head (or, without a PR, on the agent's last commit); None when not run."""
    status = str(record.get("status") or "")
    if status in PUBLISHED:
        if expected in NO_CODE_CHANGE:
            return GOT_THROUGH
        return FIXED if hidden_passed else GOT_THROUGH
    if status == "unfixable" or (not changed and status == "failed"
                                 and expected in NO_CODE_CHANGE):
        return UNFIXABLE_CORRECT if expected in NO_CODE_CHANGE else GAVE_UP
    if not changed:
        return NO_FIX
    if hidden_passed and expected not in NO_CODE_CHANGE:
        return MISSED
    return CAUGHT


def expected_grade(expected: str, replay: str) -> str:
    """What a replay should earn: the correct patch the fixture's right answer, a wrong patch
    ``caught``, an unfixable note ``unfixable_correct`` or (for a fixable bug) ``gave_up``.
    A real model (``replay == "model"``) should give the right answer."""
    right = FIXED if expected == "fixed" else UNFIXABLE_CORRECT
    if replay == "wrong":
        return CAUGHT
    if replay == "unfixable":
        return GAVE_UP if expected == "fixed" else UNFIXABLE_CORRECT
    return right


def below(got: str, want: str) -> bool:
    """Whether ``got`` falls short of ``want``. Each replay has one right outcome, so any
    other counts: a wrong patch graded ``fixed`` means the hidden check is too weak."""
    return got != want


def worst_first(grades: list[str]) -> list[str]:
    """``grades`` ordered from the worst (``got_through``) to the best."""
    return sorted(grades, key=lambda g: _RANK.get(g, 0))
