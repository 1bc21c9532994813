"""``diagnose``, ``pool``, ``qrels``: what the team's relevance judgements change — why queries fail, which
unjudged documents to judge next, and the qrels with the team's judgements applied."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from r2med_core.cache import atomic_write_text
from r2med_core.cli._common import DATA_ERROR, UsageError, add_source, eta_bar, int_at_least, load
from r2med_core.data import DataError, Dataset, Problem
from r2med_core.runs import safe_name

if TYPE_CHECKING:
    from r2med_core.judging.annotations import AnnotationStore
    from r2med_core.runs import Run

#: The help of ``--run`` in every command here: each reads one or more runs made here or elsewhere.
RUN_HELP = "a TREC run, score JSON, a kit's folder, or eval's NAME.json (repeat for more runs)"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this group's subcommands to ``commands`` (an argparse subparsers action)."""
    di = commands.add_parser(
        "diagnose",
        help="class each run's failed queries with the answer oracle (a diagnostic), write TASK_RUN_queries.csv",
    )
    di.add_argument("--run", required=True, action="append", type=Path, help=RUN_HELP)
    add_source(di)
    di.add_argument("--oracle", default="oracle:bm25", help="oracle:RETRIEVER or oracle:RETRIEVER+q (default: BM25's)")
    di.add_argument(
        "--store", nargs="?", const="", metavar="TARGET",
        help="read the LLM judge's proposals from the annotation store (none: where the app keeps it)",
    )
    di.add_argument("--output-dir", required=True, type=Path)
    di.set_defaults(handler=cmd_diagnose)

    po = commands.add_parser("pool", help="pool the unjudged documents of the runs' top k (TREC-like or CSV)")
    po.add_argument("--run", required=True, action="append", type=Path, help=RUN_HELP)
    add_source(po)
    po.add_argument("--depth", type=int_at_least(1), default=10, help="the top k pooled per run (default 10)")
    po.add_argument("--output", required=True, type=Path, help="the pool to write (.csv: CSV, else qid 0 docid lines)")
    po.add_argument("--format", choices=("trec", "csv"), help="default: csv for a .csv file, else trec")
    po.add_argument(
        "--store", nargs="?", const="", metavar="TARGET",
        help="with the team's judgements in the annotation store: skip judged documents and print each run's "
        "metric without / with them and Judged@10 (none: where the app keeps it)",
    )
    po.add_argument("--metric", default="ndcg_at_10", help="with --store: the metric shown (default ndcg_at_10)")
    po.set_defaults(handler=cmd_pool)

    qr = commands.add_parser(
        "qrels", help="write the task's qrels with the team's judgements applied (team.team_qrels; TREC)"
    )
    add_source(qr)
    qr.add_argument("--store", metavar="TARGET", help="the annotation store (default: where the app keeps it)")
    qr.add_argument("--output", required=True, type=Path)
    qr.set_defaults(handler=cmd_qrels)

def _read_runs(paths: Sequence[Path], dataset: Dataset) -> dict[str, Run]:
    """Each ``--run`` (a run file, a kit's folder, or the NAME.json ``eval`` writes) checked against the
    dataset, keyed by its name; warnings go to stderr as ``evaluate-run`` prints them."""
    from r2med_core.imported_runs import read_run_or_results

    runs: dict[str, Run] = {}
    for path in paths:
        imported = read_run_or_results(path, dataset)
        for warning in imported.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        if imported.run.name in runs:
            raise UsageError(f"{path}: two runs are named {imported.run.name!r}; rename one of the files")
        runs[imported.run.name] = imported.run
    return runs


def _open_store(target: str | None) -> AnnotationStore:
    """``--store`` (a SQLite file or a postgresql:// URL), else where the app keeps labels
    (``R2MED_ANNOTATIONS_URL``, else ``annotations.sqlite`` in ``R2MED_DATA_HOME`` or the user data folder).
    A SQLite file that does not exist is an error, not a new empty store."""
    from r2med_core.judging.annotations import AnnotationStore, default_store_target

    where: str | Path = default_store_target() if not target else target
    if "://" not in str(where) and not Path(where).is_file():
        missing = "no annotation store (pass --store FILE or set R2MED_ANNOTATIONS_URL)"
        raise DataError([Problem(str(where), None, missing)])
    return AnnotationStore(where)


def _store_error(err: Exception) -> int:
    print(f"error: annotation store: {err}", file=sys.stderr)
    return DATA_ERROR


