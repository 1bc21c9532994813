"""What several command groups share: where a dataset comes from and how it loads, the numeric argument
types, the progress bars, a Ray connection, and the exit statuses.

Kept apart from the groups so a command module holds only its own arguments and handler, and an error or
an option every command spells the same way is spelled once.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from r2med_core.data import DEMO_TASKS, Dataset, load_demo, load_dir
from r2med_core.hub import load_hf
from r2med_core.progress import Progress
from r2med_core.tasks import TASKS, get_task

DATA_ENV = "R2MED_DATA_DIR"

#: The exit status of bad data (a file, a line, a store that cannot be read): the message names it.
DATA_ERROR = 1
#: The exit status of a command line that cannot be carried out (argparse's own status for a bad option).
USAGE_ERROR = 2
#: The exit status of a command whose LLM work did not finish because of the endpoint (a wrong key,
#: a server error, an unreachable server, malformed or oversized replies). What finished is cached,
#: so running the same command again resumes.
LLM_INCOMPLETE = 3
#: The exit status of a long job stopped with Ctrl-C (the shell's 128 + SIGINT); what finished is cached.
INTERRUPTED = 130


class UsageError(Exception):
    """A command line that cannot be carried out; the message says how to fix it."""


def llm_incomplete(summary: str, problem: str) -> int:
    """Say what an unfinished LLM job did and why it stopped, the same way for every command."""
    print(summary)
    print(f"error: {problem}", file=sys.stderr)
    return LLM_INCOMPLETE


def int_at_least(low: int) -> Callable[[str], int]:
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


def finite(low: float, *, strict: bool) -> Callable[[str], float]:
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


def tqdm_progress() -> tuple[Progress, Callable[[], None]]:
    """A tqdm bar on stderr for work whose length is unknown up front (loading, retrieving, generating)."""
    from tqdm.std import tqdm  # a terminal's bar; tqdm.auto imports asyncio (~20 ms a start)

    bar = tqdm(total=1000, unit="‰", file=sys.stderr, leave=False, bar_format="{desc} {bar} {percentage:3.0f}%")

    def progress(fraction: float, message: str) -> None:
        bar.set_description_str(message[:70])
        bar.update(int(fraction * 1000) - bar.n)

    return progress, bar.close


def eta_bar() -> tuple[Progress, Callable[[], None]]:
    """A tqdm bar whose remaining time comes from the fraction of work done (characters for encoding)."""
    from tqdm.std import tqdm  # a terminal's bar; tqdm.auto imports asyncio (~20 ms a start)

    bar = tqdm(total=1000, file=sys.stderr, bar_format="{desc} {bar} {percentage:3.0f}% [{elapsed}<{remaining}]")

    def progress(fraction: float, message: str) -> None:
        bar.set_description_str(message[:90])
        bar.update(int(fraction * 1000) - bar.n)

    return progress, bar.close


def add_source(parser: argparse.ArgumentParser, *, demo: bool = True) -> None:
    """The options naming a dataset: an R2MED task, a local folder, or (``demo``) an embedded demo task."""
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


def task_dir(task: str) -> Path | None:
    """The task's local copy under ``$R2MED_DATA_DIR``, if there is one."""
    root = os.environ.get(DATA_ENV)
    if root and (Path(root) / task).is_dir():
        return Path(root) / task
    return None


def load(args: argparse.Namespace, progress: Progress | None = None) -> Dataset:
    """The dataset :func:`add_source`'s options name; a task with no local copy needs ``--hf``."""
    if getattr(args, "demo", None):
        return load_demo(args.demo)
    if args.data_dir is not None:
        return load_dir(args.data_dir)
    info = get_task(args.task)
    local = task_dir(info.name)
    if local is not None and not args.hf:
        return load_dir(local, name=info.name)
    if not args.hf:
        raise UsageError(
            f"no local copy of {info.name}: add --hf to load it from the Hugging Face hub, pass "
            f"--data-dir, or set {DATA_ENV} to a folder holding {info.name}/"
        )
    return load_hf(info.name, revision=getattr(args, "revision", None), progress=progress)


def add_ray(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--ray [ADDRESS]``: run on a Ray cluster (no address: a new local instance)."""
    parser.add_argument("--ray", nargs="?", const="", metavar="ADDRESS", help=help_text)


def ray(args: argparse.Namespace) -> Any:
    """A Ray connection when --ray was given (with an ADDRESS, or a new local instance), else None."""
    if args.ray is None:
        return None
    from r2med_core.compute.distributed import RayUnavailable, connect

    try:
        return connect(args.ray or None)
    except RayUnavailable as err:
        raise UsageError(str(err)) from None
