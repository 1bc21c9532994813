"""A sweep: every (task, retriever, rewrite) cell of a grid evaluated, each written as ``eval`` writes it.

``OUT/<task>/<system>.trec`` and ``OUT/<task>/<system>.json`` (the benchmark's results shape), and
``OUT/sweep.json`` listing the grid. The same cell function runs locally or as a Ray task
(``r2med_core.compute.distributed``), so the two paths cannot drift; the Leaderboard reads the folder back
with ``read_grid``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r2med_core.cache import atomic_write_text
from r2med_core.data import Dataset
from r2med_core.evaluation import Results, evaluate
from r2med_core.measures import find
from r2med_core.progress import Progress, notify
from r2med_core.reporting.provenance import Provenance, run_provenance, write_provenance
from r2med_core.runs import Run, safe_name, write_trec
from r2med_core.systems import SpecError, parse_system, run_system

if TYPE_CHECKING:
    import pandas as pd

SWEEP_FILE = "sweep.json"


@dataclass(frozen=True)
class Cell:
    """One system on one task."""

    task: str
    system: str


@dataclass
class SweepResult:
    """What a sweep wrote, and the cells it skipped (with why)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def plan_cells(
    datasets: dict[str, Dataset], retrievers: Iterable[str], rewrites: Iterable[str]
) -> tuple[list[Cell], list[str]]:
    """The grid: each retriever alone and on each rewrite the task has (a missing rewrite is a note)."""
    retrievers, rewrites = list(retrievers), list(rewrites)
    cells, notes = [], []
    for task, dataset in datasets.items():
        for retriever in retrievers:
            base = parse_system(retriever)  # SpecError names the accepted systems
            cells.append(Cell(task, str(base)))
            for rewrite in rewrites:
                method, _, llm = rewrite.partition(":")
                if (method, llm) not in dataset.rewrites:
                    notes.append(f"{task}: no {rewrite} rewrite, {base}+{rewrite} skipped")
                    continue
                cells.append(Cell(task, str(base.with_rewrite((method, llm)))))
    return cells, notes


def evaluate_cell(dataset: Dataset, system: str, top_k: int = 100) -> tuple[Run, Results]:
    """Run and evaluate one cell (what a local sweep and a Ray task both call)."""
    run = run_system(dataset, system, k=top_k)
    return run, evaluate(run, dataset.qrels, dataset_name=dataset.name, seconds=run.seconds)


def write_outputs(
    run: Run, results: Results, out: Path, name: str, provenance: Provenance | None = None
) -> tuple[Path, Path]:
    """``OUT/NAME.trec`` and ``OUT/NAME.json``, exactly as ``eval`` writes them, and with a
    provenance record ``OUT/NAME.provenance.json`` (the results file keeps the benchmark's shape)."""
    out.mkdir(parents=True, exist_ok=True)
    trec, payload_path = out / f"{name}.trec", out / f"{name}.json"
    write_trec(run, trec, tag=name)
    payload = results.to_json()
    payload["model_name"] = name
    atomic_write_text(payload_path, json.dumps(payload, indent=2) + "\n")
    if provenance is not None:
        write_provenance(provenance, payload_path)
    return trec, payload_path


CellRunner = Callable[[dict[str, Dataset], list[Cell], int], Iterator[tuple[Cell, Run, Results]]]


def local_cells(datasets: dict[str, Dataset], cells: list[Cell], top_k: int) -> Iterator[tuple[Cell, Run, Results]]:
    for cell in cells:
        yield (cell, *evaluate_cell(datasets[cell.task], cell.system, top_k))


def sweep(
    datasets: dict[str, Dataset],
    retrievers: Iterable[str],
    rewrites: Iterable[str],
    out: Path,
    *,
    top_k: int = 100,
    runner: CellRunner = local_cells,
    progress: Progress | None = None,
) -> SweepResult:
    """Evaluate the grid and write every cell's TREC run and results JSON, then ``sweep.json``."""
    cells, notes = plan_cells(datasets, retrievers, rewrites)
    result = SweepResult(notes=notes)
    for i, (cell, run, results) in enumerate(runner(datasets, cells, top_k)):
        name = safe_name(cell.system)
        record = run_provenance(datasets[cell.task], cell.system, wall_seconds=run.seconds, usage=run.usage)
        write_outputs(run, results, out / safe_name(cell.task), name, record)
        result.rows.append(
            {"task": cell.task, "system": cell.system, "file": f"{safe_name(cell.task)}/{name}.json"}
            | {m: round(v, 5) for m, v in sorted(results.means.items())}
        )
        notify(progress, (i + 1) / max(len(cells), 1), f"{cell.task} · {cell.system}")
    result.rows.sort(key=lambda r: (r["task"], r["system"]))
    atomic_write_text(out / SWEEP_FILE, json.dumps({"cells": result.rows, "notes": notes}, indent=2) + "\n")
    return result


def read_grid(folder: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The cells of a sweep folder (``sweep.json``), for the Leaderboard; problems come back as notes.

    Only the operator's configured folder is read (never a path from a visitor); files that are not
    a sweep's are reported, not trusted.
    """
    path = folder / SWEEP_FILE
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        cells = payload["cells"]
        if not isinstance(cells, list):
            raise TypeError("cells is not a list")
    except FileNotFoundError:
        return [], [f"no {SWEEP_FILE} in the sweep folder yet (run `python -m r2med_core sweep --output-dir …`)"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
        return [], [f"{SWEEP_FILE}: not a sweep summary ({err})"]
    rows, notes = [], []
    for i, cell in enumerate(cells, 1):
        try:
            row: dict[str, Any] = {"task": str(cell["task"]), "system": str(cell["system"])}
            # every metric the file holds, whichever the evaluator reported when it was written: a metric
            # added since (a new measure, a longer MAIN_METRICS) is absent from older cells, not a fault
            row |= {m: float(v) for m, v in cell.items() if m not in row and find(m) is not None}
            row |= {m: float(v) for m, v in cell.items() if m not in row and isinstance(v, (int, float))}
            if not any(find(m) is not None for m in row):
                raise ValueError("it holds no metric")
            parse_system(row["system"])
        except (KeyError, TypeError, ValueError, SpecError) as err:
            notes.append(f"{SWEEP_FILE}: cell {i} skipped ({err})")
            continue
        rows.append(row)
    return rows, notes


def sweep_table(rows: list[dict[str, Any]], metric: str, label: Callable[[str], str] = str) -> pd.DataFrame:
    """The grid as a table: one row per task, one column per system, the metric in the cells."""
    import pandas as pd

    frame = pd.DataFrame([r for r in rows if metric in r])
    if frame.empty:
        return pd.DataFrame(columns=["task"])
    frame["system"] = frame["system"].map(label)
    table = frame.pivot_table(index="task", columns="system", values=metric, aggfunc="first")
    return table.reset_index().rename_axis(columns=None)
