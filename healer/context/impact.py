"""The impact map from a repository's Python imports (``healer context init``).

Every ``.py`` file the repository tracks (``git ls-files``; a plain folder is walked, skipping
virtualenvs, caches and hidden folders) is parsed with ``ast``; each ``import`` and
``from … import`` that names a module of the repository becomes an edge. Modules are found by
their dotted path from the root, and from ``src/`` for the src layout. Relative imports are
resolved against the importing file's package. Files that do not parse are skipped and listed.
"""

from __future__ import annotations

import ast
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer.context.layers import risk_for
from healer.core.git import git

SKIP_DIRS = frozenset({".git", ".hg", ".venv", "venv", "env", "node_modules", "__pycache__",
                       "build", "dist", ".tox", ".nox", ".mypy_cache", ".pytest_cache",
                       ".ruff_cache", "site-packages", ".healer"})
MAX_FILE_BYTES = 2 << 20
MAX_FILES = 50_000


@dataclass
class ImportGraph:
    files: list[str]
    imports: dict[str, set[str]] = field(default_factory=dict)  # file → files it imports
    skipped: list[str] = field(default_factory=list)

    def importers(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {f: set() for f in self.files}
        for src, targets in self.imports.items():
            for t in targets:
                out.setdefault(t, set()).add(src)
        return out

    def impact_map(self) -> dict[str, Any]:
        """The ``impact-map.yaml`` document (schemas/impact-map.schema.json)."""
        by = self.importers()
        modules = {}
        for f in sorted(self.files):
            importers = sorted(by.get(f, ()))
            modules[f] = {"depends_on": sorted(self.imports.get(f, ())),
                          "depended_by": importers, "blast_radius": 1 + len(importers),
                          "change_risk": risk_for(len(importers))}
        return {"generated_by": "healer context init",
                "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "modules": modules}


def python_files(root: Path) -> list[str]:
    """Repo-relative ``.py`` files: tracked ones in a git repository, else a filtered walk."""
    res = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
              "*.py", check=False, timeout=60)
    if res.ok:
        found = [p for p in res.stdout.split("\0") if p.endswith(".py")]
        return sorted({p for p in found if not SKIP_DIRS.intersection(p.split("/")[:-1])
                       and (root / p).is_file()})[:MAX_FILES]
    out: list[str] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        rel = Path(folder).relative_to(root)
        out += [(rel / n).as_posix() for n in sorted(names) if n.endswith(".py")]
        if len(out) >= MAX_FILES:
            break
    return out[:MAX_FILES]


def _module_names(path: str) -> list[str]:
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    names = [".".join(parts)] if parts else []
    if len(parts) > 1 and parts[0] in ("src", "lib"):
        names.append(".".join(parts[1:]))
    return names


def _package_of(path: str) -> list[str]:
    parts = path[:-3].split("/")
    pkg = parts[:-1]
    if pkg and pkg[0] in ("src", "lib"):
        pkg = pkg[1:]
    return pkg


def _imported_modules(tree: ast.AST, path: str) -> Iterable[tuple[str, str]]:
    """(module, fallback) pairs: ``from a import b`` is ``a.b`` if that is a module, else
    ``a``; ``import a.b`` is ``a.b`` or the nearest package of it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ""
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = _package_of(path)
                up = node.level - 1
                if up > len(pkg):
                    continue
                base = pkg[:len(pkg) - up] if up else pkg
                mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
            else:
                mod = node.module or ""
            for alias in node.names:
                if alias.name == "*" or not mod:
                    yield mod or alias.name, ""
                else:
                    yield f"{mod}.{alias.name}", mod


def build_graph(root: Path | str) -> ImportGraph:
    """Parse every Python file under ``root`` and connect the imports between them."""
    root = Path(root)
    files = python_files(root)
    graph = ImportGraph(files=files)
    by_module: dict[str, str] = {}
    for f in files:
        for name in _module_names(f):
            by_module.setdefault(name, f)
    for f in files:
        path = root / f
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                graph.skipped.append(f)
                continue
            tree = ast.parse(path.read_bytes(), filename=f)
        except (SyntaxError, ValueError, OSError):
            graph.skipped.append(f)
            continue
        targets: set[str] = set()
        for mod, fallback in _imported_modules(tree, f):
            hit = by_module.get(mod) if fallback else None
            if hit is None:
                # `import a.b.c` depends on a.b.c, or the nearest package of it that exists.
                parts = (fallback or mod).split(".")
                while parts and hit is None:
                    hit = by_module.get(".".join(parts))
                    parts.pop()
            if hit is not None and hit != f:
                targets.add(hit)
        graph.imports[f] = targets
    return graph
