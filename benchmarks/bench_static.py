"""Static MiniLM (``static:minilm``, model2vec distilled from the offline MiniLM) against MiniLM itself:
encoding time on the same documents, the projection to all of R2MED, and the price in nDCG@10.

Each side encodes the same synthetic documents (``benchmarks.bench_bm25.make_corpus``, English-like,
at each length measured) through this project's chunked corpus encoder, in its own whole process;
the pairs run interleaved (``benchmarks.procs``) and every run prints the load average. The static
side encodes the documents ``--repeat`` times over (a lookup table finishes a few hundred documents
in milliseconds, too short to time). The ratio is per document, from each child's own encoding time;
whole-process times (imports and model load included) are printed beside it. The distillation runs
once, as its own process, into a fresh cache. Quality: nDCG@10 of both on the demo's three tasks
(the benchmark's metric, through ``evaluate``).

The projection to all of R2MED: its 357,080 documents (``r2med_core.tasks``) at the measured speed of
each length; the headline takes the slowest length (R2MED's per-task average lengths are not in this
project, so no mix of lengths is assumed).

    python -m benchmarks.bench_static                # measure and print
    python -m benchmarks.bench_static --write        # … and store r2med_core/retrieval/static_measured.json,
                                                     # the figures the app and the CLI show beside static:minilm
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

from benchmarks.bench_bm25 import make_corpus
from benchmarks.procs import Measurement, interleaved, measure
from r2med_core.tasks import TASKS

LENGTHS = (84, 150, 480)
ALL_DOCS = sum(task.n_documents for task in TASKS.values())


def _texts(words: int, docs: int) -> list[str]:
    spread = max(1, words // 10)
    texts, _ = make_corpus(docs, 1, seed=0, doc_words=(words - spread, words + spread))
    return texts


def child(side: str, words: int, docs: int, repeat: int) -> None:
    """Encode the documents as a run does (chunked corpus encoder) and print the encoding's own seconds."""
    from r2med_core.retrieval.dense import PRESETS, DenseRetriever
    from r2med_core.retrieval.encoding import discard_chunks, encode_corpus
    from r2med_core.retrieval.static import StaticRetriever

    texts = _texts(words, docs) * (repeat if side == "static" else 1)
    retriever = StaticRetriever("minilm") if side == "static" else DenseRetriever(PRESETS["minilm"], backend="torch")
    retriever.encode(texts[:8], "doc")  # the model loads outside the encoding's own time
    key = {"bench": side, "words": words, "at": time.time()}
    started, cpu = time.perf_counter(), time.process_time()
    encode_corpus(lambda batch: retriever.encode(batch, "doc"), texts, key)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    discard_chunks(key)
    print(json.dumps({"docs": len(texts), "seconds": seconds, "cpu_seconds": cpu}))


def distill_child() -> None:
    from r2med_core.retrieval.static import distilled_folder, provenance

    print(json.dumps(provenance(distilled_folder())))


def _command(cache: str, *args: str) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "R2MED_CACHE_DIR": cache, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    return [sys.executable, "-m", "benchmarks.bench_static", "--child", *args], env


def _speed(run: Measurement, clock: str = "seconds") -> float:
    """Documents per second of the child's own encoding, by its wall clock or by its CPU time."""
    out = json.loads(run.stdout.strip().splitlines()[-1])
    return out["docs"] / out[clock]


