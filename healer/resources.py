"""Where the bundle folders (schemas/, prompts/, agents/, skills/) are.

In a checkout (or an editable install) they sit at the repository root; an installed wheel
carries a copy under ``healer/_bundle``. Everything that reads them goes through here.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

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
