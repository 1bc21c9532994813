"""Corpus encoding on this machine: raw sentence-transformers vs r2med_core's chunked encoder on each
backend (torch, ONNX, ONNX int8), side by side in one run.

Prints documents/s and the speed ratio to raw sentence-transformers (synthetic documents of 80-200
words, the real tasks' length), and how often each backend's top 10 agrees with the torch top 10 on
the demo tasks' real queries (a backend may become the default only at >= 0.95 agreement and a win).

    python -m benchmarks.bench_encode --docs 512
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.bench_bm25 import make_corpus
from r2med_core.data import DEMO_TASKS, load_demo
from r2med_core.encoding import encode_corpus
from r2med_core.retrieval.dense import PRESETS, DenseRetriever, offline_model_path

BACKENDS = ("torch", "onnx", "onnx-int8")


def _timed(fn):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def top10_agreement(backend: str) -> float:
    """Mean share of each demo query's top 10 that the backend has in common with torch's."""
    shares = []
    for task in DEMO_TASKS:
        dataset = load_demo(task)
        texts, queries = list(dataset.corpus.values()), list(dataset.queries.values())
        tops = []
        for name in ("torch", backend):
            retriever = DenseRetriever(PRESETS["minilm"], backend=name)
            docs, q = retriever.encode(texts, "doc"), retriever.encode(queries, "query")
            tops.append(np.argsort(-(q @ docs.T), axis=1, kind="stable")[:, :10])
        shares += [len(set(a) & set(b)) / 10 for a, b in zip(*tops)]
    return float(np.mean(shares))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best of each is kept")
    args = parser.parse_args()

    texts, _ = make_corpus(args.docs, 1, seed=0)
    from sentence_transformers import SentenceTransformer

    raw = SentenceTransformer(offline_model_path(), device="cpu")
    ours = {b: DenseRetriever(PRESETS["minilm"], batch_size=args.batch_size, backend=b) for b in BACKENDS}
    encoders = {"raw sentence-transformers": lambda: raw.encode(texts, batch_size=args.batch_size)}
    for backend, retriever in ours.items():
        retriever.encode(texts[:8], "doc")  # load (and export, once) outside the timing
        encoders[f"r2med_core {backend}"] = lambda r=retriever, b=backend: encode_corpus(
            lambda batch: r.encode(batch, "doc"), texts, {"bench": b, "docs": args.docs, "at": time.time()}
        )
    raw.encode(texts[:8])
    best = dict.fromkeys(encoders, float("inf"))
    for _ in range(args.rounds):  # interleaved, so a busy moment of a shared machine hits every encoder
        for name, fn in encoders.items():
            best[name] = min(best[name], _timed(fn)[1])
    print(
        f"{args.docs} synthetic documents (80-200 words), MiniLM-L6-v2, batch {args.batch_size}, CPU, "
        f"best of {args.rounds} interleaved rounds"
    )
    print(f"{'encoder':<30}{'docs/s':>10}{'vs raw ST':>11}{'top-10 agreement':>18}")
    reference = best["raw sentence-transformers"]
    for name, seconds in best.items():
        backend = name.rsplit(" ", 1)[-1]
        agreement = "-" if backend not in BACKENDS else f"{1.0 if backend == 'torch' else top10_agreement(backend):.3f}"
        print(f"{name:<30}{args.docs / seconds:>10.1f}{reference / seconds:>11.2f}{agreement:>18}")


if __name__ == "__main__":
    main()
