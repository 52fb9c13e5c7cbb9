"""``scripts/record_cli_failures.py`` as a module, for tests that drive the real Claude Code
CLI into each recorded failure (it lives in the checkout, not in the package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "record_cli_failures.py"


def recorder() -> Any:
    """The recorder module (loaded once per process)."""
    loaded = sys.modules.get("record_cli_failures")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("record_cli_failures", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module
