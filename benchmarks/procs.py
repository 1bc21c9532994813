"""Measure a command as a whole process tree: wall time, CPU time and peak memory of it and every child.

Why: the tokenizer starts worker processes, so timing or ``ru_maxrss`` of the parent alone
under-counts what a run costs. CPU comes from ``wait4`` (the process plus every descendant it
waited for); peak memory is the largest sum of resident memory over the whole tree, sampled every
50 ms from /proc (Linux; pages shared between processes count once per process, so it errs high).
Comparisons run as interleaved pairs (A B, B A, A B …) so a change in the machine's load hits
both sides alike, and report the median ratio.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


def _children(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        return [int(c) for t in tasks for c in (t / "children").read_text().split()]
    except OSError:
        return []


def tree_pids(pid: int) -> set[int]:
    """``pid`` and its live descendants (Linux /proc)."""
    pids, todo = set(), [pid]
    while todo:
        current = todo.pop()
        if current not in pids:
            pids.add(current)
            todo.extend(_children(current))
    return pids


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


class TreePeak(threading.Thread):
    """Samples the summed resident memory of a process and all its descendants (Linux /proc)."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak = pid, interval, 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.peak = max(self.peak, sum(map(_rss, tree_pids(self.pid))))
            self._stop_event.wait(self.interval)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return self.peak


@dataclass(frozen=True)
class Measurement:
    """One run of a command: seconds of wall and CPU time, bytes of peak memory, all processes."""

    wall: float
    cpu: float
    peak: int
    load: float  # 1-minute load average when it started
    stdout: str


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def measure(command: Sequence[str], env: dict[str, str] | None = None, cwd: str | None = None) -> Measurement:
    """Run ``command`` to completion; raise SystemExit if it fails."""
    load = load_average()
    start = time.perf_counter()
    proc = subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd, text=True
    )
    sampler = TreePeak(proc.pid)
    sampler.start()
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)  # rusage of the process and its waited-for descendants
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    peak = sampler.stop()
    if proc.returncode:
        raise SystemExit(f"error: {' '.join(command)} exited with {proc.returncode}")
    return Measurement(wall, usage.ru_utime + usage.ru_stime, max(peak, usage.ru_maxrss * 1024), load, out)


@dataclass(frozen=True)
class Pairs:
    """``n`` interleaved runs of two commands."""

    a: list[Measurement]
    b: list[Measurement]

    def ratio(self, field: str) -> float:
        """Median over the pairs of a's ``field`` / b's."""
        return statistics.median(getattr(x, field) / getattr(y, field) for x, y in zip(self.a, self.b))

    def median(self, side: str, field: str) -> float:
        return statistics.median(getattr(m, field) for m in getattr(self, side))

    @property
    def loads(self) -> tuple[float, float]:
        values = [m.load for m in self.a + self.b]
        return min(values), max(values)


Command = Sequence[str] | Callable[[], tuple[Sequence[str], dict[str, str] | None]]


def _run(command: Command, cwd: str | None) -> Measurement:
    argv, env = command() if callable(command) else (command, None)
    run = measure(argv, env, cwd)
    name = " ".join(argv[1:4])
    print(f"    {name}: {run.wall:.1f} s wall, {run.cpu:.1f} s CPU, load {run.load:.1f}", file=sys.stderr, flush=True)
    return run


def compile_as_installed() -> None:
    """Write this project's bytecode, as installing its wheel does (pip compiles every module).

    Why: a shell with ``PYTHONDONTWRITEBYTECODE=1`` (this project's CI machine sets it) makes every run
    of ours compile its ~60 modules again (~0.1 s) while the reference's site-packages were compiled at
    install time; ``py_compile`` writes regardless of that setting, and a run reads what it wrote.
    """
    import compileall

    for package in ("r2med_core", "r2med_app", "benchmarks"):
        compileall.compile_dir(Path(__file__).resolve().parent.parent / package, quiet=1)


def interleaved(a: Command, b: Command, n: int = 3, cwd: str | None = None) -> Pairs:
    """Run ``a`` and ``b`` ``n`` times each, alternating which goes first (A B, B A, A B …), each side
    with this project's bytecode written (``compile_as_installed``).

    A command is an argv, or a function returning ``(argv, env)`` called before each run (e.g. to
    give every run a fresh, cold cache folder).
    """
    compile_as_installed()
    runs_a, runs_b = [], []
    for i in range(n):
        if i % 2 == 0:
            runs_a.append(_run(a, cwd))
            runs_b.append(_run(b, cwd))
        else:
            runs_b.append(_run(b, cwd))
            runs_a.append(_run(a, cwd))
    return Pairs(runs_a, runs_b)


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.2f} GiB"
