"""The two pieces of ``typing`` that ``healer scan``'s modules need at run time, without it.

``healer scan`` is measured against ripgrep on 50 MB logs, where Python's start-up is a third
of what the user waits. Importing ``typing`` costs ~2 ms of it, and ``typing.NamedTuple``
then compiles a ``ForwardRef`` for every field of every class (~1 ms more). So the modules on
that path import typing's names under ``TYPE_CHECKING`` only (a local ``TYPE_CHECKING =
False``: type checkers treat any such name as true) and take these two at run time::

    TYPE_CHECKING = False
    if TYPE_CHECKING:
        from typing import NamedTuple, Protocol
    else:
        from healer._runtime_typing import NamedTuple, Protocol

Type checkers see typing's own; at run time a class is the same ``collections.namedtuple``
that ``typing.NamedTuple`` makes, and a protocol is a plain base class (none of healer's is
checked with ``isinstance``).
"""

from __future__ import annotations

import collections

# What typing.NamedTuple refuses to have redefined, and what it does not copy to the class.
_PROHIBITED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields",
                         "_field_defaults", "_make", "_replace", "_asdict", "_source"})
_SPECIAL = frozenset({"__module__", "__name__", "__annotations__", "__qualname__"})


class _NamedTupleMeta(type):
    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, object]) -> type:
        fields = dict(ns.get("__annotations__", {}))  # type: ignore[call-overload]
        defaults = []
        for field in fields:
            if field in ns:
                defaults.append(ns[field])
            elif defaults:
                raise TypeError(f"Non-default namedtuple field {field} cannot follow "
                                f"default field{'s' if len(defaults) > 1 else ''} "
                                f"{', '.join(f for f in fields if f in ns)}")
        cls = collections.namedtuple(name, list(fields), defaults=defaults,  # type: ignore[misc]
                                     module=str(ns["__module__"]))
        cls.__annotations__ = fields
        cls.__qualname__ = str(ns.get("__qualname__", name))
        for key, value in ns.items():
            if key in _PROHIBITED:
                raise AttributeError(f"Cannot overwrite NamedTuple attribute {key}")
            if key not in _SPECIAL and key not in fields:
                setattr(cls, key, value)
        return cls  # type: ignore[no-any-return]


# `class Pattern(NamedTuple): ...` makes a namedtuple, as with typing's.
NamedTuple = type.__new__(_NamedTupleMeta, "NamedTuple", (), {})

# `class Matcher(Protocol): ...` documents an interface; nothing inherits it or checks it.
Protocol = object
