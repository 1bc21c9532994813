"""The package's shape: ``r2med_core`` keeps only foundations and public faces at its top, every
subpackage says what it offers, and the core never imports Streamlit (the app is ``r2med_app``).

The regroup put each feature in a subpackage by concern; these checks keep the next feature from
landing at the top by habit, and keep each ``__init__``'s account of its modules true.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import r2med_app
import r2med_core

from .test_layers import LAYERS

CORE = Path(r2med_core.__file__).parent
APP = Path(r2med_app.__file__).parent
#: What may sit at the top of r2med_core: the lazy API, the CLI entry, and the foundations most imports
#: point at (a new feature goes into a subpackage, or a new one with an ``__init__`` that says what it is).
#: Read from the layer table (``test_layers.LAYERS``), the one list of them: its names that are modules.
FOUNDATIONS = {
    name or "__init__" for layer in LAYERS for name in layer if not name or not (CORE / name / "__init__.py").is_file()
}


def _packages(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("__init__.py") if "demo" not in p.parts)


def test_the_top_of_r2med_core_holds_only_foundations() -> None:
    top = {p.stem for p in CORE.glob("*.py")}
    assert top == FOUNDATIONS, f"new at the top: {sorted(top - FOUNDATIONS)}; gone: {sorted(FOUNDATIONS - top)}"


@pytest.mark.parametrize("package", _packages(CORE)[1:] + _packages(APP), ids=lambda p: p.name)
def test_every_subpackage_says_what_each_of_its_modules_offers(package: Path) -> None:
    """Each public module and subpackage is named (``name``) in its package's docstring."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    members = {p.stem for p in package.glob("*.py") if not p.stem.startswith("_")}
    members |= {p.name for p in package.iterdir() if (p / "__init__.py").exists() and not p.name.startswith("_")}
    if package.name in {"kinds", "pages", "panels"}:  # one file per kind / page / part: the folder is the list
        members = set()
    missing = sorted(m for m in members if f"``{m}``" not in doc)
    assert doc and not missing, f"{package.relative_to(package.parents[1])}/__init__.py does not name {missing}"


def test_the_core_never_imports_streamlit() -> None:
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.split(".")[0] == "streamlit" for n in names), path
