"""``eval``, ``evaluate-run``, ``compare-results``: score a system here, a run made elsewhere, or results
side by side. One group because all three end in the same metrics and results files."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from r2med_core.cli._common import DATA_ERROR, add_source, int_at_least, load, tqdm_progress
from r2med_core.data import Dataset
from r2med_core.llm.generation import attach_live_rewrites
from r2med_core.runs import safe_name

if TYPE_CHECKING:
    from r2med_core.systems import SystemSpec


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this group's subcommands to ``commands`` (an argparse subparsers action)."""
    ev = commands.add_parser(
        "eval", help="run a system on a task, write NAME.trec and NAME.json (exit 3 if an LLM reranking is incomplete)"
    )
    ev.add_argument(
        "--retriever",
        required=True,
        help="bm25 | bm25s | bm25-okapi | minilm | dense:<model id or path> | run:<name> | rrf(A,B) …",
    )
    add_source(ev)
    ev.add_argument("--rewrite", help="METHOD:LLM, a precomputed rewrite (e.g. hyde:gpt4)")
    ev.add_argument("--top-k", type=int_at_least(1), default=100, help="documents per query (default 100)")
    ev.add_argument(
        "--at-1000",
        action="store_true",
        help="retrieve the top 1000 and also score @1000, as the benchmark's first commit did for dense "
        "models (its published files are @100)",
    )
    ev.add_argument("--output-dir", required=True, type=Path)
    ev.add_argument("--run-name")
    ev.add_argument(
        "--rerank",
        metavar="MODEL",
        help="rerank the top k with a cross-encoder: bge-reranker, monobert, a hub id or path",
    )
    ev.add_argument(
        "--rerank-k", type=int_at_least(1), default=10, metavar="K", help="how many to rerank (benchmark: 10 or 100)"
    )
    ev.add_argument(
        "--rerank-keep-tail",
        action="store_true",
        help="keep the first-stage documents below the reranked k (not the benchmark's number: the "
        "benchmark's reranked run holds only the k documents)",
    )
    ev.set_defaults(handler=cmd_eval)

    er = commands.add_parser(
        "evaluate-run",
        help="print the results JSON of a run made elsewhere: TREC, {qid: {docid: score}} JSON (MTEB "
        "save_predictions), a kit's result folder holding one, or the NAME.json eval writes (its NAME.trec)",
    )
    er.add_argument("--run", required=True, type=Path)
    er.add_argument("--top-k", type=int_at_least(1), default=100, help="evaluate the top k per query (benchmark: 100)")
    add_source(er)
    er.set_defaults(handler=cmd_evaluate_run)

    cr = commands.add_parser(
        "compare-results",
        help="results JSON files side by side (made here or elsewhere), flagging where their provenance differs",
    )
    cr.add_argument("files", nargs="+", type=Path, metavar="NAME.json")
    cr.set_defaults(handler=cmd_compare_results)


def _rewrites_of(spec: SystemSpec) -> list[tuple[str, str]]:
    """Every (method, llm) rewrite a system uses, fusion members included."""
    own = [spec.rewrite] if spec.rewrite else []
    return own + [r for member in spec.members for r in _rewrites_of(member)]


def _left_out_notes(dataset: Dataset, spec: SystemSpec) -> list[str]:
    """One line per rewrite that leaves queries out (not retrieved, so not evaluated, as in the benchmark)."""
    from r2med_core.systems import queries_left_out

    notes = []
    for method, llm in dict.fromkeys(_rewrites_of(spec)):
        missing = queries_left_out(dataset, (method, llm))
        if missing:
            notes.append(
                f"{missing} of {len(dataset.queries)} queries are not in the {method}:{llm} rewrite file: "
                "not retrieved, so not evaluated (as in the benchmark)"
            )
    return notes


