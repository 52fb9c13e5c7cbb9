"""JSON Schema validators for the contracts in schemas/, each compiled once."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import TYPE_CHECKING, Any

from healer.core.schema_fast import Check, compile_checker
from healer.resources import bundle_path

if TYPE_CHECKING:  # jsonschema costs ~50 ms to import: only when a schema is checked
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError


@cache
def schema(name: str) -> dict[str, Any]:
    """The schema ``schemas/<name>.schema.json``."""
    with open(bundle_path("schemas", f"{name}.schema.json"), encoding="utf-8") as fh:
        return json.load(fh)


@cache
def validator(name: str) -> Draft202012Validator:
    s = schema(name)
    cls = _validator_class()
    cls.check_schema(s)
    return cls(s, format_checker=cls.FORMAT_CHECKER)  # type: ignore[no-any-return]


@cache
def fast_checker(name: str) -> Check | None:
    """``schemas/<name>``'s certainly-valid check (``healer.core.schema_fast``), or None."""
    return compile_checker(schema(name), regex=ecma_regex)


@cache
def _validator_class() -> Any:
    """Draft 2020-12 with ECMA-262 ``pattern`` semantics.

    JSON Schema patterns are ECMA-262 regexes, where ``$`` matches only at the very end;
    Python's ``$`` also matches before a final newline, so ``"play-1\n"`` would pass
    ``^[a-z0-9-]+$`` and reach a file name or a log line."""
    from jsonschema import Draft202012Validator, validators
    from jsonschema.exceptions import ValidationError

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Any:
        if isinstance(instance, str) and not ecma_regex(patrn).search(instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    return validators.extend(Draft202012Validator, {"pattern": pattern})


@cache
def ecma_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled with every unescaped ``$`` outside a class meaning end of text."""
    out: list[str] = []
    in_class = escaped = False
    for ch in pattern:
        if escaped:
            out.append(ch)
            escaped = False
        elif ch == "\\":
            out.append(ch)
            escaped = True
        elif in_class:
            out.append(ch)
            in_class = ch != "]"
        elif ch == "[":
            out.append(ch)
            in_class = True
        elif ch == "$":
            out.append(r"\Z")
        else:
            out.append(ch)
    return re.compile("".join(out))


def dotted(path: Any) -> str:
    """``['api', 'port']`` → ``api.port``; list indexes as ``[3]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def describe(error: ValidationError) -> tuple[str, str]:
    """(dotted key, human message) for the most relevant error."""
    key = dotted(error.absolute_path)
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        if extra:
            key = f"{key}.{extra[0]}" if key else extra[0]
            allowed = ", ".join(sorted(error.schema.get("properties", {})))
            return key, f"unknown key (allowed here: {allowed})"
    if error.validator == "type":
        return key, f"expected {error.validator_value}, got {error.instance!r}"[:300]
    if error.validator == "enum":
        allowed = ", ".join(map(str, error.validator_value))
        return key, f"expected one of {allowed}, got {error.instance!r}"[:300]
    return key, error.message[:300]


def errors(name: str, data: Any) -> list[tuple[str, str]]:
    """All problems of ``data`` against schema ``name`` as (key, message), best first."""
    fast = fast_checker(name)
    if fast is not None and fast(data):
        return []  # the common case: no need to walk the schema with jsonschema
    v = validator(name)
    found = sorted(v.iter_errors(data), key=lambda e: (len(e.absolute_path), e.path))
    return [describe(e) for e in found]


def first_error(name: str, data: Any) -> tuple[str, str] | None:
    errs = errors(name, data)
    return errs[0] if errs else None
