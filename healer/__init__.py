"""healer: a self-healing layer for fleets of AI coding agents and the machines they run on.

The public surface, grouped (imported lazily, so ``import healer`` stays cheap)::

    settings     Settings, load_settings
    pipeline     Signal, Receipt (healer.core.incidents), Policy, Decision (healer.core.gate),
                 Dispatcher (healer.core.dispatch), dispatcher (the one way kinds run agents)
    agents       AgentTask, RunOutcome, select_executor, SlotPool
    state        Store, open_store, Seed
    errors       HealerError and its tree (see ``healer.errors``)

Everything else is an implementation module; ``tests/test_public_api.py`` holds this list.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    # settings
    "Settings": "healer.config",
    "load_settings": "healer.config",
    # the incident pipeline
    "Signal": "healer.core.incidents",
    "Receipt": "healer.core.incidents",
    "Policy": "healer.core.gate",
    "Decision": "healer.core.gate",
    "Dispatcher": "healer.core.dispatch",
    "dispatcher": "healer.agents.runtime",
    # agents
    "AgentTask": "healer.agents.task",
    "RunOutcome": "healer.agents.task",
    "select_executor": "healer.agents.executors",
    "SlotPool": "healer.core.slots",
    # state
    "Store": "healer.core.store",
    "open_store": "healer.core.store",
    "Seed": "healer.core.seeds",
    # errors
    "HealerError": "healer.errors",
    "UsageError": "healer.errors",
    "ConfigError": "healer.errors",
    "UnsafeNameError": "healer.errors",
    "StoreError": "healer.errors",
    "ConflictError": "healer.errors",
    "NotFoundError": "healer.errors",
    "RejectedFile": "healer.errors",
    "UnsafeDirError": "healer.errors",
    "ExecutorError": "healer.errors",
    "AgentUnavailableError": "healer.errors",
    "AgentProcessError": "healer.errors",
    "AgentResultError": "healer.errors",
    "AgentTimeoutError": "healer.errors",
    "SlotWaitError": "healer.errors",
    "UnavailableError": "healer.errors",
}

__all__ = ["__version__", *_EXPORTS]


# Inline, not healer.core.lazy.exports: `import healer` imports no module of healer at all.
def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'healer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
