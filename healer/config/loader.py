"""Loading the settings tree from its four sources, with errors that name the bad value.

Precedence, lowest first: the defaults → ``cto-config.json`` → ``healer.yaml`` → environment
variables → ``--set`` flags. Each layer is checked against the schema before it is merged.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import json
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from healer.config.fields import is_dataclass_type, public_fields
from healer.config.schema import type_schema
from healer.config.settings import Settings
from healer.core import thresholds
from healer.core.address import check_public_url
from healer.core.names import MIN_TOKEN_CHARS, is_loopback_host, safe_name
from healer.core.schemas import errors as schema_errors
from healer.errors import ConfigError, UnsafeNameError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    # Evaluating a class's annotations is costly (every process loads the settings, field by
    # field); the classes never change, so each is evaluated once.
    return typing.get_type_hints(cls)


def _field_type(cls: type, name: str) -> Any:
    return _hints(cls)[name]


def _coerce(text: str, tp: Any) -> Any:
    """Turn an env/flag string into the field's type (schema validation follows)."""
    origin = typing.get_origin(tp)
    if tp is bool:
        low = text.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        return text
    if tp is int:
        try:
            return int(text)
        except ValueError:
            return text
    if tp is float:
        try:
            return float(text)
        except ValueError:
            return text
    if origin in (list, dict):
        stripped = text.strip()
        if stripped.startswith(("[", "{")):
            try:
                return json.loads(stripped)
            except json.JSONDecodeError:
                return text
        if origin is list:
            return [p.strip() for p in stripped.split(",") if p.strip()]
        return text
    return text


def _resolve(path: list[str]) -> tuple[type, str] | None:
    """The dataclass and field name a dotted path points at, or None."""
    cls: type = Settings
    for i, part in enumerate(path):
        names = {f.name: f for f in public_fields(cls)}
        if part not in names:
            return None
        tp = _field_type(cls, part)
        if i == len(path) - 1:
            return cls, part
        if not is_dataclass_type(tp):
            return None
        cls = tp
    return None


