"""``python -m r2med_core``: evaluate systems, score imported runs, validate and download data.

A contract other tools rely on: bad input prints ``error: …`` naming the file and line and exits
non-zero — never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r2med_core.cache import atomic_write_text, cache_root, entry_path
from r2med_core.data import DEMO_TASKS, DataError, Dataset, Problem, load_demo, load_dir, validate_dir
from r2med_core.hub import DownloadError, ModelUnavailable, download_task, load_hf
from r2med_core.kinds.roles import cache_kinds
from r2med_core.llm.generation import (
    GENERATION_METHODS,
    LAMER_PASSAGES,
    Endpoint,
    GenerationError,
    LocalEndpoint,
    attach_live_rewrites,
    check_llm_name,
    generate_rewrites,
    rewrite_file,
    save_rewrites,
)
from r2med_core.llm.llm_rerank import RerankIncomplete
from r2med_core.llm.prompts import PROMPT_SETS, Prompts, load_examples
from r2med_core.progress import Progress
from r2med_core.retrieval.dense import PRESETS
from r2med_core.retrieval.hardware import DeviceError
from r2med_core.runs import safe_name
from r2med_core.settings import ENCODE_BACKENDS, load_settings
from r2med_core.tasks import TASKS, get_task

# Commands import what they run (systems, evaluation, sweep, rerank pull in scipy, pandas, nltk …)
# inside their function, so ``--help`` and a usage error answer at once.
if TYPE_CHECKING:
    from r2med_core.judging.annotations import AnnotationStore
    from r2med_core.runs import Run
    from r2med_core.systems import SystemSpec

DATA_ENV = "R2MED_DATA_DIR"


class UsageError(Exception):
    """A command line that cannot be carried out; the message says how to fix it."""


#: The exit status of a command whose LLM work did not finish because of the endpoint (a wrong key,
#: a server error, an unreachable server, malformed or oversized replies). What finished is cached,
#: so running the same command again resumes.
LLM_INCOMPLETE = 3


def _llm_incomplete(summary: str, problem: str) -> int:
    """Say what an unfinished LLM job did and why it stopped, the same way for every command."""
    print(summary)
    print(f"error: {problem}", file=sys.stderr)
    return LLM_INCOMPLETE


def _int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer ≥ ``low`` (argparse then exits 2 with the message)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text[:40]!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def _finite(low: float, *, strict: bool) -> Callable[[str], float]:
    """An argparse type: a finite number > ``low`` (``strict``) or ≥ ``low``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
        if not math.isfinite(value) or value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(f"must be a finite number {'>' if strict else '≥'} {low:g}, got {text!r}")
        return value

    return parse


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
    parser.add_argument(
        "--revision",
        help="with --hf: the hub commit (or 'main') to load; default: the task's pinned commit (as MTEB pins it)",
    )


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
    return load_hf(info.name, revision=getattr(args, "revision", None), progress=progress)


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
    from r2med_core.systems import dense_instruction_notes, parse_system, published_kind, run_system

    spec = parse_system(args.retriever + (f"+{args.rewrite}" if args.rewrite else ""))
    progress, close = _tqdm_progress()
    try:
        dataset = _load(args, progress)
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
    if args.rerank:
        label = f"{spec.label} → {rerank_label(args.rerank, args.rerank_k, args.rerank_keep_tail)}"
    else:
        label = spec.label
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
    from r2med_core.server.imported_runs import read_run_or_results

    dataset = _load(args)
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
        return 1
    width = max(len(f.model_name) for f in files)
    print(f"{'run':<{width}}  " + "  ".join(f"{m:>14}" for m in MAIN_METRICS))
    for item in files:
        cells = (f"{item.means[m]:>14.4f}" if m in item.means else f"{'–':>14}" for m in MAIN_METRICS)
        print(f"{item.model_name:<{width}}  " + "  ".join(cells))
    for line in comparability(files):
        print(f"warning: not directly comparable: {line}")
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


