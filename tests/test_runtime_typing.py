"""healer._runtime_typing's NamedTuple makes the class typing.NamedTuple makes: the scan path's
records (patterns, alerts, line views) behave the same without importing typing."""

from __future__ import annotations

import pickle
import typing

import pytest

from healer._runtime_typing import NamedTuple, Protocol


class Light(NamedTuple):
    """A record."""

    name: str
    size: int = 0
    tags: tuple[str, ...] = ()

    @property
    def big(self) -> bool:
        return self.size > 10

    def grown(self, by: int) -> Light:
        return self._replace(size=self.size + by)

    @classmethod
    def named(cls, name: str) -> Light:
        return cls(name, 1)

    LIMIT = 5


class Typed(typing.NamedTuple):
    """A record."""

    name: str
    size: int = 0
    tags: tuple[str, ...] = ()

    @property
    def big(self) -> bool:
        return self.size > 10

    def grown(self, by: int) -> Typed:
        return self._replace(size=self.size + by)

    @classmethod
    def named(cls, name: str) -> Typed:
        return cls(name, 1)

    LIMIT = 5


@pytest.mark.parametrize("cls", [Light, Typed])
def test_the_class_is_what_typing_makes(cls: type) -> None:
    """Fields, defaults, methods, properties, class methods and attributes, the docstring, the
    module and name, equality with tuples, and a pickle's round trip."""
    a = cls("x")
    assert a == ("x", 0, ()) and isinstance(a, tuple)
    assert cls._fields == ("name", "size", "tags")
    assert cls._field_defaults == {"size": 0, "tags": ()}
    assert list(cls.__annotations__) == ["name", "size", "tags"]
    assert a.grown(20).big and not a.big and cls.named("y") == ("y", 1, ())
    assert cls.LIMIT == 5 and cls.__doc__ == "A record."
    assert cls.__module__ == __name__ and cls.__qualname__ == cls.__name__
    assert repr(a) == f"{cls.__name__}(name='x', size=0, tags=())"
    again = pickle.loads(pickle.dumps(a))  # noqa: S301 (its own bytes)
    assert again == a and type(again) is cls
    assert a._asdict() == {"name": "x", "size": 0, "tags": ()}
    with pytest.raises(AttributeError):
        a.name = "y"  # type: ignore[misc]
    with pytest.raises(TypeError):
        cls()


@pytest.mark.parametrize("base", [NamedTuple, typing.NamedTuple])
def test_what_typing_refuses_is_refused(base: type) -> None:
    """A field without a default after one with, and a redefined namedtuple method, are
    errors at class creation, as with typing.NamedTuple."""
    with pytest.raises(TypeError, match=r"Non-default namedtuple field b cannot follow "
                                        r"default field a$"):
        class Bad(base):  # type: ignore[valid-type,misc]
            a: int = 0
            b: int

    with pytest.raises(AttributeError, match="Cannot overwrite NamedTuple attribute _replace"):
        class Worse(base):  # type: ignore[valid-type,misc]
            a: int

            def _replace(self) -> None: ...


def test_a_protocol_is_a_plain_base() -> None:
    class Reader(Protocol):
        def read(self) -> bytes: ...

    assert Reader.__mro__ == (Reader, object)
