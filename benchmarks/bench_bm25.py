"""Time the BM25 engines side by side on a synthetic corpus (index + search, one process).

Why: the official engine must stay close to raw bm25s (target ≤ 1.5×) and far ahead of
rank_bm25 (target ≥ 40×), or the app's "BM25 (R2MED official)" default becomes the slow path.

    python -m benchmarks.bench_bm25 --docs 57000 --queries 100 --seed 0   # from the repo root
"""

from __future__ import annotations

import argparse
import os
import resource
import string
import time
from collections.abc import Callable

import numpy as np

from r2med_core.retrieval.bm25 import BM25Retriever
from r2med_core.retrieval.tokenize import clear_cache

K1, B, TOP_K = 0.9, 0.4, 100
# Real function words at the top of the Zipf ranking, so stop-word removal has work to do.
FUNCTION_WORDS = "the of and to in a is that for it as was with be by on not this are or".split()


def make_corpus(
    n_docs: int,
    n_queries: int,
    seed: int,
    query_words: tuple[int, int] = (4, 16),
    doc_words: tuple[int, int] = (80, 200),
) -> tuple[list[str], list[str]]:
    """Documents of ``doc_words`` words and queries of ``query_words`` words, drawn Zipf-like (s ≈ 1.1)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list(string.ascii_lowercase))
    n_vocab = 60_000
    lengths = rng.integers(3, 12, size=n_vocab)
    vocab = {"".join(rng.choice(letters, size=n)) for n in lengths}
    words = np.array(FUNCTION_WORDS + sorted(vocab), dtype=object)
    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    probs = ranks**-1.1
    probs /= probs.sum()

    def texts(lengths: np.ndarray) -> list[str]:
        # One draw for all texts: the same random stream as a draw per text, minus ~60k-entry
        # cumulative sums per text (which made a 357k-document corpus take minutes).
        chosen = words[rng.choice(len(words), size=int(lengths.sum()), p=probs)]
        out, start = [], 0
        for n_words in lengths.tolist():
            sentences = []
            for i in range(start, start + n_words, 15):
                sentence = " ".join(chosen[i : min(i + 15, start + n_words)])
                sentences.append(sentence[:1].upper() + sentence[1:] + ".")
            out.append(" ".join(sentences))
            start += n_words
        return out

    docs = texts(rng.integers(doc_words[0], doc_words[1] + 1, size=n_docs))
    queries = texts(rng.integers(query_words[0], query_words[1] + 1, size=n_queries))
    return docs, queries


Timing = tuple[float, float]  # (index seconds, search seconds)


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the tokenizer's worker processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


#: run name -> CPU seconds (all processes) of its fastest run, filled by :func:`best_of`.
CPU: dict[str, float] = {}


def best_of(fn: Callable[[], Timing], repeat: int, name: str = "") -> Timing:
    """Fastest of ``repeat`` runs (by total), each starting with cold tokenizer caches."""
    runs = []
    for _ in range(repeat):
        clear_cache()
        start = cpu_seconds()
        timing = fn()
        runs.append((timing, cpu_seconds() - start))
    timing, cpu = min(runs, key=lambda run: sum(run[0]))
    CPU[name] = cpu
    return timing


def run_engine(engine: str, doc_ids: list[str], docs: list[str], queries: list[str]) -> Timing:
    start = time.perf_counter()
    retriever = BM25Retriever(engine=engine, k1=K1, b=B)
    retriever.index(doc_ids, docs)
    indexed = time.perf_counter()
    retriever.search(queries, k=TOP_K)
    return indexed - start, time.perf_counter() - indexed


def run_raw_bm25s(docs: list[str], queries: list[str], threads: int = 0) -> Timing:
    """Raw bm25s as its README shows it: its tokenizer + PyStemmer, index, retrieve."""
    import bm25s
    import Stemmer

    start = time.perf_counter()
    stemmer = Stemmer.Stemmer("english")
    model = bm25s.BM25(k1=K1, b=B, method="lucene")
    model.index(bm25s.tokenize(docs, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    indexed = time.perf_counter()
    query_tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
    model.retrieve(query_tokens, k=min(TOP_K, len(docs)), show_progress=False, n_threads=threads)
    return indexed - start, time.perf_counter() - indexed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=57_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--query-words",
        type=int,
        nargs=2,
        default=(4, 16),
        metavar=("MIN", "MAX"),
        help="query length range; R2MED's rewritten (HyDE-style) queries run to a few hundred words",
    )
    parser.add_argument("--okapi-queries", type=int, default=10, help="queries rank_bm25 actually runs")
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs (not for rank_bm25)")
    args = parser.parse_args()

    q_min, q_max = args.query_words
    docs, queries = make_corpus(args.docs, args.queries, args.seed, (q_min, q_max))
    doc_ids = [f"d{i}" for i in range(len(docs))]
    n_words = sum(len(d.split()) for d in docs)
    print(f"corpus: {len(docs):,} docs, {n_words:,} words; {len(queries)} queries of {q_min}-{q_max} words")
    print(f"top-{TOP_K}, k1={K1}, b={B}")

    # Warm-up outside the timings: imports, regex compilation (~0.15 s once per process).
    run_engine("official", doc_ids[:200], docs[:200], queries[:2])
    run_raw_bm25s(docs[:200], queries[:2])

    official = best_of(lambda: run_engine("official", doc_ids, docs, queries), args.repeat, "official")
    bm25s_engine = best_of(lambda: run_engine("bm25s", doc_ids, docs, queries), args.repeat, "bm25s")
    raw = best_of(lambda: run_raw_bm25s(docs, queries), args.repeat, "raw")

    # rank_bm25: index everything, search a subsample, extrapolate the search linearly.
    n_okapi = max(1, min(args.okapi_queries, len(queries)))
    okapi_index, okapi_sample = best_of(lambda: run_engine("okapi", doc_ids, docs, queries[:n_okapi]), 1, "okapi")
    okapi = (okapi_index, okapi_sample * len(queries) / n_okapi)

    rows = [
        ("r2med_core official (Lucene tokens + gensim query weights)", official, CPU["official"]),
        ("r2med_core bm25s engine", bm25s_engine, CPU["bm25s"]),
        ("raw bm25s (its tokenize + index + retrieve)", raw, CPU["raw"]),
        ("rank_bm25 BM25Okapi (r2med_core okapi engine) *", okapi, float("nan")),
    ]
    print(f"\n{'engine':<58}{'index (s)':>11}{'search (s)':>12}{'total (s)':>11}{'CPU, all proc. (s)':>20}")
    for name, (t_index, t_search), cpu in rows:
        print(f"{name:<58}{t_index:>11.2f}{t_search:>12.3f}{t_index + t_search:>11.2f}{cpu:>20.2f}")
    print(
        f"\n* rank_bm25: indexed all {len(docs):,} docs; searched {n_okapi} of {len(queries)} queries "
        f"({okapi_sample:.2f} s) and extrapolated that linearly to {okapi[1]:.2f} s."
    )
    print(f"  Timings are best of {args.repeat} (rank_bm25: 1), tokenizer caches cleared before each run;")
    print(f"  CPU counts this process and its tokenizer worker processes; load average {os.getloadavg()[0]:.1f}.")

    def ratio(a: Timing, b: Timing) -> str:
        return f"total {sum(a) / sum(b):6.2f}x   index {a[0] / b[0]:6.2f}x   search {a[1] / b[1]:7.2f}x"

    print(f"\nours (official) / raw bm25s : {ratio(official, raw)}   (target: total <= 1.5x)")
    print(f"ours (bm25s)    / raw bm25s : {ratio(bm25s_engine, raw)}")
    print(f"rank_bm25       / ours      : {ratio(okapi, official)}   (target: >= 40x)")


if __name__ == "__main__":
    main()
