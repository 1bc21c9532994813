"""r2med_core's layers point one way: a module imports only from its own layer or the layers below it.

``LAYERS`` is the order, bottom first, and the one place it is written (docs/reference/layout.md
describes it and points here). Each entry names top-level modules or subpackages of r2med_core ("" is
the package's own lazy face). The foundations are one layer (the import-cycle test orders them among
themselves); above them each subpackage stands on the ones below: the engines (``llm``, ``retrieval``),
a team's judgements, the system kinds and their public face ``systems``, the shared server's policy
over them, reading results, putting them on paper, long work, and the command line on top.

Every ``import`` counts, at any depth (a function-local import is still an arrow: hiding one in a
function would not change which layer needs which), read from the source as the cycle test reads it.
A module no layer names fails too, so a new subpackage or foundation module is placed on purpose.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_import_cycles import MODULES, PACKAGE, import_lines

#: Bottom first. A module may import from its own layer and any layer listed before it.
LAYERS: tuple[tuple[str, ...], ...] = (
    (  # the foundations: data, tasks, runs, cache, settings, metrics … (what everything builds on)
        "progress",
        "settings",
        "tasks",
        "cache",
        "file_facts",
        "data",
        "hub",
        "runs",
        "intervals",
        "measures",
        "evaluation",
        "imported_runs",
    ),
    ("llm",),
    ("retrieval",),
    ("judging",),
    ("kinds",),
    ("systems",),
    ("server",),
    ("analysis",),
    ("reporting",),
    ("compute",),
    ("cli", "__main__", ""),
)


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of an r2med_core module (by its top-level module or subpackage)."""
    top = module.removeprefix("r2med_core").removeprefix(".").split(".")[0]
    for index, names in enumerate(LAYERS):
        if top in names:
            return index
    raise KeyError(f"{module} is in no layer: add {top!r} to LAYERS in {Path(__file__).name}")


def upward_imports(name: str, path: Path, source: str | None = None) -> list[str]:
    """``path:line: a -> b`` for each import of ``name`` that reaches a higher layer."""
    own = layer_of(name)
    return [
        f"{path.relative_to(PACKAGE.parent).as_posix()}:{line}: {name} (layer {own}) imports {target} "
        f"(layer {layer_of(target)})"
        for target, line in import_lines(name, path, source)
        if layer_of(target) > own
    ]


def test_every_module_has_a_layer() -> None:
    unplaced = []
    for name in MODULES:
        try:
            layer_of(name)
        except KeyError as err:
            unplaced.append(str(err.args[0]))
    assert not unplaced, "\n".join(unplaced)


def test_no_module_imports_from_a_higher_layer() -> None:
    found = [line for name, path in MODULES.items() for line in upward_imports(name, path)]
    assert not found, "upward imports:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "from r2med_core.analysis.published import RETRIEVER_NAMES\n",
        "def f():\n    from r2med_core.reporting import tables\n    return tables\n",
        "import r2med_core.cli\n",
    ],
)
def test_an_upward_import_is_caught_even_inside_a_function(source: str) -> None:
    """The check fails on an import from a higher layer at module level or hidden in a function."""
    name = "r2med_core.evaluation"
    found = upward_imports(name, MODULES[name], source)
    assert len(found) == 1 and found[0].startswith("r2med_core/evaluation.py:")


def test_an_import_from_below_or_beside_passes() -> None:
    name = "r2med_core.analysis.explore"
    source = "from r2med_core.evaluation import metric_label\nfrom r2med_core.analysis import published\n"
    assert upward_imports(name, MODULES[name], source) == []
