"""Time a saved comparison report at R2MED's size: the all-pairs tests, the HTML file and its size.

Why: the Compare and Metrics pages build the report when a download button is clicked, and the user
waits for the file; the tests (pairs x metrics randomization tests) are most of that wait. The paired
randomization test resamples in array operations; this prints it side by side with resampling one
statistic at a time (what it did before), on the same data, with the machine's load average.

    python -m benchmarks.bench_report                       # 4 systems, 600 queries, 6 metrics
    python -m benchmarks.bench_report --systems 5 --queries 876
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
from scipy import stats

from benchmarks.synthetic import write_task
from r2med_core import MAIN_METRICS, evaluate, load_dir
from r2med_core.reporting.saved_report import Report, ReportSystem
from r2med_core.runs import Run


def _random_run(name: str, query_ids: list[str], doc_ids: list[str], seed: int) -> Run:
    rng = np.random.default_rng(seed)
    return Run(
        name,
        {
            q: [(doc_ids[int(d)], float(100 - i)) for i, d in enumerate(rng.choice(len(doc_ids), 100, replace=False))]
            for q in query_ids
        },
    )


def _one_by_one(x: np.ndarray, y: np.ndarray) -> float:
    """The sign-flip test as paired_test ran it before: one statistic call per resample."""
    return stats.permutation_test(
        (x, y),
        lambda u, v: np.mean(v - u),
        permutation_type="samples",
        n_resamples=10_000,
        alternative="two-sided",
        random_state=np.random.default_rng(0),
    ).pvalue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--systems", type=int, default=4)
    parser.add_argument("--queries", type=int, default=600)
    parser.add_argument("--docs", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        dataset = load_dir(write_task(folder, args.docs, args.queries))
    queries, docs = list(dataset.queries), list(dataset.corpus)
    # random rankings with the gold documents of some queries near the top, so systems differ
    systems = []
    for s in range(args.systems):
        run = _random_run(f"system-{s}", queries, docs, s)
        boosted = {
            q: [*((d, 1000.0) for d in dataset.positives(q)), *r][:100] if i % (s + 2) == 0 else r
            for i, (q, r) in enumerate(run.rankings.items())
        }
        run = Run(run.name, {q: list(dict(r).items()) for q, r in boosted.items()})
        systems.append(ReportSystem(run.name, run.name, run, evaluate(run, dataset.qrels)))
    report = Report(dataset, systems, metrics=MAIN_METRICS)
    started = time.perf_counter()
    report.latex()
    tests_s = time.perf_counter() - started
    started = time.perf_counter()
    text = report.html()
    html_s = time.perf_counter() - started
    pairs = args.systems * (args.systems - 1) // 2
    a, b = systems[0].results.per_query["ndcg_at_10"], systems[1].results.per_query["ndcg_at_10"]
    x, y = a.to_numpy(float), b.reindex(a.index).to_numpy(float)
    started = time.perf_counter()
    old_p = _one_by_one(x, y)
    old_s = time.perf_counter() - started
    per_test = tests_s / (pairs * len(MAIN_METRICS))
    load = os.getloadavg()
    print(f"{args.systems} systems x {args.queries} queries, {pairs} pairs x {len(MAIN_METRICS)} metrics")
    print(f"all-pairs tests            {tests_s:8.2f} s  ({per_test * 1000:.0f} ms a test)")
    print(f"HTML report (after tests)  {html_s:8.2f} s  ({len(text.encode()) / 2**20:.1f} MB)")
    print(
        f"one test, one by one       {old_s * 1000:8.0f} ms  vs {per_test * 1000:.0f} ms vectorized: "
        f"{old_s / per_test:.1f}x (p = {old_p:.4g})"
    )
    print(f"load average               {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
