"""BM25 at the size of all of R2MED (357,080 documents × 876 queries): ours next to raw bm25s.

Why: issue 12 asks ``eval --retriever bm25`` on all of R2MED to take ≤ 120 s and ≤ 4 GiB on 2 cores,
with search at least as fast as raw bm25s's. Each measurement runs in its own process (cold caches,
its own memory), one after the other in this run; CPU time and peak memory are those of the whole
process tree, tokenizer workers included (see :mod:`benchmarks.procs`). The whole-process ratio
against a raw bm25s process, as interleaved pairs, is ``benchmarks.bench_startup``'s.

    python -m benchmarks.bench_bm25_scale                      # writes the corpus on first use
    python -m benchmarks.bench_bm25_scale --docs 60000 --queries 118
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_bm25 import K1, TOP_K, B, run_raw_bm25s
from benchmarks.procs import gib, load_average, measure
from benchmarks.synthetic import ALL_DOCS, ALL_QUERIES

GOAL_SECONDS, GOAL_BYTES = 120.0, 4 * 2**30


# --------------------------------------------------------------------------- steps (child processes)


def _load(data_dir: Path) -> tuple[list[str], list[str], list[str]]:
    from r2med_core.data import load_dir

    dataset = load_dir(data_dir)
    return list(dataset.corpus), list(dataset.corpus.values()), list(dataset.queries.values())


def step_ours(data_dir: Path) -> dict[str, float]:
    """Our official engine: parallel Lucene-identical tokenization, index, threaded search."""
    from r2med_core.retrieval.bm25 import BM25Retriever

    doc_ids, texts, queries = _load(data_dir)
    start = time.perf_counter()
    retriever = BM25Retriever(engine="official", k1=K1, b=B)
    retriever.index(doc_ids, texts)
    indexed = time.perf_counter()
    retriever.search(queries, k=TOP_K)
    return {"index": indexed - start, "search": time.perf_counter() - indexed}


def step_raw(data_dir: Path, threads: int) -> dict[str, float]:
    """Raw bm25s (``threads`` = its ``retrieve(n_threads=…)``, 0 = its default)."""
    _, texts, queries = _load(data_dir)
    index_seconds, search_seconds = run_raw_bm25s(texts, queries, threads)
    return {"index": index_seconds, "search": search_seconds}


# --------------------------------------------------------------------------- driver


def ensure_task(folder: Path, n_docs: int, n_queries: int, seed: int) -> Path:
    """The synthetic task in ``folder``, written once per (docs, queries, seed)."""
    stamp = folder / "synthetic.json"
    wanted = {"docs": n_docs, "queries": n_queries, "seed": seed}
    if stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        return folder
    print(f"writing a synthetic task of {n_docs:,} documents and {n_queries} queries to {folder} …", flush=True)
    # In a child process: Linux carries a process's peak memory (``ru_maxrss``) across fork and exec, so
    # a parent that held the corpus would lend its size to every process it then measures.
    command = [sys.executable, "-m", "benchmarks.synthetic", "--docs", str(n_docs), "--queries", str(n_queries)]
    subprocess.run([*command, "--seed", str(seed), "--out", str(folder)], check=True, stdout=subprocess.DEVNULL)
    stamp.write_text(json.dumps(wanted))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=ALL_DOCS)
    parser.add_argument("--queries", type=int, default=ALL_QUERIES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, help="where the synthetic task is (or will be) written")
    parser.add_argument("--step", choices=["ours", "raw"], help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = args.data_dir or Path(tempfile.gettempdir()) / f"r2med-synthetic-{args.docs}-{args.queries}-{args.seed}"

    if args.step:  # a child: measure one engine, print JSON
        result = step_ours(folder) if args.step == "ours" else step_raw(folder, args.threads)
        print(json.dumps(result))
        return

    ensure_task(folder, args.docs, args.queries, args.seed)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = load_average()
    print(f"corpus: {args.docs:,} docs × {args.queries} queries (synthetic, R2MED layout) in {folder}")
    print(f"machine: {cores} cores usable, load average {load:.1f} at start; top-{TOP_K}, k1={K1}, b={B}\n")

    me = [sys.executable, "-m", "benchmarks.bench_bm25_scale", "--data-dir", str(folder)]
    rows: dict[str, tuple[float, float, int, float]] = {}
    for name, extra in [
        ("ours (official: Lucene tokens + gensim query weights)", ["--step", "ours"]),
        ("raw bm25s (its tokenizer + index + retrieve)", ["--step", "raw"]),
        (f"raw bm25s, retrieve with n_threads={cores}", ["--step", "raw", "--threads", str(cores)]),
    ]:
        run = measure([*me, *extra])
        times = json.loads(run.stdout.strip().splitlines()[-1])
        rows[name] = (times["index"], times["search"], run.peak, run.cpu)
        print(f"  measured {name}: index {times['index']:.1f} s, search {times['search']:.2f} s", flush=True)

    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out_dir:
        env = {**os.environ, "R2MED_CACHE_DIR": cache}  # cold: nothing cached yet
        command = [sys.executable, "-m", "r2med_core", "eval", "--retriever", "bm25"]
        eval_run = measure([*command, "--data-dir", str(folder), "--output-dir", out_dir], env)
    eval_seconds, eval_peak = eval_run.wall, eval_run.peak

    print(f"\n{'':<56}{'index (s)':>10}{'search (s)':>12}{'CPU, all proc.':>16}{'peak, all proc.':>17}")
    for name, (t_index, t_search, peak, cpu) in rows.items():
        print(f"{name:<56}{t_index:>10.1f}{t_search:>12.2f}{cpu:>14.1f} s{gib(peak):>17}")
    print(
        f"\n`python -m r2med_core eval --retriever bm25` end to end (load, index, search, evaluate, write; "
        f"cold cache): {eval_seconds:.1f} s, CPU {eval_run.cpu:.1f} s, peak {gib(eval_peak)} (all processes; "
        f"load {eval_run.load:.1f} at its start)"
    )

    ours, raw, raw_threads = rows.values()
    print(
        f"\nours / raw bm25s            : index {ours[0] / raw[0]:5.2f}x   search {ours[1] / raw[1]:5.2f}x   "
        f"index+search {(ours[0] + ours[1]) / (raw[0] + raw[1]):5.2f}x"
    )
    print(f"ours / raw bm25s ({cores} threads): search {ours[1] / raw_threads[1]:5.2f}x")
    checks = [
        (f"eval ≤ {GOAL_SECONDS:.0f} s", eval_seconds <= GOAL_SECONDS),
        ("eval ≤ 4 GiB", eval_peak <= GOAL_BYTES),
        ("index + search ≤ 120 s", ours[0] + ours[1] <= GOAL_SECONDS),
        ("search ≤ raw bm25s", ours[1] <= raw[1]),
    ]
    print("goals: " + "   ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in checks))


if __name__ == "__main__":
    main()
