"""``is_safe_name`` remembers the names it found safe (every report asks about its incident's
key): asked again, from memory or not, it answers exactly as ``safe_name`` does, and it never
remembers an unsafe name."""

from __future__ import annotations

import pytest

from healer.core import names
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
def test_the_same_answer_asked_again(name: object) -> None:
    expected = _answer(name)
    assert is_safe_name(name) is expected
    assert is_safe_name(name) is expected  # the second time from memory, if safe


def test_only_safe_names_are_remembered() -> None:
    for name in NAMES:
        is_safe_name(name)
    assert names._SAFE
    assert all(type(n) is str and _answer(n) for n in names._SAFE)


def test_the_memory_is_bounded() -> None:
    for i in range(names._SAFE_MAX + 10):
        assert is_safe_name(f"n{i}")
    assert len(names._SAFE) <= names._SAFE_MAX