def _nest(path: list[str], value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cur = out
    for part in path[:-1]:
        cur = cur.setdefault(part, {})
    cur[path[-1]] = value
    return out


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def _validate_layer(raw: Any, source: str, *, key_hint: Mapping[str, str] | None = None) -> None:
    if not isinstance(raw, Mapping):
        raise ConfigError("expected a mapping of settings at the top level", file=source,
                          expected="a YAML mapping")
    problems = schema_errors("config", raw)
    if problems:
        key, message = problems[0]
        shown = (key_hint or {}).get(key, key)
        raise ConfigError(message, file=source, key=shown, expected=_expected_for(key))


def _expected_for(key: str) -> str:
    parts = key.split(".")
    found = _resolve(parts)
    if not found:
        return ""
    cls, name = found
    s = type_schema(_field_type(cls, name))
    if "enum" in s:
        return "one of " + ", ".join(map(str, s["enum"]))
    return s.get("type", "")


def _env_layer(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    layer: dict[str, Any] = {}
    hints: dict[str, str] = {}

    def visit(cls: type, prefix: list[str]) -> None:
        for f in public_fields(cls):
            path = [*prefix, f.name]
            tp = _field_type(cls, f.name)
            if is_dataclass_type(tp):
                visit(tp, path)
                continue
            names = ["HEALER__" + "__".join(p.upper() for p in path)]
            if f.metadata.get("env"):
                names.insert(0, f.metadata["env"])
            for name in names:
                if name in env:
                    _merge(layer, _nest(path, _coerce(env[name], tp)))
                    hints[".".join(path)] = name
                    break

    visit(Settings, [])
    return layer, hints


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["api.port=9000", …]`` → a nested dict with values coerced to the field types."""
    layer: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {pair!r}", file="flags")
        path = key.strip().split(".")
        found = _resolve(path)
        if not found:
            raise ConfigError("unknown setting", file="flags", key=key.strip())
        cls, name = found
        _merge(layer, _nest(path, _coerce(value, _field_type(cls, name))))
    return layer


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("file is not UTF-8 text", file=str(path)) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"not valid YAML{where}: {problem}", file=str(path)) from exc
    return {} if data is None else data


def read_json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError("file is not UTF-8 text", file=str(path)) from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}",
                          file=str(path)) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from exc


def _cto_layer(path: Path) -> dict[str, Any]:
    """The orchestrator's settings healer honours, from cto-config.json."""
    data = read_json_file(path)
    problems = schema_errors("cto-config", data)
    if problems:
        key, message = problems[0]
        raise ConfigError(message, file=str(path), key=key)
    defaults = data.get("defaults", {})
    play = defaults.get("play", {})
    rem = defaults.get("remediation", {})
    layer: dict[str, Any] = {}
    if "healerEndpoint" in play:
        layer["healer_endpoint"] = play["healerEndpoint"]
    if "maxIterations" in rem:
        layer["max_iterations"] = rem["maxIterations"]
    if "syncTimeoutSecs" in rem:
        layer["sync_timeout_s"] = rem["syncTimeoutSecs"]
    return {"play": layer} if layer else {}


def _build(cls: type, raw: Mapping[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for f in public_fields(cls):
        if f.name not in raw:
            continue
        tp = _field_type(cls, f.name)
        value = raw[f.name]
        if is_dataclass_type(tp):
            value = _build(tp, value)
        elif tp is float and isinstance(value, int):
            value = float(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def load_settings(
    config_file: str | Path | None = None,
    *,
    overrides: list[str] | Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Load the settings tree from every source; raise ``ConfigError`` naming the bad value."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    sources: list[str] = []

    env_layer, env_hints = _env_layer(env)
    _validate_layer(env_layer, "environment", key_hint=env_hints)

    cto_name = env_layer.get("cto_config", "cto-config.json")
    cto_path = Path(cto_name).expanduser()
    if cto_path.is_file():
        _merge(merged, _cto_layer(cto_path))
        sources.append(str(cto_path))

    explicit = config_file or env.get("HEALER_CONFIG")
    path = Path(explicit).expanduser() if explicit else Path("healer.yaml")
    if explicit and not path.is_file():
        raise ConfigError("file not found", file=str(path))
    if path.is_file():
        layer = _read_yaml(path)
        _validate_layer(layer, str(path))
        _merge(merged, layer)
        sources.append(str(path))

    _merge(merged, env_layer)
    if overrides:
        flag_layer = parse_overrides(list(overrides)) if isinstance(overrides, list) else dict(
            overrides)
        _validate_layer(flag_layer, "flags")
        _merge(merged, flag_layer)

    _validate_layer(merged, "settings")
    settings: Settings = _build(Settings, merged)
    settings.sources = sources
    _check_semantics(settings)
    return settings


def _check_semantics(s: Settings) -> None:
    """Rules a schema cannot say."""
    if s.node_id:
        try:
            safe_name(s.node_id, "node id")
        except UnsafeNameError as exc:
            raise ConfigError(exc.reason, file="settings", key="node_id",
                              expected="a safe name") from exc
    if not is_loopback_host(s.api.host) and len(s.api.token.strip()) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"a token of at least {MIN_TOKEN_CHARS} characters is required when the API binds "
            f"to a non-loopback address ({s.api.host})",
            file="settings", key="api.token",
            expected=f"a bearer token of {MIN_TOKEN_CHARS}+ characters (HEALER_TOKEN)",
        )
    if s.api.token and s.api.token != s.api.token.strip():
        raise ConfigError("the token has leading or trailing white space", file="settings",
                          key="api.token", expected="a token without surrounding white space")
    if s.api.public_url:
        try:
            s.api.public_url = check_public_url(s.api.public_url)
        except ValueError as exc:
            raise ConfigError(str(exc), file="settings", key="api.public_url",
                              expected="an http(s) base URL, or empty") from exc
    for proxy in s.api.trusted_proxies:
        try:
            ipaddress.ip_network(proxy.strip(), strict=False)
        except ValueError as exc:
            raise ConfigError(f"{proxy!r} is not an address or network", file="settings",
                              key="api.trusted_proxies",
                              expected="IP addresses or CIDR networks (10.0.0.0/8)") from exc
    thresholds.parse(s.gate.thresholds)  # rules a schema cannot say (a window needs N > 1)
    if s.api.throttle.max_delay_s < s.api.throttle.base_delay_s:
        raise ConfigError("the longest wait is shorter than the first", file="settings",
                          key="api.throttle.max_delay_s",
                          expected="at least api.throttle.base_delay_s")


def redacted(settings: Settings) -> dict[str, Any]:
    """The settings as a dict with secrets masked, for `healer doctor` and logs."""

    def visit(obj: Any) -> Any:
        out: dict[str, Any] = {}
        for f in public_fields(type(obj)):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                out[f.name] = visit(value)
            elif f.metadata.get("secret") and value:
                out[f.name] = "***"
            else:
                out[f.name] = value
        return out

    return visit(settings)
