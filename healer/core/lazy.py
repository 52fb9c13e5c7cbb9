"""Names a package exports from its modules, imported at first use (PEP 562): importing one
submodule of a package must not import everything the package offers."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, where: Mapping[str, str], namespace: dict[str, Any]
            ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for the names in ``where`` (name →
    module); a name once imported is kept in ``namespace`` (the package's globals)."""

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace.get("__all__", ()), *where})

    return getattr_, dir_
