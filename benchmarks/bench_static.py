"""Static MiniLM (``static:minilm``, model2vec distilled from the offline MiniLM) against MiniLM itself:
encoding time on documents of each R2MED task's length, the projection to all of R2MED per task, and
the price in nDCG@10.

Documents: each of R2MED's 8 tasks has its own average length in characters (MTEB's descriptive
statistics, recorded in ``r2med_core/task_documents.json``); for each task the script cuts documents of
that length from the demo's medical English (about 4.5 characters a MiniLM token, as real prose; not
R2MED's text), so both models read as many tokens as they would on that task's average document.
Each side encodes them through this project's chunked corpus encoder, in its own whole process; the
pairs run interleaved (``benchmarks.procs``) and every run prints the load average. The static side
encodes the documents ``--repeat`` times over (a lookup table finishes a few dozen documents in
milliseconds, too short to time). Speeds are per document, from each child's own encoding, by wall
clock and by CPU time (the machine is shared: the CPU time is what the encoding itself costs);
whole-process times (imports and model load included) are printed beside them. The distillation runs
once, as its own process, into a fresh cache. Quality: nDCG@10 of both on the demo's three tasks (the
benchmark's metric, through ``evaluate``).

The projection to all of R2MED: each task's documents (``r2med_core.tasks``; MTEB's counts agree) at
the speed measured at its length, summed. An average length stands for a whole corpus: documents past
the models' limits (254 tokens, ≈ 1,100 characters) cost no more than the limit, so the projection of
the long tasks is if anything high.

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
from typing import Any

from benchmarks.procs import Measurement, interleaved, measure
from r2med_core.tasks import TASKS, corpus_lengths, corpus_lengths_source

ALL_DOCS = sum(task.n_documents for task in TASKS.values())
#: The goal: all of R2MED within this many seconds on the 2-core machine, at most this share of MiniLM's time.
GOAL_SECONDS, GOAL_RATIO = 300.0, 0.02


def _texts(chars: int, docs: int) -> list[str]:
    """``docs`` documents of ``chars`` characters (cut at a word), taken in turn from the demo's corpora."""
    from r2med_core import load_demo
    from r2med_core.data import DEMO_TASKS

    stream = " ".join(" ".join(load_demo(task).corpus.values()) for task in DEMO_TASKS).split()
    texts, at = [], 0
    for _ in range(docs):
        words: list[str] = []
        length = 0
        while length < chars:
            words.append(stream[at % len(stream)])
            length += len(words[-1]) + 1
            at += 1
        texts.append(" ".join(words)[:chars])
    return texts


