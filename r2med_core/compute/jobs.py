"""Background jobs: long work (encoding a corpus, BM25 of a big corpus, reranking) off the page's thread.

The registry is one per process, so every session of a Streamlit server shares it: a second visitor
who asks for the same work gets the job that is already running, with its progress. A job reports
through the usual ``Progress`` callback; Cancel makes that callback raise ``Cancelled`` at the next
report, and what was finished (encoded chunks) stays in the disk cache for the next start.

``is_computed`` and ``estimate_seconds`` say whether a system's run is on disk and, if not, how long
it would take, so the app starts only cheap work by itself and asks for a click otherwise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from r2med_core.cache import fingerprint
from r2med_core.data import Dataset
from r2med_core.kinds.base import MODEL_LOAD_SECONDS, SystemSpec, estimate_seconds, is_computed, parse_system, run_key
from r2med_core.kinds.bm25 import BM25_DOCS_PER_S, OKAPI_PAIRS_PER_S
from r2med_core.kinds.rerank import RERANK_PAIRS_PER_S, rerank_seconds
from r2med_core.kinds.roles import ProgressReader, model_role
from r2med_core.retrieval.encoding import Cancelled, EncodeStatus, docs_per_s, format_seconds, record_throughput
from r2med_core.systems import leaf_systems

# Cost constants, kept here by name for callers (each lives with its kind).
_ = (BM25_DOCS_PER_S, OKAPI_PAIRS_PER_S, MODEL_LOAD_SECONDS, RERANK_PAIRS_PER_S)

__all__ = [
    "REGISTRY",
    "Cancelled",
    "Job",
    "JobRegistry",
    "JobStatus",
    "docs_per_s",
    "estimate_seconds",
    "format_seconds",
    "is_computed",
    "leaf_systems",
    "record_throughput",
    "rerank_seconds",
    "start_run",
]

RUNNING, DONE, FAILED, CANCELLED = "running", "done", "failed", "cancelled"
#: A running job asked to stop: it ends at its next progress report (within a batch's time).
CANCELLING = "cancelling"


@dataclass
class JobStatus:
    """What a page shows: how far, how fast, how long still (None while unknown)."""

    key: tuple
    label: str
    state: str
    fraction: float
    message: str
    done: int | None = None
    total: int | None = None
    docs_per_s: float | None = None
    eta_seconds: float | None = None
    error: str = ""
    #: Seconds since the work started.
    elapsed_seconds: float = 0.0

    @property
    def finished(self) -> bool:
        return self.state not in (RUNNING, CANCELLING)


@dataclass
class Job:
    """One piece of work running in its own thread."""

    key: tuple
    label: str
    state: str = RUNNING
    fraction: float = 0.0
    message: str = "starting"
    error: str = ""
    result: Any = None
    encoding: EncodeStatus | None = None
    started: float = field(default_factory=time.monotonic)
    _first_fraction: float | None = None
    #: The ETA as estimated when the fraction last moved, and when: it is counted down from there.
    _eta_base: float | None = None
    _eta_from: float = 0.0
    _cancel: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def progress(self, fraction: float, message: str) -> None:
        """The ``Progress`` callback handed to the work; raises ``Cancelled`` once Cancel was pressed."""
        if self._cancel.is_set():
            raise Cancelled(self.label)
        now = time.monotonic()
        if self._first_fraction is None:
            self._first_fraction = fraction
            self.started = now
        elif fraction != self.fraction and fraction > self._first_fraction:
            rate = (fraction - self._first_fraction) / max(now - self.started, 1e-9)
            self._eta_base, self._eta_from = (1 - fraction) / rate, now
        self.fraction, self.message = fraction, message

    def cancel(self) -> None:
        self._cancel.set()

    def wait_for(self, turn: threading.Lock, message: str) -> None:
        """Take ``turn`` before working, saying ``message`` meanwhile; Cancel still stops it. The clock
        (elapsed, speed, ETA) starts with the work, not with the wait."""
        while not turn.acquire(timeout=0.2):
            if self._cancel.is_set():
                raise Cancelled(self.label)
            self.message = message

    @property
    def cancelling(self) -> bool:
        """Cancel was pressed and the work has not stopped yet."""
        return self.state == RUNNING and self._cancel.is_set()

    @property
    def active(self) -> bool:
        """Running and not being cancelled: the job a page shows and a new start joins."""
        return self.state == RUNNING and not self._cancel.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ends (tests and the CLI); True if it has."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.state != RUNNING

    def status(self, encoding: EncodeStatus | None = None) -> JobStatus:
        """How far the job is; the ETA counts down between progress reports (it is re-estimated at each)."""
        encoding = encoding or self.encoding
        eta = encoding.eta_now() if encoding else None
        now = time.monotonic()
        elapsed = now - self.started
        if eta is None and self._eta_base is not None:
            # Counted down from the last move of the fraction: re-estimating from elapsed time at every look
            # made it grow each second while a long step (an LLM reply) was pending.
            eta = max(self._eta_base - (now - self._eta_from), 0.0)
        return JobStatus(
            key=self.key,
            label=self.label,
            state=CANCELLING if self.cancelling else self.state,
            fraction=self.fraction,
            message=self.message,
            done=encoding.done if encoding else None,
            total=encoding.total if encoding else None,
            docs_per_s=encoding.docs_per_s if encoding else None,
            eta_seconds=eta,
            error=self.error,
            elapsed_seconds=elapsed,
        )


class JobRegistry:
    """start / status / cancel of jobs by key; at most one running job per key."""

    def __init__(self) -> None:
        self._jobs: dict[tuple, Job] = {}
        self._lock = threading.Lock()

    def start(self, key: tuple, label: str, work: Callable[[Job], Any]) -> Job:
        """Start ``work(job)`` in a thread, unless a job with this key is running (then return it).

        A job being cancelled is not joined: a new one starts, and it resumes from what the old one
        kept once that one has let go (an encoding waits for the other encoder's lock)."""
        with self._lock:
            current = self._jobs.get(key)
            if current is not None and current.active:
                return current
            job = Job(key, label)
            thread = threading.Thread(target=self._run, args=(job, work), name=f"r2med-job-{label}", daemon=True)
            job._thread = thread
            self._jobs[key] = job
        thread.start()
        return job

    @staticmethod
    def _run(job: Job, work: Callable[[Job], Any]) -> None:
        try:
            job.result = work(job)
            job.state, job.fraction, job.message = DONE, 1.0, "done"
        except Cancelled:
            job.state, job.message = CANCELLED, "cancelled (finished chunks are kept; Compute resumes)"
        except Exception as err:  # the page shows it; the server goes on
            job.state, job.error = FAILED, f"{type(err).__name__}: {err}"
            job.message = job.error

    def get(self, key: tuple) -> Job | None:
        return self._jobs.get(key)

    def jobs(self) -> list[Job]:
        """Every job this process knows (running and finished)."""
        return list(self._jobs.values())

    def status(self, key: tuple) -> JobStatus | None:
        job = self._jobs.get(key)
        return None if job is None else job.status()

    def cancel(self, key: tuple) -> bool:
        """Ask a running job to stop at its next progress report; False if none runs."""
        job = self._jobs.get(key)
        if job is None or job.state != RUNNING:
            return False
        job.cancel()
        return True

    def forget(self, key: tuple) -> None:
        """Drop a finished job (its result is in the disk cache)."""
        with self._lock:
            job = self._jobs.get(key)
            if job is not None and job.state != RUNNING:
                del self._jobs[key]


#: The one registry of this process (a Streamlit server: all its sessions).
REGISTRY = JobRegistry()


def run_job_key(dataset: Dataset, system: str, k: int = 100) -> tuple[str, str]:
    """The key of the job computing this run: the run's own cache key, so the same work is one job."""
    return ("run", fingerprint("runs", run_key(dataset, parse_system(system), k)))


#: The turn of the jobs whose kind ``holds_gil``: one at a time. Two BM25 indexes of 357k documents built
#: in two threads of one server took 1.13x the CPU and 1.14x the wall time of building them one after the
#: other (``benchmarks/bench_compare.py``): the threads only contend for the GIL. Other jobs (an encoding,
#: whose torch releases the GIL; LLM requests, which wait on the network) never wait for it.
_GIL_TURN = threading.Lock()


def start_run(dataset: Dataset, system: str, k: int = 100) -> Job:
    """Compute a system's run in the background (shared by every session); its encoding is resumable."""
    from r2med_core.systems import run_system

    spec = parse_system(system)

    def work(job: Job) -> Any:
        if not spec.system_kind.holds_gil:
            return run(job)
        job.wait_for(_GIL_TURN, "Waiting: another BM25 run is being computed on this server; this one starts then")
        try:
            return run(job)
        finally:
            _GIL_TURN.release()

    def run(job: Job) -> Any:
        watcher = _EncodingWatcher(dataset, spec, job)
        watcher.start()
        try:
            return run_system(dataset, spec, k=k, progress=job.progress)
        finally:
            watcher.stop()

    return REGISTRY.start(run_job_key(dataset, system, k), spec.label, work)


class _EncodingWatcher(threading.Thread):
    """Copies the structured progress (docs, docs/s, ETA) of the job's models (a corpus encoding)
    into the job, read as each model's role says."""

    def __init__(self, dataset: Dataset, spec: SystemSpec, job: Job) -> None:
        super().__init__(daemon=True, name=f"r2med-watch-{job.label}")
        self.readers = _progress_readers(dataset, spec)
        self.job = job
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(0.5):
            found = [s for s in (read() for read in self.readers) if s is not None]
            self.job.encoding = found[0] if found else None

    def stop(self) -> None:
        self._stop_event.set()


# --------------------------------------------------------------------------- costs
# Each kind estimates its own cost (``SystemKind.estimate_seconds``); ``estimate_seconds`` and
# ``is_computed`` (from ``kinds.base``) say 0 for a run already on disk.


def _progress_readers(dataset: Dataset, spec: SystemSpec) -> list[ProgressReader]:
    """How the progress of each model a system runs is read (its role says; most report none)."""
    return [
        reader
        for role, model in dict.fromkeys(spec.models())
        if (reader := model_role(role).progress_reader(dataset, model)) is not None
    ]
