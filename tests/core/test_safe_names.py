"""``is_safe_name`` says True exactly for the names ``safe_name`` returns, False for those it
refuses (and for what is not a string at all)."""

from __future__ import annotations

import pytest

from healer.core.names import is_safe_name, safe_name
from healer.errors import UnsafeNameError

SAFE = ["code-" + "a" * 64, "x", "a.b_c-d", "a" * 128, "ok"]
UNSAFE = ["", "-x", ".hidden", "a/b", "a\\b", "a..b", "a\nb", "é", "a" * 129, " a", None, 7,
          b"bytes"]


@pytest.mark.parametrize("name", SAFE, ids=repr)
def test_a_safe_name(name: str) -> None:
    assert is_safe_name(name) is True
    assert safe_name(name) == name


@pytest.mark.parametrize("name", UNSAFE, ids=repr)
def test_an_unsafe_name(name: object) -> None:
    assert is_safe_name(name) is False
    with pytest.raises(UnsafeNameError):
        safe_name(name)
