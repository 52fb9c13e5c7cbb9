"""Detection: a catalog of failure patterns, one fast multi-pattern engine, and log sources.

The public names, imported on first use (so ``healer scan`` loads only what it needs)::

    Catalog, CatalogError, Pattern, Suppression   healer.detect.catalog
    Engine, StreamScanner                         healer.detect.engine
    Alert                                         healer.detect.alert
    Follower, FileFollower, CommandSource, Event  healer.detect.sources
    LokiSource                                    healer.detect.loki
    Grouper, family                               healer.detect.grouping

See docs/detection.md.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_WHERE = {
    "Catalog": "catalog", "CatalogError": "catalog", "Pattern": "catalog",
    "Suppression": "catalog", "Engine": "engine", "StreamScanner": "engine", "Alert": "alert",
    "Follower": "sources", "FileFollower": "sources", "CommandSource": "sources",
    "Event": "sources", "LokiSource": "loki", "Grouper": "grouping", "family": "grouping",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'healer.detect' has no attribute {name!r}")
    return getattr(importlib.import_module(f"healer.detect.{module}"), name)
