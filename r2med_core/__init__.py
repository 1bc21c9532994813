"""r2med_core: load R2MED tasks, retrieve with BM25 / dense / fused systems, evaluate like the benchmark.

The small public API (everything else is an implementation detail):

    from r2med_core import load_demo, run_system, evaluate
    dataset = load_demo("clinical-evidence")
    run = run_system(dataset, "bm25")
    results = evaluate(run, dataset.qrels, dataset_name=dataset.name)
    results.means["ndcg_at_10"]

Each kind of system (BM25, dense, fusion, imported run, rerank, answer oracle) is one class in
``kinds`` found through a registry; ``systems`` is their public face.
Concerns with their own modules: ``generation`` (live LLM rewriting), ``rerank`` (cross-encoders),
``annotations`` (failure labels), ``published`` (the paper's numbers), ``hub`` (downloads).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> submodule: imported on first use, so ``python -m r2med_core --help`` and the app's first
# page do not pay for scipy, pandas and nltk before they need them.
_LAZY = {
    **dict.fromkeys(
        ["DEMO_TASKS", "DataError", "Dataset", "Problem", "load_beir_dir", "load_demo", "load_dir", "load_r2med_dir"],
        "data",
    ),
    **dict.fromkeys(
        ["ALL_METRICS", "MAIN_METRICS", "PairedTest", "Results", "compare", "evaluate", "paired_test"], "evaluation"
    ),
    **dict.fromkeys(["Run", "read_trec", "write_trec"], "runs"),
    **dict.fromkeys(["SpecError", "SystemSpec", "parse_system", "run_system"], "systems"),
    **dict.fromkeys(["TASKS", "Family", "TaskInfo", "get_task"], "tasks"),
}

if TYPE_CHECKING:
    from r2med_core.data import (
        DEMO_TASKS,
        DataError,
        Dataset,
        Problem,
        load_beir_dir,
        load_demo,
        load_dir,
        load_r2med_dir,
    )
    from r2med_core.evaluation import ALL_METRICS, MAIN_METRICS, PairedTest, Results, compare, evaluate, paired_test
    from r2med_core.runs import Run, read_trec, write_trec
    from r2med_core.systems import SpecError, SystemSpec, parse_system, run_system
    from r2med_core.tasks import TASKS, Family, TaskInfo, get_task


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "ALL_METRICS",
    "DEMO_TASKS",
    "MAIN_METRICS",
    "TASKS",
    "DataError",
    "Dataset",
    "Family",
    "PairedTest",
    "Problem",
    "Results",
    "Run",
    "SpecError",
    "SystemSpec",
    "TaskInfo",
    "compare",
    "evaluate",
    "get_task",
    "load_beir_dir",
    "load_demo",
    "load_dir",
    "load_r2med_dir",
    "paired_test",
    "parse_system",
    "read_trec",
    "run_system",
    "write_trec",
]
