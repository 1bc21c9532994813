"""What a user does the second time, as whole processes side by side (issue 27).

Why: a cold run is paid once; a rerun with everything cached, a reopened dense index and the
tokenizer's choice of processes are paid every day. Each row runs ours and a reference as their own
processes, measured as process trees (wall time, CPU time of every process, peak memory summed over
every process; see :mod:`benchmarks.procs`), in interleaved pairs; the median ratio is printed next
to the load averages the runs started at.

Rows: a warm BM25 rerun (``eval --retriever bm25``, its run cached) vs bm25s loading the index it
saved and retrieving; reopening a cached dense index of ``--docs`` x 384 vectors and ranking one query
vs ``faiss.read_index`` and the same product; tokenizing ``--tokenize-docs`` texts with 2 worker
processes vs in one; and a cold ``eval --retriever bm25`` vs a raw bm25s process.

    python -m benchmarks.bench_warm                             # 30,000 docs × 30 queries
    python -m benchmarks.bench_warm --docs 357080 --queries 876 # all of R2MED's size (long)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.procs import Pairs, gib, interleaved, load_average

ROOT = Path(__file__).resolve().parent.parent
DIM, TOP_K = 384, 100
#: The cache key of the synthetic dense entry (never one a real corpus has).
_DENSE_KEY = {"benchmark": "bench_warm", "dim": DIM}


def _row(name: str, ours: str, reference: str, ratio: float, goal: float | None) -> str:
    verdict = "" if goal is None else f"  ≤ {goal:.1f}x  {'met' if ratio <= goal else 'NOT met'}"
    return f"{name:<46}{ours:>12}{reference:>12}{ratio:>9.2f}x{verdict}"


def _rows(title: str, pairs: Pairs, goals: dict[str, float | None]) -> list[str]:
    low, high = pairs.loads
    lines = [f"{title} (load {low:.1f}–{high:.1f}):"]
    for field, label in (("wall", "wall"), ("cpu", "CPU, all processes"), ("peak", "peak memory, all processes")):
        show = gib if field == "peak" else (lambda v: f"{v:.2f} s")
        ours, ref = show(pairs.median("a", field)), show(pairs.median("b", field))
        lines.append(_row(f"  {label}", ours, ref, pairs.ratio(field), goals.get(field)))
    return lines


# --------------------------------------------------------------------------- steps (child processes)


def step_dense_open(n_docs: int) -> None:
    """Ours: the cache entry through ``cached`` (its integrity check) and ``open_index``, one query."""
    from r2med_core.cache import cached
    from r2med_core.retrieval.dense import open_index

    def refuse(folder: Path) -> None:
        raise SystemExit("the dense entry is not cached: run the benchmark without --step first")

    index, ids = cached("dense", {**_DENSE_KEY, "n": n_docs}, refuse, open_index)
    _rank_one(index, ids)


def step_faiss_open(path: str) -> None:
    """The reference: ``faiss.read_index`` of the same file, the same query."""
    import faiss

    index = faiss.read_index(path)
    _rank_one(index, [str(i) for i in range(index.ntotal)])


def _rank_one(index: Any, ids: list[str]) -> None:
    """One query's top 100 by one product over every stored vector (as ``DenseRetriever`` ranks)."""
    import faiss
    import numpy as np

    n, dim = index.ntotal, index.d
    matrix = faiss.rev_swig_ptr(index.get_xb(), n * dim).reshape(n, dim)
    scores = matrix @ np.ones(dim, dtype=np.float32)
    print(len([ids[i] for i in np.argpartition(-scores, TOP_K)[:TOP_K]]))


def step_tokenize(folder: str, workers: int) -> None:
    from r2med_core.retrieval.tokenize import tokenize_to_ids

    with open(f"{folder}/corpus.jsonl", encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh if line.strip()]
    tokenize_to_ids(texts, workers=workers)


# --------------------------------------------------------------------------- rows


def bench_warm_bm25(folder: Path, n_docs: int, n: int, scratch: Path) -> list[str]:
    python = sys.executable
    cache, out, saved = scratch / "cache", scratch / "out", scratch / "bm25s-index"
    env = {**os.environ, "R2MED_CACHE_DIR": str(cache)}
    ours = [python, "-m", "r2med_core", "eval", "--retriever", "bm25", "--data-dir", str(folder)]
    ours += ["--output-dir", str(out)]
    print("  preparing: a first (cold) run of each …", file=sys.stderr, flush=True)
    subprocess.run(ours, env=env, cwd=ROOT, check=True, capture_output=True)
    reference = [python, "-m", "benchmarks.raw_bm25s", str(folder)]
    subprocess.run([*reference, "--save", str(saved)], cwd=ROOT, check=True, capture_output=True)
    pairs = interleaved(lambda: (ours, env), [*reference, "--load", str(saved)], n, str(ROOT))
    goals: dict[str, float | None] = {"wall": 1.0, "peak": 1.2 if n_docs >= 300_000 else None}
    return _rows(
        f"BM25 warm rerun (`eval --retriever bm25`, run cached) vs bm25s loading its saved index + retrieve, "
        f"{n_docs:,} docs",
        pairs,
        goals,
    )