def child(side: str, chars: int, docs: int, repeat: int) -> None:
    """Encode the documents as a run does (chunked corpus encoder) and print the encoding's own seconds."""
    from r2med_core.retrieval.dense import PRESETS, DenseRetriever
    from r2med_core.retrieval.encoding import discard_chunks, encode_corpus
    from r2med_core.retrieval.static import StaticRetriever

    texts = _texts(chars, docs) * (repeat if side == "static" else 1)
    retriever = StaticRetriever("minilm") if side == "static" else DenseRetriever(PRESETS["minilm"], backend="torch")
    retriever.encode(texts[:8], "doc")  # the model loads outside the encoding's own time
    key = {"bench": side, "chars": chars, "at": time.time()}
    started, cpu = time.perf_counter(), time.process_time()
    encode_corpus(lambda batch: retriever.encode(batch, "doc"), texts, key)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    discard_chunks(key)
    out: dict[str, Any] = {"docs": len(texts), "seconds": seconds, "cpu_seconds": cpu}
    if side == "static":  # how many tokens a document gave the model (at most its limit)
        model = retriever._encoder("doc").model
        out["tokens_read"] = statistics.mean(len(ids) for ids in model.tokenize(texts[:docs]))
        out["max_tokens"] = model.max_length
    print(json.dumps(out))


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
    parser.add_argument("--docs", type=int, default=48, help="documents per task (MiniLM encodes them once)")
    parser.add_argument("--repeat", type=int, default=100, help="times the static side encodes them over")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved pairs per task")
    parser.add_argument("--write", action="store_true", help="store the figures the app shows")
    parser.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        if args.child == ["distill"]:
            distill_child()
        else:
            side, chars, docs, repeat = args.child
            child(side, int(chars), int(docs), int(repeat))
        return

    cores = os.cpu_count() or 1
    loads = [os.getloadavg()[0]]
    lengths, source = corpus_lengths(), corpus_lengths_source()
    print(f"load average at start (1/5/15 min): {'/'.join(f'{x:.1f}' for x in os.getloadavg())} on {cores} cores")
    print(f"R2MED's corpora: {source['package']} {source['version']}, {source['files']}")
    with tempfile.TemporaryDirectory(prefix="r2med-bench-static-") as cache:
        distilled = measure(*_command(cache, "distill"))
        made = json.loads(distilled.stdout.strip().splitlines()[-1])
        loads.append(distilled.load)
        print(
            f"distilled from the offline MiniLM: {distilled.wall:.0f} s wall, {distilled.cpu:.0f} s CPU (load "
            f"{distilled.load:.1f}); vocabulary {made['vocabulary_size']:,}, {made['dimensions']} dimensions, "
            f"reads at most {made['max_tokens']} tokens, model2vec {made['model2vec']}"
        )
        rows = []
        for task, corpus in lengths.items():
            chars = round(corpus.average_characters)
            pairs = interleaved(
                lambda c=chars: _command(cache, "static", str(c), str(args.docs), str(args.repeat)),  # type: ignore[misc]
                lambda c=chars: _command(cache, "minilm", str(c), str(args.docs), "1"),  # type: ignore[misc]
                n=args.rounds,
            )
            static_speed = statistics.median(_speed(run) for run in pairs.a)
            minilm_speed = statistics.median(_speed(run) for run in pairs.b)
            static_cpu = statistics.median(_speed(run, "cpu_seconds") for run in pairs.a)
            minilm_cpu = statistics.median(_speed(run, "cpu_seconds") for run in pairs.b)
            read = json.loads(pairs.a[0].stdout.strip().splitlines()[-1])
            loads += [m.load for m in pairs.a + pairs.b]
            row = {
                "task": task,
                "documents": TASKS[task].n_documents,
                "characters": chars,
                "static_tokens_read": round(read["tokens_read"], 1),
                "static_docs_per_s": round(static_speed, 1),
                "minilm_docs_per_s": round(minilm_speed, 2),
                "time_ratio": round(minilm_speed / static_speed, 5),
                "static_docs_per_cpu_s": round(static_cpu, 1),
                "minilm_docs_per_cpu_s": round(minilm_cpu, 2),
                "cpu_ratio": round(minilm_cpu / static_cpu, 5),
                "static_cpu_seconds": round(TASKS[task].n_documents / static_cpu, 1),
                "static_seconds": round(TASKS[task].n_documents / static_speed, 1),
                "minilm_cpu_seconds": round(TASKS[task].n_documents / minilm_cpu, 1),
                "minilm_seconds": round(TASKS[task].n_documents / minilm_speed, 1),
                "static_process_s": round(pairs.median("a", "wall"), 1),
                "minilm_process_s": round(pairs.median("b", "wall"), 1),
                "load": [round(x, 1) for x in pairs.loads],
            }
            rows.append(row)
            print(
                f"{task} ({row['documents']:,} docs of {chars:,} characters; "
                f"static reads {row['static_tokens_read']:.0f} "
                f"tokens of each): static {static_cpu:,.0f} docs per CPU second ({static_speed:,.0f}/s wall), "
                f"MiniLM {minilm_cpu:.1f} ({minilm_speed:.1f}/s wall) -> {row['cpu_ratio']:.4f}x MiniLM's CPU time "
                f"({row['time_ratio']:.4f}x its wall time); the task: static {row['static_cpu_seconds'] / 60:.1f} min "
                f"CPU, MiniLM {row['minilm_cpu_seconds'] / 3600:.1f} h CPU (whole processes: static "
                f"{row['static_process_s']} s for {args.docs * args.repeat:,} docs, MiniLM {row['minilm_process_s']} s "
                f"for {args.docs}; load {pairs.loads[0]:.1f}-{pairs.loads[1]:.1f})"
            )
        total = {
            key: round(sum(r[key] for r in rows), 1)
            for key in ("static_cpu_seconds", "static_seconds", "minilm_cpu_seconds", "minilm_seconds")
        }
        projection = {
            "documents": ALL_DOCS,
            **total,
            "cpu_ratio": round(total["static_cpu_seconds"] / total["minilm_cpu_seconds"], 5),
            "time_ratio": round(total["static_seconds"] / total["minilm_seconds"], 5),
            "lengths": "each task's documents at its average length (MTEB's descriptive statistics)",
        }
        met = (
            "met" if total["static_cpu_seconds"] <= GOAL_SECONDS and projection["cpu_ratio"] <= GOAL_RATIO else "missed"
        )
        print(
            f"all of R2MED ({ALL_DOCS:,} documents, each task at its own length): static "
            f"{total['static_cpu_seconds'] / 60:.1f} min of CPU time, {projection['cpu_ratio']:.4f}x MiniLM's "
            f"({total['minilm_cpu_seconds'] / 3600:.1f} h) -> goal (<= {GOAL_SECONDS / 60:.0f} min, <= {GOAL_RATIO}x) "
            f"{met} by CPU time; by wall time at this load static {total['static_seconds'] / 60:.1f} min, "
            f"{projection['time_ratio']:.4f}x MiniLM's ({total['minilm_seconds'] / 3600:.1f} h)"
        )
        over = [r["task"] for r in rows if r["cpu_ratio"] > GOAL_RATIO]
        print(f"tasks over {GOAL_RATIO}x MiniLM's CPU time: {', '.join(over) or 'none'}")
        tasks = quality(cache)
        mean = {side: round(statistics.mean(t[side] for t in tasks.values()), 4) for side in ("minilm", "static")}
        for task, scores in tasks.items():
            print(f"nDCG@10 on the demo's {task}: MiniLM {scores['minilm']:.3f}, static {scores['static']:.3f}")
        ratio = round(mean["static"] / mean["minilm"], 3)
        print(f"nDCG@10 over the demo's tasks: MiniLM {mean['minilm']:.3f}, static {mean['static']:.3f} ({ratio}x)")
    loads.append(os.getloadavg()[0])
    print(f"load average at the end: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.write:
        from r2med_core.retrieval.static import MEASURED_FILE

        data = {
            "written_by": "benchmarks/bench_static.py",
            "date": datetime.date.today().isoformat(),
            "machine": {"cores": cores, "load_min": round(min(loads), 1), "load_max": round(max(loads), 1)},
            "distill_seconds": round(distilled.wall, 1),
            "distill_cpu_seconds": round(distilled.cpu, 1),
            "distilled": {k: made[k] for k in ("pca_dims", "max_tokens", "vocabulary_size", "dimensions", "model2vec")},
            "encode": {
                "documents_per_task": args.docs,
                "static_repeat": args.repeat,
                "lengths_source": source,
                "tasks": rows,
            },
            "projection": projection,
            "quality": {"metric": "ndcg_at_10", "tasks": tasks, **mean, "ratio": ratio},
        }
        MEASURED_FILE.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {MEASURED_FILE}")


if __name__ == "__main__":
    main()
