"""Dense top-100 search of all queries: r2med_core (FAISS IndexFlatIP) vs a plain numpy matmul.

Measures search only (embeddings are random unit vectors of the model's size), side by side in one
run, and prints the ratio. Target: r2med_core within 2x of numpy.

    python -m benchmarks.bench_dense --docs 57000 --queries 100 --dim 384
"""

from __future__ import annotations

import argparse
import time

import faiss
import numpy as np

from r2med_core.retrieval.dense import DenseRetriever, resolve_model


def _best(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=57_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    docs = rng.standard_normal((args.docs, args.dim)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = rng.standard_normal((args.queries, args.dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)

    retriever = DenseRetriever(resolve_model("minilm"))
    retriever.index = faiss.IndexFlatIP(args.dim)
    retriever.index.add(docs)
    retriever.doc_ids = [f"d{i}" for i in range(args.docs)]

    def ours() -> None:
        retriever.search_vectors(queries, args.k)

    def numpy_matmul() -> None:
        scores = queries @ docs.T
        top = np.argpartition(-scores, args.k, axis=1)[:, : args.k]
        rows = np.arange(len(queries))[:, None]
        order = np.argsort(-scores[rows, top], axis=1)
        ranked = top[rows, order]
        [[(retriever.doc_ids[p], float(scores[i, p])) for p in ranked[i]] for i in range(len(queries))]

    t_ours = _best(ours, args.repeats)
    t_numpy = _best(numpy_matmul, args.repeats)
    print(f"dense top-{args.k}: {args.docs:,} docs x {args.queries} queries, dim {args.dim} (best of {args.repeats})")
    print(f"  r2med_core (FAISS IndexFlatIP, ranked lists with ids): {t_ours * 1000:8.1f} ms")
    print(f"  numpy matmul + argpartition (same output):            {t_numpy * 1000:8.1f} ms")
    print(f"  ratio r2med_core / numpy: {t_ours / t_numpy:.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
