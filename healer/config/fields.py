"""How a settings field is declared: its default, documentation, env var and schema limits.

Every field of the tree is made by ``setting`` (a value) or ``section`` (a nested dataclass);
the schema generator, the loader and ``redacted`` read the metadata they leave.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import field
from typing import Any


def setting(default: Any, doc: str, *, env: str = "", secret: bool = False, **schema: Any) -> Any:
    """A settings field: its default, its documentation, its short env var and schema limits."""
    meta = {"doc": doc, "env": env, "secret": secret, "schema": schema}
    if isinstance(default, list | dict):
        return field(default_factory=lambda d=default: json.loads(json.dumps(d)), metadata=meta)
    return field(default=default, metadata=meta)


def section(cls: type, doc: str) -> Any:
    return field(default_factory=cls, metadata={"doc": doc, "env": "", "secret": False})


def is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def public_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields a user can set (not the loader's bookkeeping, such as ``sources``)."""
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]
