"""Corpus encoding on this machine: raw sentence-transformers vs r2med_core's chunked encoder on each
backend (torch, ONNX, ONNX int8), side by side in one run, next to the machine's physical limit.

Prints documents/s, the speed ratios to raw sentence-transformers and to the torch path, the process
CPU time, the load average of every round, how often each backend's top 10 agrees with torch's on
the demo tasks' real queries, and the time a 60k-document task and all 357,080 R2MED documents would
take at that speed. The physical limit is the model's FLOPs per document (from its config and the
measured documents' token counts: ~2 x weights x tokens + the attention products) over this
machine's measured float32 matmul throughput. int8 is timed only when >= 95 % of its top-10 lists
are identical to torch's (otherwise it cannot be the default, and timing it costs minutes).

    python -m benchmarks.bench_encode --docs 2000 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from benchmarks.bench_bm25 import make_corpus
from r2med_core.data import DEMO_TASKS, load_demo
from r2med_core.retrieval.dense import PRESETS, DenseRetriever, offline_model_path
from r2med_core.retrieval.encoding import discard_chunks, encode_corpus, format_seconds
from r2med_core.retrieval.hardware import record_backend_speeds, resolve_backend

BACKENDS = ("torch", "onnx", "onnx-int8")
TASK_DOCS = {"60k-document task": 60_000, "all R2MED (357,080 docs)": 357_080}
#: A backend may become the default only when at least this share of its top-10 lists is torch's.
IDENTICAL_NEEDED = 0.95


@dataclass
class Timing:
    """Best wall time over the rounds, with that round's process CPU time."""

    wall: float = float("inf")
    cpu: float = 0.0
    rounds: list[tuple[float, float]] = field(default_factory=list)

    def add(self, wall: float, cpu: float) -> None:
        self.rounds.append((wall, cpu))
        if wall < self.wall:
            self.wall, self.cpu = wall, cpu


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def matmul_gflops(n: int = 2048, repeats: int = 5) -> float:
    """Best float32 matmul throughput of torch and numpy on this machine (all their threads), GFLOP/s."""
    import torch

    best = 0.0
    a, b = np.random.default_rng(0).standard_normal((2, n, n), dtype=np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    for fn in (lambda: a @ b, lambda: ta @ tb):
        fn()
        for _ in range(repeats):
            started = time.perf_counter()
            fn()
            best = max(best, 2 * n**3 / (time.perf_counter() - started) / 1e9)
    return best


def flops_per_doc(config: object, tokens: np.ndarray) -> float:
    """Mean FLOPs of one document through a BERT-style encoder: per layer and token, the Q/K/V/output
    projections (4 h^2 weights) and the feed-forward (2 h i), 2 FLOPs per weight, plus the attention
    products QK^T and AV (2 x 2 s h per token for a length-s document)."""
    layers, hidden = config.num_hidden_layers, config.hidden_size  # type: ignore[attr-defined]
    inter = config.intermediate_size  # type: ignore[attr-defined]
    s = tokens.astype(np.float64)
    per_doc = layers * (2 * (4 * hidden**2 + 2 * hidden * inter) * s + 4 * s**2 * hidden)
    return float(per_doc.mean())


def agreement(backends: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """Per backend: (mean share of each demo query's top 10 shared with torch's, share of queries whose
    top-10 list is identical to torch's, in order)."""
    overlap: dict[str, list[float]] = {b: [] for b in backends}
    identical: dict[str, list[bool]] = {b: [] for b in backends}
    for task in DEMO_TASKS:
        dataset = load_demo(task)
        texts, queries = list(dataset.corpus.values()), list(dataset.queries.values())
        tops = {}
        for name in ("torch", *backends):
            retriever = DenseRetriever(PRESETS["minilm"], backend=name)
            docs, q = retriever.encode(texts, "doc"), retriever.encode(queries, "query")
            tops[name] = np.argsort(-(q @ docs.T), axis=1, kind="stable")[:, :10]
        for name in backends:
            overlap[name] += [len(set(a) & set(b)) / 10 for a, b in zip(tops["torch"], tops[name])]
            identical[name] += [list(a) == list(b) for a, b in zip(tops["torch"], tops[name])]
    return {b: (float(np.mean(overlap[b])), float(np.mean(identical[b]))) for b in backends}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--words", type=int, default=200, help="mean document length in words (±10 %%)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best of each is kept")
    args = parser.parse_args()

    print(f"load average at start (1/5/15 min): {_load()} on {os.cpu_count()} cores")
    agrees = agreement(BACKENDS[1:])
    timed = [b for b in BACKENDS if b != "onnx-int8" or agrees[b][1] >= IDENTICAL_NEEDED]
    spread = max(1, args.words // 10)
    texts, _ = make_corpus(args.docs, 1, seed=0, doc_words=(args.words - spread, args.words + spread))
    from sentence_transformers import SentenceTransformer

    raw = SentenceTransformer(offline_model_path(), device="cpu")
    tokens = np.array(
        [len(ids) for ids in raw.tokenizer(texts, truncation=True, max_length=raw.max_seq_length)["input_ids"]]
    )
    ours = {b: DenseRetriever(PRESETS["minilm"], batch_size=args.batch_size, backend=b) for b in timed}
    encoders: dict[str, Callable[[], object]] = {
        "raw sentence-transformers": lambda: raw.encode(texts, batch_size=args.batch_size)
    }
    for backend, retriever in ours.items():
        retriever.encode(texts[:8], "doc")  # load (and export, once) outside the timing

        def run(r: DenseRetriever = retriever, b: str = backend) -> None:
            key = {"bench": b, "docs": args.docs, "at": time.time()}
            encode_corpus(lambda batch: r.encode(batch, "doc"), texts, key)
            discard_chunks(key)

        encoders[f"r2med_core {backend}"] = run
    raw.encode(texts[:8])
    gflops_before = matmul_gflops()
    best = {name: Timing() for name in encoders}
    for round_no in range(1, args.rounds + 1):  # interleaved: a busy moment of a shared machine hits all
        for name, fn in encoders.items():
            load = _load()
            wall, cpu = _timed(fn)
            best[name].add(wall, cpu)
            print(f"round {round_no}: {name:<28} {wall:7.1f} s wall, {cpu:7.1f} s CPU, load before {load}")
    gflops = max(gflops_before, matmul_gflops())
    per_doc = flops_per_doc(raw[0].auto_model.config, tokens)
    limit = gflops * 1e9 / per_doc  # documents/s if every FLOP ran at matmul speed

    print()
    print(
        f"{args.docs} synthetic documents of {args.words - spread}-{args.words + spread} words "
        f"({tokens.mean():.0f} tokens each on average, max {raw.max_seq_length}), MiniLM-L6-v2, "
        f"batch {args.batch_size}, CPU, best of {args.rounds} interleaved rounds; load average now {_load()}"
    )
    record_backend_speeds({b: args.docs / best[f"r2med_core {b}"].wall for b in timed})
    print(f"'auto' resolves to {resolve_backend('auto', 'cpu')} here (this run's speeds are kept for it)")
    header = f"{'encoder':<28}{'docs/s':>8}{'vs raw':>8}{'vs torch':>9}{'CPU/wall':>9}{'top10 ∩':>9}{'top10 ≡':>9}"
    print(header + "".join(f"{name:>26}" for name in TASK_DOCS))
    reference, torch_wall = best["raw sentence-transformers"].wall, best["r2med_core torch"].wall
    for name, timing in best.items():
        backend = name.rsplit(" ", 1)[-1]
        share, same = (1.0, 1.0) if backend == "torch" else agrees.get(backend, (float("nan"),) * 2)
        cells = ("-", "-") if backend not in BACKENDS else (f"{share:.3f}", f"{same:.3f}")
        rate = args.docs / timing.wall
        print(
            f"{name:<28}{rate:>8.1f}{reference / timing.wall:>8.2f}{torch_wall / timing.wall:>9.2f}"
            f"{timing.cpu / timing.wall:>9.2f}{cells[0]:>9}{cells[1]:>9}"
            + "".join(f"{format_seconds(n / rate):>26}" for n in TASK_DOCS.values())
        )
    print(
        f"{'physical limit':<28}{limit:>8.1f}{reference / (args.docs / limit):>8.2f}"
        f"{torch_wall / (args.docs / limit):>9.2f}{'':>27}"
        + "".join(f"{format_seconds(n / limit):>26}" for n in TASK_DOCS.values())
    )
    print(
        f"physical limit: {per_doc / 1e9:.2f} GFLOP per document (MiniLM: {raw[0].auto_model.config.num_hidden_layers} "
        f"layers, hidden {raw[0].auto_model.config.hidden_size}, intermediate "
        f"{raw[0].auto_model.config.intermediate_size}) over {gflops:.1f} GFLOP/s float32 matmul measured here"
    )
    for backend in BACKENDS[1:]:
        if backend not in timed:
            share, same = agrees[backend]
            print(
                f"{backend}: not timed, {same:.1%} of its top-10 lists are torch's (needs {IDENTICAL_NEEDED:.0%}); "
                f"mean top-10 overlap {share:.3f}"
            )


if __name__ == "__main__":
    main()
