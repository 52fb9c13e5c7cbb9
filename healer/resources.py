"""Where the bundle folders (schemas/, prompts/, agents/, skills/) are.

In a checkout (or an editable install) they sit at the repository root; an installed wheel
carries a copy under ``healer/_bundle``. Everything that reads them goes through here.
"""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path
from typing import Any

_PACKAGE = Path(__file__).resolve().parent


@cache
def bundle_root() -> Path:
    """The folder that holds schemas/, prompts/, agents/ and skills/."""
    packaged = _PACKAGE / "_bundle"
    if (packaged / "schemas").is_dir():
        return packaged
    return _PACKAGE.parent


def bundle_path(*parts: str) -> Path:
    return bundle_root().joinpath(*parts)


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
