"""``schemas/config.schema.json``, generated from the settings tree.

``python -m healer.config`` writes it; ``--check`` fails when it is out of date (``make test``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import typing
from typing import Any, Literal

from healer.config.fields import is_dataclass_type, public_fields
from healer.config.settings import Settings


def type_schema(tp: Any) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if tp is Any:  # free-form (``notify.routes`` entries): checked by their own parser
        return {}
    if origin is Literal:
        return {"enum": list(typing.get_args(tp))}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if origin is list:
        (item,) = typing.get_args(tp)
        return {"type": "array", "items": type_schema(item)}
    if origin is dict:
        _, value = typing.get_args(tp)
        return {"type": "object", "additionalProperties": type_schema(value)}
    if is_dataclass_type(tp):
        return _object_schema(tp)
    raise TypeError(f"no schema mapping for {tp!r}")


def _object_schema(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    for f in public_fields(cls):
        s = type_schema(hints[f.name])
        meta = f.metadata
        s.update(meta.get("schema", {}))
        doc = meta.get("doc", "")
        if meta.get("env"):
            doc += f" Env: `{meta['env']}`."
        s["description"] = doc
        if f.default is not dataclasses.MISSING:
            s["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING and not is_dataclass_type(hints[f.name]):
            s["default"] = f.default_factory()
        props[f.name] = s
    return {"type": "object", "additionalProperties": False, "properties": props}


def json_schema() -> dict[str, Any]:
    s = _object_schema(Settings)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://healer.dev/schemas/config.schema.json",
        "title": "healer.yaml",
        "description": "healer's settings file. Every key is optional; see the defaults.",
        **s,
    }


def main(argv: list[str]) -> int:
    """`python -m healer.config [--check]`: write (or check) schemas/config.schema.json."""
    from healer.resources import bundle_path

    unknown = [a for a in argv if a != "--check"]
    if unknown:
        out = sys.stdout if unknown[0] in ("-h", "--help") else sys.stderr
        print("usage: python -m healer.config [--check]\n\nWrite schemas/config.schema.json "
              "from the settings in healer.config; with --check, exit 1 if it is out of "
              "date instead.", file=out)
        return 0 if out is sys.stdout else 2
    target = bundle_path("schemas", "config.schema.json")
    text = json.dumps(json_schema(), indent=2) + "\n"
    if "--check" in argv:
        current = target.read_text() if target.exists() else ""
        if current != text:
            print(f"{target} is out of date: run python -m healer.config", file=sys.stderr)
            return 1
        return 0
    target.write_text(text)
    print(target)
    return 0
