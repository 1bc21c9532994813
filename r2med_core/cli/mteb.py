"""``mteb-export``, ``mteb-results``: results that travel to and from MTEB. One group because both speak
MTEB's file formats (``reporting.mteb_files``); a predictions file made by ``mteb run`` is a run that
``evaluate-run`` and the app's run import already read."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from r2med_core.cli._common import UsageError, add_source, int_at_least, load, tqdm_progress


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this group's subcommands to ``commands`` (an argparse subparsers action)."""
    ex = commands.add_parser(
        "mteb-export",
        help="run a system on a task and write MTEB's <TaskName>.json (result) and <TaskName>_predictions.json",
    )
    ex.add_argument("--retriever", required=True, help="any system name, as for eval (bm25, minilm, run:<name> …)")
    add_source(ex)
    ex.add_argument("--top-k", type=int_at_least(1), default=100, help="documents per query (default 100)")
    ex.add_argument("--output-dir", required=True, type=Path)
    ex.set_defaults(handler=cmd_mteb_export)

    rs = commands.add_parser(
        "mteb-results",
        help="read MTEB result files (from mteb run, or mteb-export) as leaderboard rows; a bad file is refused "
        "naming file and field",
    )
    rs.add_argument("files", nargs="+", type=Path, metavar="TaskName.json")
    rs.add_argument("--metric", default="ndcg_at_10", help="the column to show (our name; default ndcg_at_10)")
    rs.set_defaults(handler=cmd_mteb_results)


def cmd_mteb_export(args: argparse.Namespace) -> int:
    from r2med_core.evaluation import evaluate
    from r2med_core.reporting.mteb_files import write_mteb_files
    from r2med_core.reporting.provenance import run_provenance
    from r2med_core.systems import parse_system, run_system

    spec = parse_system(args.retriever)
    progress, close = tqdm_progress()
    try:
        dataset = load(args, progress)
        run = run_system(dataset, spec, k=args.top_k, progress=progress)
    finally:
        close()
    results = evaluate(run, dataset.qrels, dataset_name=dataset.name, depth=args.top_k, seconds=run.seconds)
    record = run_provenance(dataset, str(spec), wall_seconds=run.seconds, usage=run.usage)
    paths = write_mteb_files(
        run, results, dataset, str(spec), args.output_dir, depth=args.top_k, provenance=record.to_json()
    )
    print(f"{dataset.name} · {spec.label} · ndcg_at_10 {results.means['ndcg_at_10']:.4f}")
    print(f"wrote {paths[0]} and {paths[1]}")
    return 0


def cmd_mteb_results(args: argparse.Namespace) -> int:
    from r2med_core.analysis.published import normalise_metric
    from r2med_core.data import DataError, Problem
    from r2med_core.reporting.mteb_files import mteb_result_board, read_mteb_result

    try:
        metric = normalise_metric(args.metric)
    except ValueError as err:
        raise UsageError(str(err)) from None
    files = []
    for path in args.files:
        if not path.is_file():
            raise DataError([Problem(str(path), None, "file not found")])
        files.append(read_mteb_result(path.read_bytes(), str(path)))
    board = mteb_result_board(files, metric)
    for label, row in board.iterrows():
        value = "–" if row[metric] != row[metric] else f"{row[metric]:.2f}"
        print(f"{label}\t{row['task']}\t{metric} {value}\tmteb {row['mteb_version'] or '–'}\t{row['data']}")
    print(f"note: {metric} × 100 as each file holds it; not re-scored here", file=sys.stderr)
    return 0
