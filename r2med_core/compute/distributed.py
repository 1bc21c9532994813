"""Ray, when one machine is not enough (``--ray [ADDRESS]``; optional: ``pip install -r requirements-scale.txt``).

Encoding: the corpus's chunks (the same plan as a local run, ``r2med_core.retrieval.encoding``) go through Ray
Data ``map_batches`` with a pool of encoder actors (one GPU each when the cluster has GPUs); every
chunk comes back to this process, which writes it to the cache as it arrives, so a Ray run resumes
like a local one and ends in the same cache entry. Evaluation: each sweep cell is a Ray task calling
the same ``evaluate_cell`` a local sweep calls. Workers find dense indexes in ``R2MED_CACHE_DIR``,
which must be the same path on every node (a shared filesystem) on a multi-node cluster.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from r2med_core.cache import CACHE_ENV, cache_root
from r2med_core.compute.sweep import Cell, evaluate_cell
from r2med_core.data import Dataset
from r2med_core.evaluation import Results
from r2med_core.retrieval.dense import DenseModel, DenseRetriever
from r2med_core.retrieval.encoding import Plan
from r2med_core.runs import Run
from r2med_core.systems import _dense_model, parse_system


class RayUnavailable(RuntimeError):
    """Ray is not installed or the cluster cannot be reached; the message says what to do."""


def connect(address: str | None, num_cpus: int | None = None) -> Any:
    """``ray.init`` on ``address`` (None: a local instance), with this process's cache folder for workers."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable("--ray needs Ray: pip install -r requirements-scale.txt") from None
    if not ray.is_initialized():
        env = {CACHE_ENV: str(cache_root()), "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "")}
        kwargs: dict[str, Any] = {"runtime_env": {"env_vars": env}, "log_to_driver": False}
        if address:
            kwargs["address"] = address
        elif num_cpus:
            kwargs["num_cpus"] = num_cpus
        try:
            ray.init(**kwargs)
        except Exception as err:  # a wrong address, a cluster that is down
            raise RayUnavailable(
                f"cannot reach the Ray cluster at {address or 'a new local instance'}: {err}"
            ) from None
    return ray


class _ChunkEncoder:
    """A Ray actor: loads the model once, encodes one chunk per call (the local encoder's code)."""

    def __init__(self, model: DenseModel, device: str | None, backend: str | None) -> None:
        self.retriever = DenseRetriever(model, device=device, backend=backend)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out_chunks, out_data, out_rows, out_dims = [], [], [], []
        for chunk, texts in zip(batch["chunk"], batch["texts"]):
            vectors = self.retriever.encode([str(t) for t in texts], "doc")
            out_chunks.append(int(chunk))
            out_data.append(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
            out_rows.append(vectors.shape[0])
            out_dims.append(vectors.shape[1])
        return {
            "chunk": np.array(out_chunks, dtype=np.int64),
            "data": np.array(out_data, dtype=object),
            "rows": np.array(out_rows, dtype=np.int64),
            "dim": np.array(out_dims, dtype=np.int64),
        }


def ray_chunk_encoder(
    ray: Any, model: DenseModel, texts: Sequence[str], device: str | None = None, backend: str | None = None
) -> Any:
    """An ``encode_chunks`` for ``DenseRetriever.index_corpus``: the missing chunks through Ray Data."""

    def encode_chunks(the_plan: Plan, todo: list[int]) -> Iterator[tuple[int, np.ndarray]]:
        if not todo:
            return
        items = [{"chunk": c, "texts": [texts[i] for i in the_plan.positions(c)]} for c in todo]
        gpus = int(ray.cluster_resources().get("GPU", 0))
        actors = max(1, min(len(todo), gpus or int(ray.cluster_resources().get("CPU", 1)) // 2 or 1))
        dataset = ray.data.from_items(items).map_batches(
            _ChunkEncoder,
            fn_constructor_args=(model, "cuda" if gpus else (device or "cpu"), backend),
            batch_size=1,
            concurrency=actors,
            num_gpus=1 if gpus else 0,
            num_cpus=1,
        )
        for row in dataset.iter_rows():
            vectors = np.frombuffer(row["data"], dtype=np.float32).reshape(int(row["rows"]), int(row["dim"]))
            yield int(row["chunk"]), vectors.copy()

    return encode_chunks


def encode_on_ray(
    ray: Any,
    dataset: Dataset,
    model_name: str,
    *,
    device: str | None = None,
    backend: str | None = None,
    progress: Any = None,
) -> DenseRetriever:
    """The dense index of a corpus, encoded on the cluster and written to the local cache."""
    model = _dense_model(dataset, model_name)
    retriever = DenseRetriever(model, device=device, backend=backend)
    texts = list(dataset.corpus.values())
    retriever.index_corpus(
        list(dataset.corpus),
        texts,
        dataset.fingerprint,
        progress,
        encode_chunks=ray_chunk_encoder(ray, model, texts, device, backend),
    )
    return retriever


def _remote_cell(dataset: Dataset, system: str, top_k: int) -> tuple[Run, Results]:
    return evaluate_cell(dataset, system, top_k)


def ray_cells(ray: Any) -> Any:
    """A sweep ``runner``: dense encodings first (Ray Data), then every cell as a Ray task."""

    def runner(datasets: dict[str, Dataset], cells: list[Cell], top_k: int) -> Iterator[tuple[Cell, Run, Results]]:
        for task, dataset in datasets.items():
            models = {
                model
                for cell in cells
                if cell.task == task
                for role, model in parse_system(cell.system).models()
                if role == "dense"
            }
            for model_name in sorted(models):
                encode_on_ray(ray, dataset, model_name)
        refs = {task: ray.put(dataset) for task, dataset in datasets.items()}
        remote = ray.remote(num_cpus=1)(_remote_cell)
        pending = {remote.remote(refs[cell.task], cell.system, top_k): cell for cell in cells}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            cell = pending.pop(done[0])
            run, results = ray.get(done[0])
            yield cell, run, results

    return runner