def cmd_eval(args: argparse.Namespace) -> int:
    from r2med_core.compute.sweep import write_outputs
    from r2med_core.evaluation import DEEP_CUTOFF, DEEP_METRICS, MAIN_METRICS, evaluate, published_metrics_note
    from r2med_core.reporting.provenance import run_provenance
    from r2med_core.retrieval.rerank import rerank, rerank_label
    from r2med_core.systems import dense_instruction_notes, parse_system, published_kind, run_system, system_words

    spec = parse_system(args.retriever + (f"+{args.rewrite}" if args.rewrite else ""))
    progress, close = tqdm_progress()
    try:
        dataset = load(args, progress)
        dataset, live_notes = attach_live_rewrites(dataset, _rewrites_of(spec))
        depth = DEEP_CUTOFF if args.at_1000 else 100
        run = run_system(dataset, spec, k=max(args.top_k, depth) if args.at_1000 else args.top_k, progress=progress)
        if args.rerank:
            run = rerank(run, dataset, args.rerank, k=args.rerank_k, keep_tail=args.rerank_keep_tail, progress=progress)
    finally:
        close()
    name = safe_name(args.run_name or (run.name if args.rerank else str(spec)))
    results = evaluate(run, dataset.qrels, dataset_name=dataset.name, depth=depth, seconds=run.seconds)
    out = Path(args.output_dir)
    record = run_provenance(dataset, str(spec), reranker=args.rerank, wall_seconds=run.seconds, usage=run.usage)
    write_outputs(run, results, out, name, record)  # the same files a sweep writes per cell
    label = system_words(str(spec), dataset)
    if args.rerank:
        label += f" → {rerank_label(args.rerank, args.rerank_k, args.rerank_keep_tail)}"
    print(f"{dataset.name} · {label} · {results.n_evaluated} queries evaluated")
    notes = [*live_notes, *_left_out_notes(dataset, spec), *dataset.report.lines(), *results.notes]
    for line in [*notes, *dense_instruction_notes(dataset, spec)]:
        print(f"note: {line}")
    if args.at_1000 and published_kind(spec) != "dense":
        print("note: @1000 is the benchmark's first-commit setting for dense models only, not for this system")
    for metric in (*MAIN_METRICS, *(DEEP_METRICS if args.at_1000 else ())):
        print(f"  {metric:<16} {results.means[metric]:.4f}")
    published = published_metrics_note("reranker" if args.rerank else published_kind(spec) or "")
    if published:
        print(f"note: {published} ({name}.json holds them all)")
    print(f"wrote {out / (name + '.trec')}, {out / (name + '.json')} and its provenance ({name}.provenance.json)")
    return 0


def cmd_evaluate_run(args: argparse.Namespace) -> int:
    from r2med_core.evaluation import evaluate
    from r2med_core.imported_runs import read_run_or_results

    dataset = load(args)
    imported = read_run_or_results(args.run, dataset)
    for warning in imported.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    results = evaluate(imported.run.truncated(args.top_k), dataset.qrels, dataset_name=dataset.name)
    for line in results.notes:
        print(f"note: {line}", file=sys.stderr)
    print(json.dumps(results.to_json(), indent=2))
    return 0


def cmd_compare_results(args: argparse.Namespace) -> int:
    from r2med_core.evaluation import MAIN_METRICS
    from r2med_core.reporting.provenance import ProvenanceError, comparability, read_results_file

    try:
        files = [read_results_file(path) for path in args.files]
    except ProvenanceError as err:
        print(f"error: {err}", file=sys.stderr)
        return DATA_ERROR
    width = max(len(f.model_name) for f in files)
    print(f"{'run':<{width}}  " + "  ".join(f"{m:>14}" for m in MAIN_METRICS))
    for item in files:
        cells = (f"{item.means[m]:>14.4f}" if m in item.means else f"{'–':>14}" for m in MAIN_METRICS)
        print(f"{item.model_name:<{width}}  " + "  ".join(cells))
    for line in comparability(files):
        print(f"warning: not directly comparable: {line}")
    return 0