def quality(cache: str) -> dict[str, dict[str, float]]:
    """nDCG@10 of MiniLM and static MiniLM on each demo task (the distilled model from ``cache``)."""
    os.environ["R2MED_CACHE_DIR"] = cache
    from r2med_core import evaluate, load_demo, run_system
    from r2med_core.data import DEMO_TASKS

    out = {}
    for task in DEMO_TASKS:
        demo = load_demo(task)
        scores = {}
        for side, system in (("minilm", "minilm"), ("static", "static:minilm")):
            run = run_system(demo, system)
            scores[side] = round(evaluate(run, demo.qrels, dataset_name=demo.name).means["ndcg_at_10"], 4)
        out[task] = scores
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=96, help="documents per length (MiniLM encodes them once)")
    parser.add_argument("--repeat", type=int, default=100, help="times the static side encodes them over")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved pairs per length")
    parser.add_argument("--write", action="store_true", help="store the figures the app shows")
    parser.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        if args.child == ["distill"]:
            distill_child()
        else:
            side, words, docs, repeat = args.child
            child(side, int(words), int(docs), int(repeat))
        return

    cores = os.cpu_count() or 1
    loads = [os.getloadavg()[0]]
    print(f"load average at start (1/5/15 min): {'/'.join(f'{x:.1f}' for x in os.getloadavg())} on {cores} cores")
    with tempfile.TemporaryDirectory(prefix="r2med-bench-static-") as cache:
        distilled = measure(*_command(cache, "distill"))
        made = json.loads(distilled.stdout.strip().splitlines()[-1])
        loads.append(distilled.load)
        print(
            f"distilled from the offline MiniLM: {distilled.wall:.0f} s wall, {distilled.cpu:.0f} s CPU (load "
            f"{distilled.load:.1f}); vocabulary {made['vocabulary_size']:,}, {made['dimensions']} dimensions, "
            f"model2vec {made['model2vec']}"
        )
        rows = []
        for words in LENGTHS:
            pairs = interleaved(
                lambda w=words: _command(cache, "static", str(w), str(args.docs), str(args.repeat)),  # type: ignore[misc]
                lambda w=words: _command(cache, "minilm", str(w), str(args.docs), "1"),  # type: ignore[misc]
                n=args.rounds,
            )
            static_speed = statistics.median(_speed(run) for run in pairs.a)
            minilm_speed = statistics.median(_speed(run) for run in pairs.b)
            static_cpu = statistics.median(_speed(run, "cpu_seconds") for run in pairs.a)
            minilm_cpu = statistics.median(_speed(run, "cpu_seconds") for run in pairs.b)
            loads += [m.load for m in pairs.a + pairs.b]
            rows.append(
                {
                    "words": words,
                    "static_docs_per_s": round(static_speed, 1),
                    "minilm_docs_per_s": round(minilm_speed, 2),
                    "time_ratio": round(minilm_speed / static_speed, 5),
                    "static_docs_per_cpu_s": round(static_cpu, 1),
                    "minilm_docs_per_cpu_s": round(minilm_cpu, 2),
                    "cpu_ratio": round(minilm_cpu / static_cpu, 5),
                    "static_process_s": round(pairs.median("a", "wall"), 1),
                    "minilm_process_s": round(pairs.median("b", "wall"), 1),
                    "load": [round(x, 1) for x in pairs.loads],
                }
            )
            row = rows[-1]
            print(
                f"{words} words: static {static_speed:,.0f} docs/s, MiniLM {minilm_speed:.1f} docs/s -> "
                f"static takes {row['time_ratio']:.4f}x MiniLM's time per document "
                f"({row['cpu_ratio']:.4f}x its CPU time; {static_cpu:,.0f} vs {minilm_cpu:.1f} docs per CPU second) "
                f"(whole processes: static {row['static_process_s']} s for {args.docs * args.repeat:,} docs, "
                f"MiniLM {row['minilm_process_s']} s for {args.docs}; load {pairs.loads[0]:.1f}-{pairs.loads[1]:.1f})"
            )
        slowest = min(rows, key=lambda r: r["static_docs_per_s"])
        worst_ratio = max(r["time_ratio"] for r in rows)
        projection = {
            "documents": ALL_DOCS,
            "at_words": slowest["words"],
            "static_seconds": round(ALL_DOCS / slowest["static_docs_per_s"], 1),
            "minilm_seconds": round(ALL_DOCS / slowest["minilm_docs_per_s"], 1),
            "time_ratio": worst_ratio,
            # what the machine would do with one core to itself: the encoding's CPU time per document
            "static_cpu_seconds": round(ALL_DOCS / min(r["static_docs_per_cpu_s"] for r in rows), 1),
            "cpu_ratio": max(r["cpu_ratio"] for r in rows),
        }
        for row in rows:
            print(
                f"all of R2MED ({ALL_DOCS:,} documents) at {row['words']} words: static "
                f"{ALL_DOCS / row['static_docs_per_s'] / 60:.1f} min, MiniLM "
                f"{ALL_DOCS / row['minilm_docs_per_s'] / 3600:.1f} h"
            )
        print(
            f"headline (slowest length, {slowest['words']} words): static {projection['static_seconds'] / 60:.1f} min "
            f"for all of R2MED, {worst_ratio:.4f}x MiniLM's time (goal: <= 5 min, <= 0.02x); by CPU time "
            f"{projection['static_cpu_seconds'] / 60:.1f} min, {projection['cpu_ratio']:.4f}x MiniLM's"
        )
        tasks = quality(cache)
        mean = {side: round(statistics.mean(t[side] for t in tasks.values()), 4) for side in ("minilm", "static")}
        for task, scores in tasks.items():
            print(f"nDCG@10 on the demo's {task}: MiniLM {scores['minilm']:.3f}, static {scores['static']:.3f}")
        ratio = round(mean["static"] / mean["minilm"], 3)
        print(f"nDCG@10 over the demo's tasks: MiniLM {mean['minilm']:.3f}, static {mean['static']:.3f} ({ratio}x)")
    print(f"load average at the end: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.write:
        from r2med_core.retrieval.static import MEASURED_FILE

        data = {
            "written_by": "benchmarks/bench_static.py",
            "date": datetime.date.today().isoformat(),
            "machine": {"cores": cores, "load_min": round(min(loads), 1), "load_max": round(max(loads), 1)},
            "distill_seconds": round(distilled.wall, 1),
            "distill_cpu_seconds": round(distilled.cpu, 1),
            "distilled": {k: made[k] for k in ("pca_dims", "vocabulary_size", "dimensions", "model2vec")},
            "encode": {"documents_per_length": args.docs, "static_repeat": args.repeat, "lengths": rows},
            "projection": projection,
            "quality": {"metric": "ndcg_at_10", "tasks": tasks, **mean, "ratio": ratio},
        }
        MEASURED_FILE.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {MEASURED_FILE}")


if __name__ == "__main__":
    main()
