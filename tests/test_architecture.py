"""The layers of healer, held by its import graph (every import, lazy ones inside functions too).

* ``healer.core`` knows no capability and no surface: it imports only core;
* ``healer.agents`` imports core (and agents);
* capabilities (detect, play, selfheal, context, fleet, code) import no surface (api, commands,
  mcp_server, cli, loop), no ``healer.testing`` and no ``healer.demo``;
* nothing outside ``healer.testing`` imports ``healer.testing`` (production never runs test
  helpers);
* no import cycles.

Imports are ``import``/``from`` statements anywhere in a module and ``"healer.x.y:name"``
strings (what ``healer.resources.optional`` loads at run time).

``healer.errors`` and ``healer.resources`` (and the package's ``__version__``) are the base every
layer may use. ``ALLOWED`` lists today's exceptions: it may only shrink — an entry that no
longer occurs fails the test too, so a fix is recorded by deleting its line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "healer"
BASE = {"healer", "healer.errors", "healer.resources"}
CAPABILITIES = {"detect", "play", "selfheal", "context", "fleet", "code"}
SURFACES = {"api", "commands", "mcp_server", "cli", "loop", "testing", "demo"}

# (importer, imported) pairs that break a rule today. Shrink only.
ALLOWED: set[tuple[str, str]] = set()
# Import cycles today (as sorted module sets). Shrink only.
ALLOWED_CYCLES: set[frozenset[str]] = set()


@cache
def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str) -> str:
    """The module that defines ``name`` (``healer.core.store.Store`` → ``healer.core.store``)."""
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name


def _imported(name: str, path: Path) -> Iterator[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    # `if __name__ == "__main__":` is an entry point, not something importers depend on.
    tree.body = [n for n in tree.body if not _is_main_guard(n)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield mod
            yield from (f"{mod}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # "healer.fleet.demo:run_demo": loaded by healer.resources.optional at run time.
            spec, sep, attr = node.value.partition(":")
            if sep and spec.startswith("healer.") and attr.isidentifier() and spec in modules():
                yield spec


def _is_main_guard(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


@cache
def graph() -> dict[str, frozenset[str]]:
    out = {}
    for name, path in modules().items():
        deps = {_resolve(m) for m in _imported(name, path) if m.split(".")[0] == "healer"}
        # A submodule's import of its own parent package is implied by Python; not an edge.
        out[name] = frozenset(d for d in deps if d and d != name
                              and not name.startswith(d + "."))
    return out


def _layer(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def violations() -> set[tuple[str, str]]:
    found = set()
    for name, deps in graph().items():
        here = _layer(name)
        for dep in deps:
            there = _layer(dep)
            if dep in BASE:
                continue
            broken = (
                (here == "core" and there != "core")
                or (here == "agents" and there not in ("core", "agents"))
                or (here in CAPABILITIES and there in SURFACES)
                or (here != "testing" and there == "testing")
            )
            if broken:
                found.add((name, dep))
    return found


def cycles() -> set[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            for w in edges:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.add(frozenset(comp))
    return found


class TestLayers:
    def test_the_graph_sees_lazy_imports(self) -> None:
        """Imports inside functions count: the loop imports the API service lazily."""
        assert "healer.core.store" in graph()["healer.loop"]
        assert len(modules()) > 100

    def test_no_new_layer_violations(self) -> None:
        """Core imports only core, agents only core, capabilities no surface, nothing but
        healer.testing imports healer.testing."""
        new = violations() - ALLOWED
        assert not new, "layer rules broken:\n" + "\n".join(f"  {a} → {b}" for a, b in sorted(new))

    def test_allow_list_only_shrinks(self) -> None:
        """A fixed violation must leave ALLOWED, so it cannot come back unnoticed."""
        stale = ALLOWED - violations()
        assert not stale, "remove from ALLOWED:\n" + "\n".join(map(str, sorted(stale)))

    def test_no_new_import_cycles(self) -> None:
        found = cycles()
        new = found - ALLOWED_CYCLES
        assert not new, "import cycles:\n" + "\n".join(str(sorted(c)) for c in new)
        stale = ALLOWED_CYCLES - found
        assert not stale, "remove from ALLOWED_CYCLES:\n" + "\n".join(
            str(sorted(c)) for c in stale)


@pytest.mark.parametrize("module", ["healer.loop", "healer.api.app", "healer.selfheal.service",
                                    "healer.play.service", "healer.fleet.heal"])
def test_production_never_imports_the_test_helpers(module: str) -> None:
    """Walk everything ``module`` can reach: no healer.testing on the way."""
    g, seen, todo = graph(), set(), [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(g.get(m, ()))
    assert not {m for m in seen if m.startswith("healer.testing")}


RUNS_AGENTS_DIRECTLY = {"healer.agents.executors.select_executor", "healer.agents.select_executor",
                        "healer.agents.executors.Executor", "healer.agents.Executor",
                        "healer.agents.runtime.AgentRunner", "healer.agents.AgentRunner"}


def test_capabilities_start_agents_only_through_the_dispatcher() -> None:
    """No incident kind builds an executor or a runner of its own: every run goes through
    ``healer.agents.dispatcher`` (the core Dispatcher), so its outcome is the result on the
    bus and ``executor.max_concurrent`` holds for all of them."""
    found = {(name, imp) for name, path in modules().items()
             if _layer(name) in CAPABILITIES
             for imp in _imported(name, path) if imp in RUNS_AGENTS_DIRECTLY}
    assert not found, "\n".join(map(str, sorted(found)))
    assert "healer.core.dispatch" in graph()["healer.agents.runtime"]
