"""Where the bundle folders (schemas/, prompts/, agents/, skills/) are.

In a checkout (or an editable install) they sit at the repository root; an installed wheel
carries a copy under ``healer/_bundle``. Everything that reads them goes through here.
"""

from __future__ import annotations

import importlib
import os
from functools import cache

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

_PACKAGE = os.path.dirname(os.path.realpath(__file__))


@cache
def bundle_dir() -> str:
    """The folder that holds schemas/, prompts/, agents/ and skills/, as a ``str`` (``healer
    scan`` reads two schemas from it and does not import pathlib: ~3 ms of its start-up)."""
    packaged = os.path.join(_PACKAGE, "_bundle")
    if os.path.isdir(os.path.join(packaged, "schemas")):
        return packaged
    return os.path.dirname(_PACKAGE)


def bundle_root() -> Path:
    """``bundle_dir()`` as a Path."""
    from pathlib import Path

    return Path(bundle_dir())


def bundle_path(*parts: str) -> Path:
    return bundle_root().joinpath(*parts)


def bundle_file(*parts: str) -> str:
    """``bundle_path(*parts)`` as a ``str``, without pathlib."""
    return os.path.join(bundle_dir(), *parts)


def optional(spec: str) -> Any | None:
    """The object named ``"package.module:attribute"``, or None when that module is not part
    of this installation (or lacks the attribute). How capabilities plug into the loop, the
    API and ``healer doctor`` without the core importing them. A module that exists but fails
    to import for another reason still raises."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            return None
        raise
    return getattr(module, attr, None)