def cmd_diagnose(args: argparse.Namespace) -> int:
    from r2med_core.analysis.diagnosis import classed_queries, diagnose, judge_proposals, oracle_run
    from r2med_core.judging.stores import AnnotationStoreError

    if not args.oracle.startswith("oracle:"):
        raise UsageError(f"--oracle must be oracle:RETRIEVER or oracle:RETRIEVER+q, not {args.oracle!r}")
    dataset = load(args)
    runs = _read_runs(args.run, dataset)
    try:
        proposals = judge_proposals(_open_store(args.store), dataset) if args.store is not None else {}
    except AnnotationStoreError as err:
        return _store_error(err)
    progress, close = eta_bar()
    try:
        oracle = oracle_run(dataset, args.oracle, progress)
    finally:
        close()
    if oracle is None:
        print(f"note: {dataset.name} has no reference answers: the oracle cannot class its failures")
    if args.store is None:
        print("note: without --store no LLM judge proposals are read, so no query is 'possibly unjudged'")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, run in runs.items():
        found = diagnose(dataset, run, oracle, oracle=args.oracle, proposals=proposals)
        path = args.output_dir / f"{safe_name(dataset.name)}_{safe_name(name)}_queries.csv"
        atomic_write_text(path, classed_queries(dataset, run, found).to_csv(index=False))
        written.append(path)
        print(f"{name}: {found.n_failed} of {len(found.queries)} judged queries failed")
        for failure_class, count in found.counts().items():
            print(f"  {failure_class:<20} {count}")
    print(f"note: {found.caption()}")
    print(f"wrote {', '.join(map(str, written))}")
    return 0


def cmd_pool(args: argparse.Namespace) -> int:
    from r2med_core.evaluation import MAIN_METRICS
    from r2med_core.judging.pooling import DEFAULT_DEPTH, compare_with_team, pool, pool_csv, pool_text
    from r2med_core.judging.stores import AnnotationStoreError
    from r2med_core.judging.team import read_team_qrels

    if args.metric not in MAIN_METRICS:
        raise UsageError(f"--metric must be one of {', '.join(MAIN_METRICS)}, got {args.metric!r}")
    dataset = load(args)
    runs = _read_runs(args.run, dataset)
    team = None
    if args.store is not None:
        try:
            team = read_team_qrels(_open_store(args.store), dataset)
        except AnnotationStoreError as err:
            return _store_error(err)
    pooled = pool(runs, dataset.qrels if team is None else team.qrels, args.depth)
    as_csv = args.format == "csv" or (args.format is None and args.output.suffix.lower() == ".csv")
    atomic_write_text(args.output, pool_csv(pooled) if as_csv else pool_text(pooled))
    contributed, unique = pooled.contributed(), pooled.unique()
    width = max(len(name) for name in runs)
    print(f"{'system':<{width}}  pooled @{args.depth}  only it")
    for name in runs:
        print(f"{name:<{width}}  {contributed[name]:>10}  {unique[name]:>7}")
    if team is not None:
        table = compare_with_team(
            runs, dataset.qrels, team.qrels, metric=args.metric, k=DEFAULT_DEPTH, dataset_name=dataset.name
        )
        print(f"with the team's judgements (not the benchmark's qrels): {team.caption()}")
        judged = f"Judged@{DEFAULT_DEPTH}"
        print(f"{'system':<{width}}  {'without':>8}  {'with':>8}  {'rank':>7}  {judged:>9}  {judged + ' with':>14}")
        for row in table.to_dict("records"):
            rank = f"{row['rank_without']}→{row['rank_with']}"
            print(
                f"{row['system']:<{width}}  {row['without']:>8.4f}  {row['with']:>8.4f}  {rank:>7}  "
                f"{row['judged_without']:>9.4f}  {row['judged_with']:>14.4f}"
            )
        print(f"note: without / with: {args.metric}; rank 1 is the best")
    print(
        f"wrote {args.output} ({len(pooled)} unjudged document(s) in the top {args.depth} of {len(runs)} "
        f"system(s), over {len(pooled.docs)} judged quer{'y' if len(pooled.docs) == 1 else 'ies'})"
    )
    return 0


def cmd_qrels(args: argparse.Namespace) -> int:
    from r2med_core.judging.stores import AnnotationStoreError
    from r2med_core.judging.team import qrels_text, read_team_qrels

    dataset = load(args)
    try:
        team = read_team_qrels(_open_store(args.store), dataset)
    except AnnotationStoreError as err:
        return _store_error(err)
    atomic_write_text(args.output, qrels_text(team.qrels, str(args.output)))
    total = sum(len(grades) for grades in team.qrels.values())
    changed = len(team.changes)
    print(f"{dataset.name}: {total} judgements, {changed} added or changed by the team (not the benchmark's qrels)")
    print(f"  {team.caption()}")
    print(f"wrote {args.output}")
    return 0
