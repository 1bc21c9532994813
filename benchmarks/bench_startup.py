"""Startup and BM25 on a small machine: whole processes, side by side, as ratios (issue 17).

Why: on a shared 2-core machine what a user waits for is the whole ``python -m r2med_core …``
process — imports, tokenizer worker processes and all — so each side runs as its own process and
is measured as a process tree (wall time, CPU time of every process, peak memory summed over
every process; see :mod:`benchmarks.procs`). Pairs are interleaved and the median of ``--pairs``
ratios is printed next to the load average the runs started at.

    python -m benchmarks.bench_startup                           # 30,000 docs × 30 queries
    python -m benchmarks.bench_startup --docs 357080 --queries 876   # all of R2MED's size (long)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from benchmarks.procs import Pairs, gib, interleaved, load_average

ROOT = Path(__file__).resolve().parent.parent
ALL_DOCS = 357_080


def _row(name: str, ours: str, reference: str, ratio: float, goal: float, extra_ok: bool = True) -> str:
    verdict = "met" if ratio <= goal and extra_ok else "NOT met"
    return f"{name:<44}{ours:>12}{reference:>12}{ratio:>9.2f}x  ≤ {goal:.1f}x  {verdict}"


def _loads(pairs: Pairs) -> str:
    low, high = pairs.loads
    return f"load {low:.1f}–{high:.1f}"


def bench_help(n: int) -> list[str]:
    python = sys.executable
    help_pairs = interleaved([python, "-m", "r2med_core", "--help"], [python, "-c", "import bm25s"], n, str(ROOT))
    seconds = help_pairs.median("a", "wall")
    return [
        f"`python -m r2med_core --help` vs `python -c 'import bm25s'` ({_loads(help_pairs)}):",
        _row(
            f"  wall (ours {seconds:.2f} s; goal ≤ 1.5 s)",
            f"{seconds:.2f} s",
            f"{help_pairs.median('b', 'wall'):.2f} s",
            help_pairs.ratio("wall"),
            1.5,
            seconds <= 1.5,
        ),
        _row(
            "  CPU, all processes",
            f"{help_pairs.median('a', 'cpu'):.2f} s",
            f"{help_pairs.median('b', 'cpu'):.2f} s",
            help_pairs.ratio("cpu"),
            1.5,
        ),
    ]


def bench_eval(folder: Path, n_docs: int, n_queries: int, n: int, goal: float | None = None) -> list[str]:
    python = sys.executable
    scratch = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    runs = iter(range(10**6))

    def ours() -> tuple[list[str], dict[str, str]]:
        i = next(runs)
        env = {**os.environ, "R2MED_CACHE_DIR": str(scratch / f"cache-{i}")}  # cold: nothing cached
        command = ["-m", "r2med_core", "eval", "--retriever", "bm25", "--data-dir", str(folder)]
        return [python, *command, "--output-dir", str(scratch / f"out-{i}")], env

    pairs = interleaved(ours, [python, "-m", "benchmarks.raw_bm25s", str(folder)], n, str(ROOT))
    goal = goal or (1.0 if n_docs >= ALL_DOCS else 1.2)
    return [
        f"`eval --retriever bm25`, {n_docs:,} docs × {n_queries} queries, cold cache, vs a raw bm25s process "
        f"(its tokenizer, index + retrieve) ({_loads(pairs)}):",
        _row(
            "  wall",
            f"{pairs.median('a', 'wall'):.1f} s",
            f"{pairs.median('b', 'wall'):.1f} s",
            pairs.ratio("wall"),
            goal,
        ),
        _row(
            "  CPU, all processes (workers included)",
            f"{pairs.median('a', 'cpu'):.1f} s",
            f"{pairs.median('b', 'cpu'):.1f} s",
            pairs.ratio("cpu"),
            goal,
        ),
        f"{'  peak memory, all processes (no goal)':<44}{gib(pairs.median('a', 'peak')):>12}"
        f"{gib(pairs.median('b', 'peak')):>12}{pairs.ratio('peak'):>9.2f}x",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=30_000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairs", type=int, default=3, help="interleaved pairs per row (median reported)")
    parser.add_argument("--data-dir", type=Path, help="where the synthetic task is (or will be) written")
    parser.add_argument("--skip-eval", action="store_true", help="only the --help row")
    args = parser.parse_args()

    from benchmarks.bench_bm25_scale import ensure_task  # numpy and the package: not in the children

    folder = args.data_dir or Path(tempfile.gettempdir()) / f"r2med-synthetic-{args.docs}-{args.queries}-{args.seed}"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {cores} usable cores of {os.cpu_count()}, load average {load_average():.1f} at start")
    print(f"{'':<44}{'ours':>12}{'reference':>12}{'ratio':>10}  goal")
    for line in bench_help(args.pairs):
        print(line, flush=True)
    if not args.skip_eval:
        ensure_task(folder, args.docs, args.queries, args.seed)
        for line in bench_eval(folder, args.docs, args.queries, args.pairs):
            print(line, flush=True)
    print(f"(median of {args.pairs} interleaved pairs; ratios are ours / reference; load = 1-minute load average)")


if __name__ == "__main__":
    main()
