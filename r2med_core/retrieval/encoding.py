"""Chunked, resumable corpus encoding: the one encoder behind the app's background jobs, the CLI and Ray.

A corpus is sorted by length (longest first, so batches hold texts of similar length and pad little)
and cut into chunks; each chunk's vectors are written to the cache as soon as they are done, in a
folder named like the final dense entry (``dense-chunks/<fingerprint of the dense key>/``). A killed
or restarted process finds the finished chunks and encodes only the rest; once every chunk is there,
the vectors are put back in corpus order for the FAISS entry and the chunks are removed.

Only one thread of a process encodes one (corpus, model) at a time; another caller waits and sees the
same progress. Speed is reported in documents/s, the ETA from the characters still to encode (long
documents come first, so a count of documents would promise too much too early).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from r2med_core.cache import atomic_write_bytes, atomic_write_text, cache_root, fingerprint, make_kind_folder
from r2med_core.progress import Progress, format_seconds, notify

#: Documents per chunk file: small enough that a crash loses little.
CHUNK_DOCS = 256
#: Documents per call of the encoder within a chunk: progress (and Cancel) every batch, within seconds
#: of the start even on a slow CPU, rather than once per chunk.
BATCH_DOCS = 32
CHUNK_VERSION = 1
#: Characters beyond this many per model token never reach the model, so they cost nothing.
CHARS_PER_TOKEN = 6

Encode = Callable[[list[str]], np.ndarray]


class Cancelled(Exception):
    """Raised inside long work when its job was cancelled (what is finished stays in the cache)."""


@dataclass
class EncodeStatus:
    """Progress of one corpus encoding, shared by every caller that waits for it."""

    done: int
    total: int
    docs_per_s: float | None = None
    eta_seconds: float | None = None
    #: When ``eta_seconds`` was estimated (``time.monotonic()``), so a page can count it down between reports.
    measured_at: float = field(default_factory=time.monotonic)

    def eta_now(self) -> float | None:
        """The ETA counted down by the time since it was estimated (never below 0)."""
        if self.eta_seconds is None:
            return None
        return max(0.0, self.eta_seconds - (time.monotonic() - self.measured_at))

    def line(self) -> str:
        parts = [f"{self.done:,}/{self.total:,} documents"]
        if self.docs_per_s:
            parts.append(f"{self.docs_per_s:,.1f} docs/s")
        if self.eta_seconds is not None and self.done < self.total:
            parts.append(f"ETA {format_seconds(self.eta_seconds)}")
        return " · ".join(parts)


def chunk_folder(key: dict[str, Any]) -> Path:
    """Where the chunks of the dense entry with this key live (same fingerprint as the entry)."""
    return cache_root() / "dense-chunks" / fingerprint("dense", key)


def length_order(texts: Sequence[str]) -> np.ndarray:
    """Positions sorted longest first; ties keep corpus order (stable, so a resume finds the same plan)."""
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    return np.argsort(-lengths, kind="stable")


@dataclass(frozen=True)
class Plan:
    """How a corpus is cut: ``order`` (sorted positions) in chunks of ``chunk_docs``."""

    order: np.ndarray
    chunk_docs: int

    @property
    def n_chunks(self) -> int:
        return -(-len(self.order) // self.chunk_docs)

    def positions(self, chunk: int) -> np.ndarray:
        return self.order[chunk * self.chunk_docs : (chunk + 1) * self.chunk_docs]


def plan(texts: Sequence[str], chunk_docs: int = CHUNK_DOCS) -> Plan:
    return Plan(length_order(texts), max(1, chunk_docs))


def _chunk_path(folder: Path, chunk: int) -> Path:
    return folder / f"{chunk:07d}.npy"


def _prepare(folder: Path, key: dict[str, Any], n_docs: int, chunk_docs: int) -> None:
    """Start or check the chunk folder; chunks cut another way (or for another key) are thrown away."""
    meta = {"key": key, "docs": n_docs, "chunk_docs": chunk_docs, "version": CHUNK_VERSION}
    wanted = json.dumps(meta, sort_keys=True, default=str)
    meta_path = folder / "meta.json"
    try:
        current = json.dumps(json.loads(meta_path.read_text(encoding="utf-8")), sort_keys=True, default=str)
    except (OSError, ValueError):
        current = None
    if current != wanted:
        shutil.rmtree(folder, ignore_errors=True)
        make_kind_folder(folder.parent)
        folder.mkdir(exist_ok=True)
        atomic_write_text(meta_path, wanted)


def load_chunk(folder: Path, chunk: int, rows: int) -> np.ndarray | None:
    """A finished chunk's vectors, or None if missing or damaged (then it is encoded again)."""
    path = _chunk_path(folder, chunk)
    try:
        vectors = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if vectors.ndim != 2 or vectors.shape[0] != rows or vectors.dtype != np.float32 or not np.isfinite(vectors).all():
        path.unlink(missing_ok=True)
        return None
    return vectors


