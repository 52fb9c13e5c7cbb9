"""healer's settings: one typed tree, documented defaults, four sources.

Precedence, lowest first: the defaults → ``cto-config.json`` (the orchestrator's
``defaults.play.healerEndpoint`` and ``defaults.remediation.*``) → ``healer.yaml`` → environment
variables → command-line flags. Every field carries its documentation in ``metadata["doc"]``;
``schemas/config.schema.json`` is generated from this tree (``python -m healer.config``) and a
test keeps the two in step.

Environment variables: the documented short names (``HEALER_STATE_DIR``, ``HEALER_PORT`` …) and,
for every field, ``HEALER__<SECTION>__<FIELD>`` (e.g. ``HEALER__SELFHEAL__COOLDOWN_S=600``).
Flags: ``--set section.field=value`` on any command that loads settings.

The fleet's node list is not a setting: it is read from ``.multifleet/config.json``
(``fleet.config``) by ``load_multifleet``.

- ``fields``: ``setting``/``section``, how a field is declared;
- ``sections``, ``capabilities``, ``settings``: the tree (shared sections, one section per
  capability, the root);
- ``loader``: ``load_settings``, ``parse_overrides``, ``redacted``;
- ``schema``: ``json_schema`` and the ``python -m healer.config [--check]`` command;
- ``multifleet``: ``load_multifleet``, ``NodeEntry``, ``MultifleetConfig``.
"""

from __future__ import annotations

from healer.config.capabilities import (
    CodeSettings,
    ContextSettings,
    DetectSettings,
    FleetSettings,
    KubeSettings,
    PlaySettings,
    SelfhealSettings,
)
from healer.config.fields import section, setting
from healer.config.loader import load_settings, parse_overrides, redacted
from healer.config.multifleet import MultifleetConfig, NodeEntry, load_multifleet
from healer.config.schema import json_schema
from healer.config.sections import (
    AgentsSettings,
    ApiSettings,
    BusSettings,
    ClaudeSettings,
    ExecutorSettings,
    ForgeSettings,
    LogSettings,
    NotifySettings,
    StoreSettings,
    WebhookSettings,
)
from healer.config.settings import Settings
from healer.errors import ConfigError

__all__ = [
    "AgentsSettings",
    "ApiSettings",
    "BusSettings",
    "ClaudeSettings",
    "CodeSettings",
    "ConfigError",
    "ContextSettings",
    "DetectSettings",
    "ExecutorSettings",
    "FleetSettings",
    "ForgeSettings",
    "KubeSettings",
    "LogSettings",
    "MultifleetConfig",
    "NodeEntry",
    "NotifySettings",
    "PlaySettings",
    "SelfhealSettings",
    "Settings",
    "StoreSettings",
    "WebhookSettings",
    "json_schema",
    "load_multifleet",
    "load_settings",
    "parse_overrides",
    "redacted",
    "section",
    "setting",
]
