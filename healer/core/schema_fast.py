"""A fast yes for valid JSON documents: schemas compiled into plain Python checks.

jsonschema walks a schema keyword by keyword, building validator objects as it descends:
about 150-200 µs for a session-start body, most of the API's time per request. Almost every
document a healer receives is valid, so ``compile_checker`` turns a schema into nested
closures that answer "certainly valid" in a few microseconds, and everything else —
including every invalid document — still goes to jsonschema, which decides and words the
errors (``healer.core.schemas.errors``).

The contract is one-sided: a checker may answer False for a valid document (then jsonschema
runs and accepts it), never True for an invalid one. So it covers only keywords whose
meaning it reproduces exactly and answers False whenever it is unsure (an integer written
``1.0``, an ``enum`` of floats). A schema using any other keyword that asserts something
(``format``, ``oneOf``, ``not``, ``patternProperties``, a remote ``$ref``, …) gets no checker
at all: ``compile_checker`` returns None. ``tests/core/test_schema_fast.py`` holds every
bundled schema's checker to jsonschema's verdicts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Check = Callable[[Any], bool]
_SCALARS = frozenset({str, int, type(None)})  # enum and const values compared exactly
Regex = Callable[[str], re.Pattern[str]]

# Keywords that assert nothing (documentation, defaults, identifiers).
_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "$defs", "title", "description",
                          "default", "examples", "deprecated", "readOnly", "writeOnly"})
_HANDLED = frozenset({"type", "properties", "required", "additionalProperties", "items",
                      "minItems", "maxItems", "minLength", "maxLength", "pattern", "enum",
                      "const", "minProperties", "maxProperties", "propertyNames", "minimum",
                      "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "$ref"})


class Unsupported(Exception):
    """The schema uses something the fast path does not reproduce exactly."""


def _is_type(name: str) -> Check:
    # jsonschema's types: bool is not a number; a float with no fraction *is* an integer
    # there, which this path leaves to jsonschema (False: unsure).
    if name == "object":
        return lambda v: type(v) is dict
    if name == "array":
        return lambda v: type(v) is list
    if name == "string":
        return lambda v: type(v) is str
    if name == "integer":
        return lambda v: type(v) is int
    if name == "number":
        return lambda v: type(v) is int or type(v) is float
    if name == "boolean":
        return lambda v: type(v) is bool
    if name == "null":
        return lambda v: v is None
    raise Unsupported(f"type {name!r}")


def _number(value: Any) -> float | int:
    if type(value) not in (int, float):
        raise Unsupported(f"bound {value!r}")
    return value  # type: ignore[no-any-return]


class _Compiler:
    def __init__(self, root: dict[str, Any], regex: Regex):
        self.root = root
        self.regex = regex
        self.refs: dict[str, Check] = {}

    def compile(self, schema: Any) -> Check:
        if schema is True or schema == {}:
            return lambda v: True
        if schema is False:
            return lambda v: False
        if not isinstance(schema, dict):
            raise Unsupported("schema is not an object")
        unknown = set(schema) - _ANNOTATIONS - _HANDLED
        if unknown:
            raise Unsupported(", ".join(sorted(unknown)))
        checks = [self._keyword(k, v, schema) for k, v in schema.items() if k in _HANDLED]
        checks = [c for c in checks if c is not None]
        if not checks:
            return lambda v: True
        if len(checks) == 1:
            return checks[0]
        return _all_of(checks)

    def _keyword(self, key: str, value: Any, schema: dict[str, Any]) -> Check | None:
        if key == "type":
            names = value if isinstance(value, list) else [value]
            tests = [_is_type(n) for n in names]
            if len(tests) == 1:
                return tests[0]
            return _any_of(tests)
        if key == "properties":
            props = {name: self.compile(sub) for name, sub in value.items()}

            def properties(v: Any) -> bool:
                if type(v) is dict:
                    # The document's keys, not the schema's: a body names few of them.
                    for name, item in v.items():
                        check = props.get(name)
                        if check is not None and not check(item):
                            return False
                return True

            return properties
        if key == "required":
            need = frozenset(value)
            return lambda v: type(v) is not dict or need <= v.keys()
        if key == "additionalProperties":
            known = frozenset(schema.get("properties", {}))
            if value is False:
                return lambda v: type(v) is not dict or v.keys() <= known
            extra = self.compile(value)

            def additional(v: Any) -> bool:
                if type(v) is dict:
                    for k, item in v.items():
                        if k not in known and not extra(item):
                            return False
                return True

            return additional
        if key == "items":
            return _every(list, self.compile(value))
        if key in ("minItems", "maxItems", "minLength", "maxLength", "minProperties",
                   "maxProperties"):
            if type(value) is not int:
                raise Unsupported(f"{key} {value!r}")
            kind = {"I": list, "L": str, "P": dict}[key[3]]
            bound = value
            if key.startswith("min"):
                return lambda v: type(v) is not kind or len(v) >= bound
            return lambda v: type(v) is not kind or len(v) <= bound
        if key == "pattern":
            search = self.regex(value).search
            return lambda v: type(v) is not str or search(v) is not None
        if key in ("enum", "const"):
            options = value if key == "enum" else [value]
            if not all(type(o) in _SCALARS for o in options):
                raise Unsupported(f"{key} of floats, booleans, arrays or objects")
            # Typed pairs: jsonschema tells true from 1 but takes 1.0 for 1, so a float
            # (or a boolean) is left to it.
            allowed = frozenset((type(o), o) for o in options)
            return lambda v: type(v) in _SCALARS and (type(v), v) in allowed
        if key == "propertyNames":
            return _every(dict, self.compile(value))  # a dict's members are its keys
        if key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            return self._bound(key, _number(value))
        if key == "anyOf":
            # Sound one way only: a branch this path accepts is valid in jsonschema too.
            return _any_of([self.compile(sub) for sub in value])
        if key == "$ref":
            return self._ref(value)
        raise Unsupported(key)  # pragma: no cover - _HANDLED and this chain agree

    @staticmethod
    def _bound(key: str, bound: float | int) -> Check:
        def num(v: Any) -> bool:
            return type(v) is int or type(v) is float

        if key == "minimum":
            return lambda v: not num(v) or v >= bound
        if key == "maximum":
            return lambda v: not num(v) or v <= bound
        if key == "exclusiveMinimum":
            return lambda v: not num(v) or v > bound
        return lambda v: not num(v) or v < bound

    def _ref(self, ref: str) -> Check:
        """A local ``#/$defs/<name>``, compiled once (and lazily: defs may refer to each
        other, or to themselves)."""
        prefix = "#/$defs/"
        if not isinstance(ref, str) or not ref.startswith(prefix) or "/" in ref[len(prefix):] \
                or "~" in ref or "%" in ref:
            raise Unsupported(f"$ref {ref!r}")
        name = ref[len(prefix):]
        target = self.root.get("$defs", {}).get(name)
        if target is None:
            raise Unsupported(f"$ref {ref!r} names nothing")
        if name not in self.refs:
            slot: list[Check] = []
            self.refs[name] = lambda v: slot[0](v)
            slot.append(self.compile(target))
        return self.refs[name]


def _all_of(checks: list[Check]) -> Check:
    # Loops, not all(<generator>): a generator per node per document was most of the cost.
    def all_of(v: Any) -> bool:
        for check in checks:  # noqa: SIM110 - all(<generator>) is what this replaces
            if not check(v):
                return False
        return True

    return all_of


def _every(kind: type, check: Check) -> Check:
    """Every member of a ``kind`` value (a list's items, a dict's keys) passes ``check``;
    values of other types are not this keyword's business."""
    def every(v: Any) -> bool:
        if type(v) is kind:
            for member in v:
                if not check(member):
                    return False
        return True

    return every


def _any_of(checks: list[Check]) -> Check:
    def any_of(v: Any) -> bool:
        for check in checks:  # noqa: SIM110 - any(<generator>) is what this replaces
            if check(v):
                return True
        return False

    return any_of


def compile_checker(schema: dict[str, Any], *, regex: Regex) -> Check | None:
    """A function answering True only for documents valid against ``schema``; None when the
    schema uses a keyword this module does not reproduce. ``regex`` compiles a ``pattern``
    (healer's ECMA-262 reading, ``healer.core.schemas.ecma_regex``)."""
    try:
        return _Compiler(schema, regex).compile(schema)
    except (Unsupported, re.error):
        return None
