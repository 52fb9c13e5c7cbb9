"""``is_safe_name`` answers exactly as ``safe_name`` does: True where it returns the name,
False where it raises."""

from __future__ import annotations

import pytest

from healer.core.names import is_safe_name, safe_name
from healer.errors import UnsafeNameError

NAMES = ["code-" + "a" * 64, "x", "a.b_c-d", "", "-x", ".hidden", "a/b", "a\\b", "a..b",
         "a\nb", "é", "a" * 128, "a" * 129, " a", "ok", None, 7, b"bytes"]


def _answer(name: object) -> bool:
    try:
        safe_name(name)
    except UnsafeNameError:
        return False
    return True


@pytest.mark.parametrize("name", NAMES, ids=repr)
def test_the_same_answer_as_safe_name(name: object) -> None:
    assert is_safe_name(name) is _answer(name)


def test_the_answers_are_known() -> None:
    assert [n for n in NAMES if is_safe_name(n)] == [
        "code-" + "a" * 64, "x", "a.b_c-d", "a" * 128, "ok"]
