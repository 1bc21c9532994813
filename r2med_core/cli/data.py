"""``validate`` and ``download``: check a dataset folder, fetch tasks from the hub — the data itself,
before any system runs on it."""

from __future__ import annotations

import argparse
import sys

from r2med_core.cli._common import DATA_ENV, DATA_ERROR, UsageError, add_source, task_dir
from r2med_core.data import validate_dir
from r2med_core.hub import download_task
from r2med_core.tasks import TASKS, get_task


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this group's subcommands to ``commands`` (an argparse subparsers action)."""
    va = commands.add_parser("validate", help="check a dataset folder; exit 1 with file:line messages")
    add_source(va, demo=False)
    va.set_defaults(handler=cmd_validate)

    dl = commands.add_parser("download", help="fetch tasks from the Hugging Face hub into the HF cache")
    dl.add_argument("--task", required=True, help="a task name or All")
    dl.set_defaults(handler=cmd_download)


def cmd_validate(args: argparse.Namespace) -> int:
    if args.data_dir is not None:
        target = args.data_dir
    else:
        info = get_task(args.task)
        target = task_dir(info.name) or (download_task(info.name) if args.hf else None)
        if target is None:
            raise UsageError(f"no local copy of {info.name}: pass --data-dir, add --hf, or set {DATA_ENV}")
    errors, warnings = validate_dir(target)
    for problem in errors:
        print(f"error: {problem}", file=sys.stderr)
    for warning in warnings:
        print(f"warning: {warning}")
    if errors:
        print(f"{target}: {len(errors)} error(s)", file=sys.stderr)
        return DATA_ERROR
    print(f"{target}: OK")
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    names = list(TASKS) if args.task.lower() == "all" else [get_task(args.task).name]
    for name in names:
        folder = download_task(name)
        print(f"{name}: {folder}")
    return 0
