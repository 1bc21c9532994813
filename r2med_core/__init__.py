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

from .data import DEMO_TASKS, DataError, Dataset, Problem, load_beir_dir, load_demo, load_dir, load_r2med_dir
from .evaluation import ALL_METRICS, MAIN_METRICS, PairedTest, Results, compare, evaluate, paired_test
from .runs import Run, read_trec, write_trec
from .systems import SpecError, SystemSpec, parse_system, run_system
from .tasks import TASKS, Family, TaskInfo, get_task

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
