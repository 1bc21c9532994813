"""No two r2med_core modules import each other, not even lazily inside a function.

A lazy import hides a cycle until the one call path that triggers it half-initialises a module
(``backends`` and ``retrieval.dense`` used to import each other so). The graph is read from the
source, every ``import`` at any depth counts, so a cycle that comes back fails here; each module is
also imported first in a fresh interpreter, which a module-level cycle would break.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import r2med_core

PACKAGE = Path(r2med_core.__file__).parent


def _module_name(path: Path) -> str:
    parts = ["r2med_core", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def import_lines(name: str, path: Path, source: str | None = None) -> list[tuple[str, int]]:
    """Each r2med_core module ``name`` imports anywhere in its source (functions included), with the line."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # ``from . import x`` names a module x; ``from .m import f`` names m
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        found += [(t, node.lineno) for t in targets if t in MODULES and t != name]
    return sorted(dict.fromkeys(found), key=lambda pair: pair[1])  # ``from m import a, b`` is one line


def _imports(name: str, path: Path) -> set[str]:
    """The r2med_core modules ``name`` imports anywhere in its source (functions included)."""
    found = {target for target, _ in import_lines(name, path)}
    # a package's own submodules import it implicitly: that edge is not a cycle
    return {t for t in found if not name.startswith(t + ".")}


def test_the_module_import_graph_has_no_cycle() -> None:
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as err:
        pytest.fail(f"import cycle: {' -> '.join(err.args[1])}")


def test_the_graph_sees_lazy_imports() -> None:
    """The check reads imports inside functions (the cycle it guards against was one)."""
    onnx, dense = "r2med_core.retrieval.onnx_encoder", "r2med_core.retrieval.dense"
    assert onnx in _imports(dense, MODULES[dense])
    assert dense not in _imports(onnx, MODULES[onnx])


FIRST = ("r2med_core.retrieval.onnx_encoder", "r2med_core.retrieval.dense", "r2med_core.systems")


@pytest.mark.parametrize("first", FIRST)
def test_each_module_imports_first_in_a_fresh_interpreter(first: str) -> None:
    others = ", ".join(repr(m) for m in FIRST)
    code = f"import importlib; importlib.import_module({first!r}); [importlib.import_module(m) for m in ({others})]"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