def _endpoint(args: argparse.Namespace) -> Endpoint | LocalEndpoint:
    if args.model.startswith("local:"):
        return LocalEndpoint(
            args.model[len("local:") :] or "smollm2", args.temperature or 0.0, min(args.max_tokens or 256, 256)
        )
    endpoint = Endpoint.from_env(
        args.model,
        base_url=args.base_url,
        temperature=args.temperature,
        top_p=args.top_p,
        max_tokens=args.max_tokens,
        timeout=args.timeout,
    )
    if endpoint.api_key is None and endpoint.base_url is None:
        raise UsageError("no API key: set OPENAI_API_KEY, or pass --base-url for a server that needs no key")
    return endpoint


def _prompts(args: argparse.Namespace) -> Prompts:
    """The prompt set; query2doc's few-shot examples from ``--examples FILE`` (official prompts only)."""
    if args.examples is None:
        return Prompts(args.prompts)
    if args.prompts != "official":
        raise UsageError("--examples goes with the official prompts (--prompts official)")
    if not args.examples.is_file():
        raise UsageError(f"{args.examples}: examples file not found")
    data = args.examples.read_bytes()
    return Prompts(args.prompts, load_examples(data, str(args.examples), load_settings().upload_max_bytes))


def cmd_generate(args: argparse.Namespace) -> int:
    from r2med_core.systems import run_system

    endpoint = _endpoint(args)
    llm_name = check_llm_name(args.llm_name or endpoint.default_llm_name())
    prompts = _prompts(args)
    progress, close = _tqdm_progress()
    try:
        dataset = _load(args, progress)
        first_stage = run_system(dataset, args.first_stage, k=LAMER_PASSAGES) if args.method == "lamer" else None
        wanted = list(dataset.queries)[: args.limit] if args.limit else None
        print(f"prompts: {prompts.describe(args.method, dataset.name, dataset.family)}")
        if isinstance(endpoint, Endpoint):
            print("sampling: " + ", ".join(f"{k}={v}" for k, v in endpoint.sampling().items()))
        result = generate_rewrites(
            dataset,
            args.method,
            endpoint,
            llm_name=llm_name,
            first_stage=first_stage,
            progress=progress,
            max_retries=args.max_retries,
            workers=args.workers,
            query_ids=wanted,
            prompts=prompts,
        )
    except KeyboardInterrupt:
        print("error: interrupted; run the same command again to resume (finished queries are cached)", file=sys.stderr)
        return 130
    finally:
        close()
    problem = result.problem()
    if problem:
        return _llm_incomplete(result.summary(), problem)
    print(result.summary())
    target = args.output or Path("rewrites") / safe_name(dataset.name)
    path = target if target.suffix == ".jsonl" else rewrite_file(target, args.method, llm_name)
    save_rewrites(result.texts, dataset, path)
    print(f"wrote {path} ({len(result.texts)} queries); evaluate with --rewrite {args.method}:{llm_name}")
    return 0


def _eta_bar(unit: str = "docs") -> tuple[Progress, Callable[[], None]]:
    """A tqdm bar whose remaining time comes from the fraction of work done (characters for encoding)."""
    from tqdm.auto import tqdm

    bar = tqdm(total=1000, file=sys.stderr, bar_format="{desc} {bar} {percentage:3.0f}% [{elapsed}<{remaining}]")

    def progress(fraction: float, message: str) -> None:
        bar.set_description_str(message[:90])
        bar.update(int(fraction * 1000) - bar.n)

    return progress, bar.close


def _ray(args: argparse.Namespace) -> Any:
    """A Ray connection when --ray was given (with an ADDRESS, or a new local instance), else None."""
    if args.ray is None:
        return None
    from r2med_core.compute.distributed import RayUnavailable, connect

    try:
        return connect(args.ray or None)
    except RayUnavailable as err:
        raise UsageError(str(err)) from None


