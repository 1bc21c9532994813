"""``python -m r2med_core``: evaluate systems, score imported runs, validate and download data.

A contract other tools rely on: bad input prints ``error: …`` naming the file and line and exits
non-zero — never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .data import DEMO_TASKS, DataError, Dataset, load_demo, load_dir, validate_dir
from .evaluation import MAIN_METRICS, evaluate
from .hub import DownloadError, download_task, load_hf
from .progress import Progress
from .runs import read_trec, safe_name, write_trec
from .systems import SpecError, parse_system, run_system
from .tasks import TASKS, get_task

DATA_ENV = "R2MED_DATA_DIR"


class UsageError(Exception):
    """A command line that cannot be carried out; the message says how to fix it."""


def _tqdm_progress() -> tuple[Progress, Callable[[], None]]:
    from tqdm.auto import tqdm

    bar = tqdm(total=1000, unit="‰", file=sys.stderr, leave=False, bar_format="{desc} {bar} {percentage:3.0f}%")

    def progress(fraction: float, message: str) -> None:
        bar.set_description_str(message[:70])
        bar.update(int(fraction * 1000) - bar.n)

    return progress, bar.close


def _add_source(parser: argparse.ArgumentParser, *, demo: bool = True) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--task", help=f"an R2MED task ({', '.join(TASKS)})")
    source.add_argument("--data-dir", type=Path, help="a local folder in the R2MED or BEIR layout")
    if demo:
        source.add_argument("--demo", choices=DEMO_TASKS, help="an embedded demo task")
    parser.add_argument("--hf", action="store_true", help="with --task: download from the Hugging Face hub")


def _task_dir(task: str) -> Path | None:
    root = os.environ.get(DATA_ENV)
    if root and (Path(root) / task).is_dir():
        return Path(root) / task
    return None


def _load(args: argparse.Namespace, progress: Progress | None = None) -> Dataset:
    if getattr(args, "demo", None):
        return load_demo(args.demo)
    if args.data_dir is not None:
        return load_dir(args.data_dir)
    info = get_task(args.task)
    local = _task_dir(info.name)
    if local is not None and not args.hf:
        return load_dir(local, name=info.name)
    if not args.hf:
        raise UsageError(
            f"no local copy of {info.name}: add --hf to load it from the Hugging Face hub, pass "
            f"--data-dir, or set {DATA_ENV} to a folder holding {info.name}/"
        )
    return load_hf(info.name, progress=progress)


def cmd_eval(args: argparse.Namespace) -> int:
    spec = parse_system(args.retriever + (f"+{args.rewrite}" if args.rewrite else ""))
    progress, close = _tqdm_progress()
    try:
        dataset = _load(args, progress)
        run = run_system(dataset, spec, k=args.top_k, progress=progress)
    finally:
        close()
    name = safe_name(args.run_name or str(spec))
    results = evaluate(run, dataset.qrels, dataset_name=dataset.name, seconds=run.seconds)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_trec(run, out / f"{name}.trec", tag=name)
    payload = results.to_json()
    payload["model_name"] = name
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"{dataset.name} · {spec.label} · {results.n_evaluated} queries evaluated")
    for line in dataset.report.lines():
        print(f"note: {line}")
    for metric in MAIN_METRICS:
        print(f"  {metric:<16} {results.means[metric]:.4f}")
    print(f"wrote {out / (name + '.trec')} and {out / (name + '.json')}")
    return 0


def cmd_evaluate_run(args: argparse.Namespace) -> int:
    dataset = _load(args)
    run = read_trec(args.run)
    unknown = {doc for ranking in run.rankings.values() for doc, _ in ranking} - set(dataset.corpus)
    if unknown:
        print(f"note: {len(unknown)} documents in the run are not in {dataset.name}'s corpus", file=sys.stderr)
    results = evaluate(run, dataset.qrels, dataset_name=dataset.name)
    print(json.dumps(results.to_json(), indent=2))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    if args.data_dir is not None:
        target = args.data_dir
    else:
        info = get_task(args.task)
        target = _task_dir(info.name) or (download_task(info.name) if args.hf else None)
        if target is None:
            raise UsageError(f"no local copy of {info.name}: pass --data-dir, add --hf, or set {DATA_ENV}")
    errors, warnings = validate_dir(target)
    for problem in errors:
        print(f"error: {problem}", file=sys.stderr)
    for warning in warnings:
        print(f"warning: {warning}")
    if errors:
        print(f"{target}: {len(errors)} error(s)", file=sys.stderr)
        return 1
    print(f"{target}: OK")
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    names = list(TASKS) if args.task.lower() == "all" else [get_task(args.task).name]
    for name in names:
        folder = download_task(name)
        print(f"{name}: {folder}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m r2med_core", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    ev = commands.add_parser("eval", help="run a system on a task, write NAME.trec and NAME.json")
    ev.add_argument(
        "--retriever", required=True, help="bm25 | bm25s | bm25-okapi | minilm | dense:<model id or path> | rrf(A,B) …"
    )
    _add_source(ev)
    ev.add_argument("--rewrite", help="METHOD:LLM, a precomputed rewrite (e.g. hyde:gpt4)")
    ev.add_argument("--top-k", type=int, default=100)
    ev.add_argument("--output-dir", required=True, type=Path)
    ev.add_argument("--run-name")
    ev.set_defaults(handler=cmd_eval)

    er = commands.add_parser("evaluate-run", help="print the results JSON of an existing TREC run file")
    er.add_argument("--run", required=True, type=Path)
    _add_source(er)
    er.set_defaults(handler=cmd_evaluate_run)

    va = commands.add_parser("validate", help="check a dataset folder; exit 1 with file:line messages")
    _add_source(va, demo=False)
    va.set_defaults(handler=cmd_validate)

    dl = commands.add_parser("download", help="fetch tasks from the Hugging Face hub into the HF cache")
    dl.add_argument("--task", required=True, help="a task name or All")
    dl.set_defaults(handler=cmd_download)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except DataError as err:
        for problem in err.problems[:50]:
            print(f"error: {problem}", file=sys.stderr)
        return 1
    except (SpecError, DownloadError, UsageError, KeyError, OSError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {message}", file=sys.stderr)
        return 2
