"""healer's public surface and its exception tree are deliberate: a change here is on purpose."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import healer
from healer import errors

PACKAGE = Path(healer.__file__).parent
EXPECTED = {
    "__version__", "Settings", "load_settings", "Signal", "Receipt", "Policy", "Decision",
    "Dispatcher", "dispatcher", "AgentTask", "RunOutcome", "select_executor",
    "SlotPool", "Store", "open_store", "Seed", "HealerError", "UsageError", "ConfigError",
    "UnsafeNameError", "StoreError", "ConflictError", "NotFoundError", "RejectedFile",
    "UnsafeDirError",
    "ExecutorError", "AgentUnavailableError", "AgentProcessError", "AgentResultError",
    "AgentTimeoutError", "SlotWaitError", "UnavailableError",
}
# HealerError subclasses defined outside healer/errors.py today. Shrink only.
ERRORS_ELSEWHERE = {"TransitionError", "AnonymizationError", "GitError", "ForgeError",
                    "PromptError", "CatalogError", "AlreadyActive", "BadMessage", "LayerError"}


def test_exported_members() -> None:
    """__all__ is exactly the documented surface, and every name resolves."""
    assert set(healer.__all__) == EXPECTED
    for name in healer.__all__:
        assert getattr(healer, name) is not None, name
    assert sorted(dir(healer)) == sorted(EXPECTED)


def test_healer_agents_exports_every_name_it_lists() -> None:
    """healer.agents imports its names at first use: each one in its ``__all__`` resolves
    (to the object its module defines), and it lists nothing it cannot give."""
    import importlib

    import healer.agents as agents

    assert set(agents.__all__) == set(agents._WHERE)
    for name in agents.__all__:
        module = importlib.import_module(agents._WHERE[name])
        assert getattr(agents, name) is getattr(module, name), name


def test_import_healer_is_cheap() -> None:
    """`import healer` loads no implementation module (they load on first use)."""
    out = subprocess.run([sys.executable, "-c", "import sys, healer; print(sorted("
                          "m for m in sys.modules if m.startswith('healer.')))"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _tree() -> dict[str, str]:
    """class → parent, as drawn in the errors module's docstring."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        m = re.match(r"^(\s*)((?:[│ ]   )*)(?:[├└]── )?([A-Z]\w+)\s", line)
        if not m or not m.group(3).endswith(("Error", "File")):
            continue
        depth = len(m.group(2)) // 4 + (1 if "──" in line else 0)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[m.group(3)] = stack[-1][1] if stack else "Exception"
        stack.append((depth, m.group(3)))
    return parents


def test_the_drawn_tree_is_the_real_tree() -> None:
    drawn = _tree()
    real = {name: cls.__bases__[0].__name__ for name, cls in inspect.getmembers(errors)
            if inspect.isclass(cls) and issubclass(cls, BaseException)
            and cls.__module__ == errors.__name__}
    assert drawn == real


def test_every_healer_error_lives_in_errors_py() -> None:
    """New HealerError subclasses go in healer/errors.py (and its drawn tree)."""
    family = set(_tree())
    elsewhere = set()
    for path in PACKAGE.rglob("*.py"):
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and (b.id in family or b.id in ERRORS_ELSEWHERE)
                    for b in node.bases):
                elsewhere.add(node.name)
    assert elsewhere == ERRORS_ELSEWHERE