def cmd_encode(args: argparse.Namespace) -> int:
    from r2med_core.compute.distributed import encode_on_ray
    from r2med_core.retrieval.dense import DenseRetriever
    from r2med_core.retrieval.hardware import detect
    from r2med_core.retrieval.onnx_encoder import BackendUnavailable
    from r2med_core.systems import _dense_model, parse_system

    spec = parse_system(args.model if ":" in args.model or args.model in PRESETS else f"dense:{args.model}")
    if spec.models() != (("dense", spec.name),) or spec.rewrite:
        raise UsageError(f"--model must be a dense model (a preset: {', '.join(PRESETS)}, or a model id or path)")
    try:
        hardware = detect(args.device)
    except DeviceError as err:
        raise UsageError(str(err)) from None
    ray = _ray(args)
    progress, close = _eta_bar()
    try:
        dataset = _load(args, progress)
        if ray is not None:
            retriever = encode_on_ray(
                ray, dataset, spec.name, device=args.device, backend=args.backend, progress=progress
            )
        else:
            retriever = DenseRetriever(
                _dense_model(dataset, spec.name), batch_size=args.batch_size, device=args.device, backend=args.backend
            )
            retriever.index_corpus(list(dataset.corpus), list(dataset.corpus.values()), dataset.fingerprint, progress)
    except BackendUnavailable as err:
        raise UsageError(str(err)) from None
    except KeyboardInterrupt:
        print("error: interrupted; run the same command again to resume (finished chunks are cached)", file=sys.stderr)
        return 130
    finally:
        close()
    key = retriever.cache_key(dataset.fingerprint)
    where = "a Ray cluster" if ray is not None else f"{hardware.device}{' fp16' if hardware.fp16 else ''}"
    print(f"{dataset.name} · {spec.label}: {len(dataset.corpus)} documents encoded on {where}")
    print(f"cache entry: {entry_path('dense', key)}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from r2med_core.server.portable import entries, export_entries

    kinds = None if args.kind == "all" else (args.kind,)
    corpus = _load(args).fingerprint if (args.task or args.data_dir or args.demo) else None
    folders = entries(kinds, corpus)
    if not folders:
        print(f"error: no {args.kind} cache entries to export in {cache_root()}", file=sys.stderr)
        return 1
    count = export_entries(folders, args.output)
    print(f"wrote {args.output} ({count} entries)")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from r2med_core.server.portable import ArchiveError, import_entries

    if not args.archive.is_file():
        raise UsageError(f"{args.archive}: no such file")
    try:
        report = import_entries(args.archive)
    except ArchiveError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for line in report.rejected:
        print(f"error: {line}", file=sys.stderr)
    print(
        f"imported {len(report.added)} entries, {len(report.skipped)} already present, {len(report.rejected)} rejected"
    )
    return 1 if report.rejected else 0


def _sweep_datasets(args: argparse.Namespace) -> dict[str, Dataset]:
    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if args.demo:
        wanted = list(DEMO_TASKS) if [n.lower() for n in names] == ["all"] else names
        unknown = [n for n in wanted if n not in DEMO_TASKS]
        if unknown:
            raise UsageError(f"unknown demo task(s) {', '.join(unknown)}: use {', '.join(DEMO_TASKS)} or All")
        return {name: load_demo(name) for name in wanted}
    wanted = list(TASKS) if [n.lower() for n in names] == ["all"] else [get_task(n).name for n in names]
    out = {}
    for name in wanted:
        out[name] = _load(argparse.Namespace(demo=None, data_dir=None, task=name, hf=args.hf))
    return out


def cmd_sweep(args: argparse.Namespace) -> int:
    from r2med_core.compute.sweep import local_cells, sweep

    if args.top_k < 1:
        raise UsageError("--top-k must be at least 1")
    retrievers = [r.strip() for r in _split_systems(args.retrievers) if r.strip()]
    rewrites = [r.strip() for r in (args.rewrites or "").split(",") if r.strip()]
    for rewrite in rewrites:
        if ":" not in rewrite:
            raise UsageError(f"--rewrites: {rewrite!r} is not METHOD:LLM (e.g. hyde:gpt4)")
    datasets = _sweep_datasets(args)
    ray = _ray(args)
    runner = local_cells
    if ray is not None:
        from r2med_core.compute.distributed import ray_cells

        runner = ray_cells(ray)
    progress, close = _eta_bar()
    try:
        result = sweep(
            datasets, retrievers, rewrites, args.output_dir, top_k=args.top_k, runner=runner, progress=progress
        )
    finally:
        close()
    for note in result.notes:
        print(f"note: {note}")
    for row in result.rows:
        print(
            f"{row['task']:<20} {row['system']:<36} "
            f"nDCG@10 {row['ndcg_at_10']:.4f}  recall@100 {row['recall_at_100']:.4f}"
        )
    print(f"wrote {len(result.rows)} runs and results to {args.output_dir} (grid: {args.output_dir / 'sweep.json'})")
    return 0


# --------------------------------------------------------------------------- diagnosis, pooling, team qrels


def _read_runs(paths: Sequence[Path], dataset: Dataset) -> dict[str, Run]:
    """Each ``--run`` (a run file, a kit's folder, or the NAME.json ``eval`` writes) checked against the
    dataset, keyed by its name; warnings go to stderr as ``evaluate-run`` prints them."""
    from r2med_core.server.imported_runs import read_run_or_results

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
    return 1


def cmd_diagnose(args: argparse.Namespace) -> int:
    from r2med_core.analysis.diagnosis import classed_queries, diagnose, judge_proposals, oracle_run
    from r2med_core.judging.stores import AnnotationStoreError

    if not args.oracle.startswith("oracle:"):
        raise UsageError(f"--oracle must be oracle:RETRIEVER or oracle:RETRIEVER+q, not {args.oracle!r}")
    dataset = _load(args)
    runs = _read_runs(args.run, dataset)
    try:
        proposals = judge_proposals(_open_store(args.store), dataset) if args.store is not None else {}
    except AnnotationStoreError as err:
        return _store_error(err)
    progress, close = _eta_bar()
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
    dataset = _load(args)
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

    dataset = _load(args)
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


def _split_systems(text: str) -> list[str]:
    """Comma-separated systems; commas inside rrf(...) stay with their system."""
    from r2med_core.systems import _split_top_level

    return _split_top_level(text)


def _add_hardware(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default=None, help="auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:N or mps")
    parser.add_argument(
        "--backend",
        default=None,
        choices=ENCODE_BACKENDS,
        help="auto (default: ONNX on a CPU when installed and measured faster, else torch), torch, onnx, onnx-int8",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m r2med_core", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    ev = commands.add_parser(
        "eval", help="run a system on a task, write NAME.trec and NAME.json (exit 3 if an LLM reranking is incomplete)"
    )
    ev.add_argument(
        "--retriever",
        required=True,
        help="bm25 | bm25s | bm25-okapi | minilm | dense:<model id or path> | run:<name> | rrf(A,B) …",
    )
    _add_source(ev)
    ev.add_argument("--rewrite", help="METHOD:LLM, a precomputed rewrite (e.g. hyde:gpt4)")
    ev.add_argument("--top-k", type=_int_at_least(1), default=100, help="documents per query (default 100)")
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
        "--rerank-k", type=_int_at_least(1), default=10, metavar="K", help="how many to rerank (benchmark: 10 or 100)"
    )
    ev.add_argument(
        "--rerank-keep-tail",
        action="store_true",
        help="keep the first-stage documents below the reranked k (not the benchmark's number: the "
        "benchmark's reranked run holds only the k documents)",
    )
    ev.set_defaults(handler=cmd_eval)

    ge = commands.add_parser(
        "generate",
        help="write METHOD/LLM/query_with_hydoc.jsonl with an LLM (cached per query; exit 3 if incomplete)",
    )
    ge.add_argument("--method", required=True, choices=GENERATION_METHODS)
    _add_source(ge)
    ge.add_argument(
        "--model",
        required=True,
        help="the model name on the server, or local:smollm2 / local:PATH for demo-quality offline generation",
    )
    ge.add_argument("--base-url", help="an OpenAI-compatible server (default: $OPENAI_BASE_URL, else OpenAI)")
    ge.add_argument("--llm-name", help="the rewrite's name, as in --rewrite METHOD:NAME (default: from --model)")
    ge.add_argument("--output", type=Path, help="a folder (default: rewrites/<task>) or a .jsonl file")
    ge.add_argument("--limit", type=_int_at_least(1), help="only the first N queries")
    ge.add_argument("--first-stage", default="bm25", help="lamer: the system whose top 10 go into the prompt")
    ge.add_argument(
        "--prompts",
        choices=PROMPT_SETS,
        default="official",
        help="official: the benchmark's per-task prompts (default); explorer: this project's own wording",
    )
    ge.add_argument(
        "--examples",
        type=Path,
        metavar="FILE",
        help="query2doc few-shot examples (text, or JSON {task: text}); without it query2doc is zero-shot",
    )
    ge.add_argument(
        "--temperature",
        type=_finite(0.0, strict=False),
        default=None,
        help="default: the benchmark's (0.7, seed 42; GPT-4o / o1 / o3 / DeepSeek-R1 class 0.8 with top_p 0.8)",
    )
    ge.add_argument(
        "--top-p", type=_finite(0.0, strict=True), default=None, help="default: the benchmark's (see --temperature)"
    )
    ge.add_argument(
        "--max-tokens",
        type=_int_at_least(1),
        default=None,
        help="default: the benchmark's (10240; none sent to the GPT-4o / o1 / o3 / DeepSeek-R1 class)",
    )
    ge.add_argument(
        "--timeout", type=_finite(0.0, strict=True), default=300.0, help="seconds one request may take in all"
    )
    ge.add_argument(
        "--max-retries", type=_int_at_least(0), default=5, help="retries of rate-limited or failed requests"
    )
    ge.add_argument("--workers", type=_int_at_least(1), default=1, help="requests in flight at once")
    ge.set_defaults(handler=cmd_generate)

    er = commands.add_parser(
        "evaluate-run",
        help="print the results JSON of a run made elsewhere: TREC, {qid: {docid: score}} JSON (MTEB "
        "save_predictions), a kit's result folder holding one, or the NAME.json eval writes (its NAME.trec)",
    )
    er.add_argument("--run", required=True, type=Path)
    er.add_argument("--top-k", type=_int_at_least(1), default=100, help="evaluate the top k per query (benchmark: 100)")
    _add_source(er)
    er.set_defaults(handler=cmd_evaluate_run)

    cr = commands.add_parser(
        "compare-results",
        help="results JSON files side by side (made here or elsewhere), flagging where their provenance differs",
    )
    cr.add_argument("files", nargs="+", type=Path, metavar="NAME.json")
    cr.set_defaults(handler=cmd_compare_results)

    va = commands.add_parser("validate", help="check a dataset folder; exit 1 with file:line messages")
    _add_source(va, demo=False)
    va.set_defaults(handler=cmd_validate)

    dl = commands.add_parser("download", help="fetch tasks from the Hugging Face hub into the HF cache")
    dl.add_argument("--task", required=True, help="a task name or All")
    dl.set_defaults(handler=cmd_download)

    en = commands.add_parser("encode", help="encode a corpus with a dense model into the cache (resumable)")
    en.add_argument("--model", required=True, help=f"a preset ({', '.join(PRESETS)}) or a model id or path")
    _add_source(en)
    _add_hardware(en)
    en.add_argument("--batch-size", type=int, help="texts per batch (default: by device memory)")
    en.add_argument("--ray", nargs="?", const="", metavar="ADDRESS", help="encode on a Ray cluster (none: local Ray)")
    en.set_defaults(handler=cmd_encode)

    ex = commands.add_parser("export", help="pack cache entries (with their manifests) into a tar.gz")
    ex.add_argument("--output", required=True, type=Path, help="the archive to write, e.g. embeddings.tar.gz")
    ex.add_argument("--kind", default="dense", choices=(*cache_kinds(), "all"))
    only = ex.add_mutually_exclusive_group()
    only.add_argument("--task", help="only entries built on this task's corpus")
    only.add_argument("--data-dir", type=Path, help="only entries built on this folder's corpus")
    only.add_argument("--demo", choices=DEMO_TASKS, help="only entries built on this demo task's corpus")
    ex.add_argument("--hf", action="store_true", help="with --task: load it from the Hugging Face hub")
    ex.set_defaults(handler=cmd_export)

    im = commands.add_parser("import", help="add the entries of an exported archive to the cache (checked)")
    im.add_argument("archive", type=Path)
    im.set_defaults(handler=cmd_import)

    sw = commands.add_parser("sweep", help="evaluate a grid of tasks x retrievers x rewrites, locally or on Ray")
    sw.add_argument("--tasks", required=True, help="All, or comma-separated task names")
    sw.add_argument("--retrievers", required=True, help="comma-separated systems, e.g. bm25,minilm,e5-mistral")
    sw.add_argument("--rewrites", default="", help="comma-separated METHOD:LLM rewrites, e.g. hyde:gpt4,lamer:gpt4")
    sw.add_argument("--demo", action="store_true", help="the embedded demo tasks instead of R2MED")
    sw.add_argument("--hf", action="store_true", help="load R2MED tasks from the Hugging Face hub")
    sw.add_argument("--top-k", type=int, default=100)
    sw.add_argument("--output-dir", required=True, type=Path)
    sw.add_argument("--ray", nargs="?", const="", metavar="ADDRESS", help="run on a Ray cluster (none: local Ray)")
    sw.set_defaults(handler=cmd_sweep)

    di = commands.add_parser(
        "diagnose",
        help="class each run's failed queries with the answer oracle (a diagnostic), write TASK_RUN_queries.csv",
    )
    di.add_argument(
        "--run", required=True, action="append", type=Path,
        help="a TREC run, score JSON, a kit's folder, or eval's NAME.json (repeat for more runs)",
    )
    _add_source(di)
    di.add_argument("--oracle", default="oracle:bm25", help="oracle:RETRIEVER or oracle:RETRIEVER+q (default: BM25's)")
    di.add_argument(
        "--store", nargs="?", const="", metavar="TARGET",
        help="read the LLM judge's proposals from the annotation store (none: where the app keeps it)",
    )
    di.add_argument("--output-dir", required=True, type=Path)
    di.set_defaults(handler=cmd_diagnose)

    po = commands.add_parser("pool", help="pool the unjudged documents of the runs' top k (TREC-like or CSV)")
    po.add_argument(
        "--run", required=True, action="append", type=Path,
        help="a TREC run, score JSON, a kit's folder, or eval's NAME.json (repeat for more runs)",
    )
    _add_source(po)
    po.add_argument("--depth", type=_int_at_least(1), default=10, help="the top k pooled per run (default 10)")
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
    _add_source(qr)
    qr.add_argument("--store", metavar="TARGET", help="the annotation store (default: where the app keeps it)")
    qr.add_argument("--output", required=True, type=Path)
    qr.set_defaults(handler=cmd_qrels)
    return parser


#: Errors of modules the commands import lazily: (module, class). A command can only raise one
#: once its module is imported, so :func:`_lazy_usage_error` never imports anything itself.
_LAZY_USAGE_ERRORS = (("r2med_core.systems", "SpecError"), ("r2med_core.retrieval.rerank", "RerankerUnavailable"))


def _lazy_usage_error(err: Exception) -> bool:
    for module_name, class_name in _LAZY_USAGE_ERRORS:
        error_class = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(error_class, type) and isinstance(err, error_class):
            return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except DataError as err:
        for problem in err.problems[:50]:
            print(f"error: {problem}", file=sys.stderr)
        return 1
    except RerankIncomplete as err:  # an LLM reranking (``…>llmrerank:…``) its endpoint did not let finish
        return _llm_incomplete(err.report.summary(), str(err))
    except (DownloadError, UsageError, KeyError, OSError, GenerationError, ModelUnavailable) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {message}", file=sys.stderr)
        return 2
    except Exception as err:
        if _lazy_usage_error(err):
            print(f"error: {err}", file=sys.stderr)
            return 2
        # a bug, not bad input: still one line, never a traceback
        print(f"error: unexpected {type(err).__name__}: {' '.join(str(err).split())[:300]}", file=sys.stderr)
        return 1