def step_dense_build(n_docs: int) -> None:
    """The dense entry: ``n_docs`` random unit vectors in an ``IndexFlatIP``, as ``DenseRetriever`` writes."""
    import faiss
    import numpy as np

    from r2med_core.cache import cached

    def build(folder: Path) -> None:
        index = faiss.IndexFlatIP(DIM)
        rng = np.random.default_rng(0)
        for start in range(0, n_docs, 50_000):
            block = rng.standard_normal((min(50_000, n_docs - start), DIM), dtype=np.float32)
            index.add(block / np.linalg.norm(block, axis=1, keepdims=True))
        faiss.write_index(index, str(folder / "index.faiss"))
        (folder / "doc_ids.txt").write_text("\n".join(f"d{i}" for i in range(n_docs)), encoding="utf-8")

    cached("dense", {**_DENSE_KEY, "n": n_docs}, build, lambda folder: None)


def bench_dense_open(n_docs: int, n: int, scratch: Path) -> list[str]:
    env = {**os.environ, "R2MED_CACHE_DIR": str(scratch / "cache")}
    me = [sys.executable, "-m", "benchmarks.bench_warm"]
    print("  preparing: the dense cache entry …", file=sys.stderr, flush=True)
    # Built in a child: a parent that held the vectors would lend its peak memory to every child (Linux
    # carries ``ru_maxrss`` across fork and exec).
    subprocess.run([*me, "--step", "dense-build", "--docs", str(n_docs)], env=env, cwd=ROOT, check=True)
    [path] = (scratch / "cache" / "dense").glob("*/index.faiss")
    pairs = interleaved(
        lambda: ([*me, "--step", "dense-open", "--docs", str(n_docs)], env),
        [*me, "--step", "faiss-open", "--path", str(path)],
        n,
        str(ROOT),
    )
    title = f"reopen a cached {n_docs:,}×{DIM} dense index + rank one query vs `faiss.read_index` + the same"
    return _rows(title, pairs, {"wall": 1.1})


def bench_tokenize(folder: Path, n_docs: int, n: int) -> list[str]:
    me = [sys.executable, "-m", "benchmarks.bench_warm", "--step", "tokenize", "--path", str(folder)]
    pairs = interleaved([*me, "--workers", "2"], [*me, "--workers", "1"], n, str(ROOT))
    return _rows(f"tokenizing {n_docs:,} docs: 2 worker processes vs in this process (the default)", pairs, {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=30_000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--tokenize-docs", type=int, default=60_000, help="corpus size of the tokenizer row")
    parser.add_argument("--pairs", type=int, default=3, help="interleaved pairs per row (median reported)")
    parser.add_argument("--rows", default="warm,dense,tokenize,cold", help="which rows, comma-separated")
    steps = ["dense-build", "dense-open", "faiss-open", "tokenize"]
    parser.add_argument("--step", choices=steps, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.step == "dense-build":
        return step_dense_build(args.docs)
    if args.step == "dense-open":
        return step_dense_open(args.docs)
    if args.step == "faiss-open":
        return step_faiss_open(args.path)
    if args.step == "tokenize":
        return step_tokenize(args.path, args.workers)

    from benchmarks.bench_bm25_scale import ensure_task
    from benchmarks.bench_startup import bench_eval

    def task(n_docs: int, n_queries: int) -> Path:
        folder = Path(tempfile.gettempdir()) / f"r2med-synthetic-{n_docs}-{n_queries}-0"
        return ensure_task(folder, n_docs, n_queries, 0)

    rows = set(args.rows.split(","))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {cores} usable cores of {os.cpu_count()}, load average {load_average():.1f} at start")
    print(f"{'':<46}{'ours':>12}{'reference':>12}{'ratio':>10}  goal")
    scratch = Path(tempfile.mkdtemp(prefix="bench-warm-"))
    lines: list[str] = []
    if "warm" in rows:
        lines += bench_warm_bm25(task(args.docs, args.queries), args.docs, args.pairs, scratch / "warm")
    if "dense" in rows:
        lines += bench_dense_open(args.docs, args.pairs, scratch / "dense")
    if "tokenize" in rows:
        queries = max(1, args.tokenize_docs * args.queries // args.docs)
        lines += bench_tokenize(task(args.tokenize_docs, queries), args.tokenize_docs, args.pairs)
    if "cold" in rows:
        lines += bench_eval(task(args.docs, args.queries), args.docs, args.queries, args.pairs, goal=0.8)
    for line in lines:
        print(line, flush=True)
    print(f"(median of {args.pairs} interleaved pairs; ratios are ours / reference; load = 1-minute load average;")
    print(f" scratch caches in {scratch}, remove when done)")


if __name__ == "__main__":
    main()