def save_chunk(folder: Path, chunk: int, vectors: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
    atomic_write_bytes(_chunk_path(folder, chunk), buffer.getvalue())


def finished_docs(key: dict[str, Any], n_docs: int) -> int:
    """How many documents of this encoding are already on disk (for estimates; cheap: no decoding)."""
    folder = chunk_folder(key)
    try:
        chunk_docs = int(json.loads((folder / "meta.json").read_text(encoding="utf-8"))["chunk_docs"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    done = 0
    for path in folder.glob("*.npy"):
        try:
            chunk = int(path.stem)
        except ValueError:
            continue
        done += max(0, min(chunk_docs, n_docs - chunk * chunk_docs))
    return min(done, n_docs)


# --------------------------------------------------------------------------- speed

#: Documents per second on this project's 2-core reference CPU (MiniLM measured on ~200-word
#: documents; the others scaled by model size) until a speed is measured on the machine itself.
CPU_DOCS_PER_S: dict[str, float] = {
    "minilm": 8.0,
    "contriever": 2.0,
    "medcpt": 2.0,
    "e5-large-v2": 0.7,
    "bge-large": 0.7,
    "e5-mistral": 0.03,
    "sfr-mistral": 0.03,
}
GPU_SPEEDUP = 40.0
_THROUGHPUT = "throughput.json"
#: A run shorter than this many documents says little about the speed; it is not recorded.
_MIN_MEASURED_DOCS = 64


def busy_factor() -> float:
    """How many times over this machine's cores are in demand now (1-minute load average / cores, at
    least 1): CPU work runs about that many times slower than on an idle machine."""
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except (OSError, AttributeError):  # no load average on this platform
        return 1.0


def measured_docs_per_s(model: str, device: str) -> float | None:
    """The speed last measured on this machine for this model and device, if any, as an idle machine
    would run it (on a CPU, the speed measured times the busy factor then)."""
    try:
        data = json.loads((cache_root() / _THROUGHPUT).read_text(encoding="utf-8"))
        value = float(data[f"{model}|{device}"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if value > 0 else None


def _on_cpu(device: str) -> bool:
    return not device.startswith(("cuda", "mps"))


def record_throughput(model: str, device: str, docs_per_s: float) -> None:
    """Remember a measured speed, so the next estimate on this machine is this machine's. On a CPU the
    speed is stored as an idle machine's (times the busy factor while it was measured)."""
    if _on_cpu(device):
        docs_per_s *= busy_factor()
    path = cache_root() / _THROUGHPUT
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data[f"{model}|{device}"] = round(float(docs_per_s), 3)
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True))


def docs_per_s(model: str, device: str) -> float:
    """The speed to expect now: measured here if known, else the table's figure (x GPU_SPEEDUP on a
    GPU); on a CPU divided by the current busy factor, so an estimate made under load is not short."""
    speed = measured_docs_per_s(model, device)
    if not speed:
        speed = CPU_DOCS_PER_S.get(model, 0.7) * (1.0 if _on_cpu(device) else GPU_SPEEDUP)  # unknown: base-sized
    return speed / busy_factor() if _on_cpu(device) else speed


# --------------------------------------------------------------------------- one encoder per key

_LOCKS: dict[str, threading.Lock] = {}
_STATUS: dict[str, EncodeStatus] = {}
_GUARD = threading.Lock()


def _lock_for(name: str) -> threading.Lock:
    with _GUARD:
        return _LOCKS.setdefault(name, threading.Lock())


def status(key: dict[str, Any]) -> EncodeStatus | None:
    """The progress of this encoding if a thread of this process is running it."""
    return _STATUS.get(chunk_folder(key).name)


class _Meter:
    """Documents/s and an ETA from the characters left (cost), measured over this session only."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.started = time.perf_counter()
        self.docs_here = 0
        self.cost_here = 0.0

    def add(self, docs: int, cost: float) -> None:
        self.docs_here += docs
        self.cost_here += cost

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def status(self, done: int, cost_left: float) -> EncodeStatus:
        elapsed = self.elapsed
        if self.docs_here == 0 or elapsed <= 0:
            return EncodeStatus(done, self.total)
        eta = cost_left / (self.cost_here / elapsed) if self.cost_here else None
        return EncodeStatus(done, self.total, self.docs_here / elapsed, eta)


def encode_corpus(
    encode: Encode,
    texts: Sequence[str],
    key: dict[str, Any],
    *,
    chunk_docs: int | None = None,
    max_chars: int | None = None,
    progress: Progress | None = None,
    label: str = "Encoding documents",
    encode_chunks: Callable[[Plan, list[int]], Iterator[tuple[int, np.ndarray]]] | None = None,
    on_speed: Callable[[float], None] | None = None,
) -> np.ndarray:
    """Vectors for ``texts`` in corpus order, encoding only the chunks not already on disk.

    ``encode`` turns a list of texts into float32 vectors. ``encode_chunks`` (the Ray path) may
    encode many chunks elsewhere and yield ``(chunk, vectors)`` as they finish. ``progress`` may raise
    (``Cancelled``) to stop between chunks; finished chunks stay for the next call. ``on_speed`` gets
    the documents/s measured, when enough documents were encoded to tell.
    """
    chunk_docs = chunk_docs or CHUNK_DOCS
    folder = chunk_folder(key)
    lock = _lock_for(folder.name)
    while not lock.acquire(timeout=0.5):  # someone else encodes it: show their progress meanwhile
        shared = _STATUS.get(folder.name)
        if shared is not None:
            notify(progress, shared.done / max(shared.total, 1), f"{label} (already running): {shared.line()}")
        else:
            notify(progress, 0.0, f"{label}: waiting for another encoder")
    try:
        vectors, meter = _encode_locked(
            encode, texts, key, folder, chunk_docs, max_chars, progress, label, encode_chunks
        )
        if on_speed is not None and meter.docs_here >= _MIN_MEASURED_DOCS:
            on_speed(meter.docs_here / max(meter.elapsed, 1e-9))
        return vectors
    finally:
        _STATUS.pop(folder.name, None)
        lock.release()


def _encode_locked(
    encode: Encode,
    texts: Sequence[str],
    key: dict[str, Any],
    folder: Path,
    chunk_docs: int,
    max_chars: int | None,
    progress: Progress | None,
    label: str,
    encode_chunks: Callable[[Plan, list[int]], Iterator[tuple[int, np.ndarray]]] | None,
) -> tuple[np.ndarray, _Meter]:
    n = len(texts)
    the_plan = plan(texts, chunk_docs)
    _prepare(folder, key, n, the_plan.chunk_docs)
    lengths = np.fromiter((len(t) for t in texts), dtype=np.float64, count=n)
    costs = np.minimum(lengths, max_chars) if max_chars else lengths
    costs = costs + 16.0  # every text costs a little, however short
    done_vectors: dict[int, np.ndarray] = {}
    for chunk in range(the_plan.n_chunks):
        found = load_chunk(folder, chunk, len(the_plan.positions(chunk)))
        if found is not None:
            done_vectors[chunk] = found
    todo = [c for c in range(the_plan.n_chunks) if c not in done_vectors]
    done = sum(len(the_plan.positions(c)) for c in done_vectors)
    cost_left = float(sum(costs[the_plan.positions(c)].sum() for c in todo))
    total_cost = float(costs.sum()) or 1.0
    meter = _Meter(n)

    docs_in_flight, cost_in_flight = 0, 0.0  # of the chunk being encoded, batch by batch

    def publish() -> None:
        current = meter.status(done + docs_in_flight, cost_left - cost_in_flight)
        _STATUS[folder.name] = current
        notify(progress, 1.0 - (cost_left - cost_in_flight) / total_cost, f"{label}: {current.line()}")

    publish()
    if encode_chunks is None:

        def local_chunks(p: Plan, wanted: list[int]) -> Iterator[tuple[int, np.ndarray]]:
            nonlocal docs_in_flight, cost_in_flight
            for chunk in wanted:
                positions = p.positions(chunk)
                parts = []
                for start in range(0, len(positions), BATCH_DOCS):
                    batch = positions[start : start + BATCH_DOCS]
                    parts.append(np.asarray(encode([texts[i] for i in batch]), dtype=np.float32))
                    cost = float(costs[batch].sum())
                    docs_in_flight += len(batch)
                    cost_in_flight += cost
                    meter.add(len(batch), cost)
                    if start + BATCH_DOCS < len(positions):  # a chunk's last batch reports once it is saved,
                        publish()  # so a Cancel there keeps it; every other batch reports (and Cancels) here
                docs_in_flight, cost_in_flight = 0, 0.0
                yield chunk, np.concatenate(parts)

        encode_chunks = local_chunks
        metered = True
    else:
        metered = False
    for chunk, vectors in encode_chunks(the_plan, todo):
        vectors = np.asarray(vectors, dtype=np.float32)
        rows = len(the_plan.positions(chunk))
        if vectors.ndim != 2 or vectors.shape[0] != rows:
            raise ValueError(f"chunk {chunk}: expected {rows} vectors, got shape {vectors.shape}")
        save_chunk(folder, chunk, vectors)
        done_vectors[chunk] = vectors
        chunk_cost = float(costs[the_plan.positions(chunk)].sum())
        done += rows
        cost_left -= chunk_cost
        if not metered:  # chunks encoded elsewhere (Ray) are counted as they arrive
            meter.add(rows, chunk_cost)
        publish()
    return assemble(the_plan, done_vectors), meter


def assemble(the_plan: Plan, vectors: dict[int, np.ndarray]) -> np.ndarray:
    """Put chunk vectors back in corpus order."""
    n = len(the_plan.order)
    if n == 0:
        return np.zeros((0, 0), dtype=np.float32)
    dim = next(iter(vectors.values())).shape[1]
    out = np.empty((n, dim), dtype=np.float32)
    for chunk in range(the_plan.n_chunks):
        out[the_plan.positions(chunk)] = vectors[chunk]
    return out


def discard_chunks(key: dict[str, Any]) -> None:
    """Remove the chunks once the final entry holds the vectors."""
    shutil.rmtree(chunk_folder(key), ignore_errors=True)
