"""``sweep``: evaluate a grid of tasks x retrievers x rewrites in one go, locally or on a Ray cluster,
writing the same files per cell that ``eval`` writes for one."""

from __future__ import annotations

import argparse
from pathlib import Path

from r2med_core.cli._common import UsageError, add_ray, eta_bar, load, ray
from r2med_core.data import DEMO_TASKS, Dataset, load_demo
from r2med_core.tasks import TASKS, get_task


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this group's subcommands to ``commands`` (an argparse subparsers action)."""
    sw = commands.add_parser("sweep", help="evaluate a grid of tasks x retrievers x rewrites, locally or on Ray")
    sw.add_argument("--tasks", required=True, help="All, or comma-separated task names")
    sw.add_argument("--retrievers", required=True, help="comma-separated systems, e.g. bm25,minilm,e5-mistral")
    sw.add_argument("--rewrites", default="", help="comma-separated METHOD:LLM rewrites, e.g. hyde:gpt4,lamer:gpt4")
    sw.add_argument("--demo", action="store_true", help="the embedded demo tasks instead of R2MED")
    sw.add_argument("--hf", action="store_true", help="load R2MED tasks from the Hugging Face hub")
    sw.add_argument("--top-k", type=int, default=100)
    sw.add_argument("--output-dir", required=True, type=Path)
    add_ray(sw, "run on a Ray cluster (none: local Ray)")
    sw.set_defaults(handler=cmd_sweep)


def _split_systems(text: str) -> list[str]:
    """Comma-separated systems; commas inside rrf(...) stay with their system."""
    from r2med_core.systems import _split_top_level

    return _split_top_level(text)


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
        out[name] = load(argparse.Namespace(demo=None, data_dir=None, task=name, hf=args.hf))
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
    cluster = ray(args)
    runner = local_cells
    if cluster is not None:
        from r2med_core.compute.distributed import ray_cells

        runner = ray_cells(cluster)
    progress, close = eta_bar()
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
