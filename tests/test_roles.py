"""Model roles (``r2med_core/kinds/roles.py``): a new kind of MODEL is one file.

This file defines a toy learned-sparse retriever, ``sparse:<model>``, whose models play a role no
built-in kind has (``sparse``), and registers both here and nowhere else. The server's rules for it
(allowed or refused per the operator's settings), the ids its provenance records, the export and
import of its cache entries, and the progress its background job shows all come from that role:
nothing else in the project names it.
"""

from __future__ import annotations

import shutil
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from r2med_core.cache import cache_root, cached
from r2med_core.cli import main
from r2med_core.compute.jobs import REGISTRY, run_job_key, start_run
from r2med_core.data import Dataset, load_demo
from r2med_core.kinds import base
from r2med_core.kinds.base import Parse, SystemKind, SystemSpec, done, register, retrieved_queries, run_system
from r2med_core.kinds.roles import (
    ModelRole,
    ProgressReader,
    model_role,
    preset_or_allowed,
    register_role,
    unregister_role,
)
from r2med_core.reporting.provenance import run_provenance, system_models
from r2med_core.retrieval import encoding
from r2med_core.runs import Run
from r2med_core.server.access import system_refusal, vet_link_systems
from r2med_core.server.portable import entries, import_entries
from r2med_core.settings import Settings, load_settings

TASK = "clinical-case"
SPARSE_PRESETS = {"toy-splade": "naver/toy-splade-v3"}
DIMENSIONS = 64


def _weights(texts: list[str]) -> np.ndarray:
    """A stand-in for a SPLADE encoder: each text's hashed terms as a non-negative weight vector."""
    out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
    for row, text in enumerate(texts):
        for term in text.lower().split():
            out[row, zlib.crc32(term.encode()) % DIMENSIONS] += 1.0
    return out


def _index_key(dataset: Dataset, model: str) -> dict[str, Any]:
    return {"sparse_model": model, "corpus": dataset.fingerprint}


class SparseRole(ModelRole):
    """A learned-sparse encoder: its presets, or what the operator allows; its index travels."""

    name = "sparse"
    cache_kinds = ("sparse",)

    def refusal(self, model: str, settings: Settings) -> str | None:
        return preset_or_allowed(model, SPARSE_PRESETS, settings)

    def provenance_ids(self, model: str) -> list[str]:
        return [SPARSE_PRESETS.get(model, model)]

    def progress_reader(self, dataset: Dataset, model: str) -> ProgressReader | None:
        key = _index_key(dataset, model)
        return lambda: encoding.status(key)


class SparseKind(SystemKind):
    """``sparse:<model>``: the corpus encoded once (resumable, in the "sparse" cache), ranked by dot product."""

    name = "sparse"
    grammar = "sparse:<model> (a test kind: a toy learned-sparse retriever)"
    #: Corpus texts encoded so far (to tell an imported index from a rebuilt one).
    encoded: ClassVar[list[int]] = []
    #: When set, encoding waits before its second batch until the test releases it.
    gate: ClassVar[threading.Event | None] = None

    def parse(self, text: str, parse: Parse) -> SystemSpec | None:
        return SystemSpec("sparse", text[len("sparse:") :]) if text.startswith("sparse:") else None

    def format(self, spec: SystemSpec) -> str:
        return f"sparse:{spec.name}"

    def label(self, spec: SystemSpec) -> str:
        return f"sparse ({spec.name})"

    def models(self, spec: SystemSpec) -> tuple[tuple[str, str], ...]:
        return ((SparseRole.name, spec.name),)

    def compute(self, dataset: Dataset, spec: SystemSpec, k: int, progress: Any) -> Run:
        key = _index_key(dataset, spec.name)

        def encode(texts: list[str]) -> np.ndarray:
            if SparseKind.gate is not None and SparseKind.encoded:
                assert SparseKind.gate.wait(60), "the test never released the encoding"
            SparseKind.encoded.append(len(texts))
            return _weights(texts)

        def build(folder: Path) -> None:
            texts = list(dataset.corpus.values())
            np.save(folder / "weights.npy", encoding.encode_corpus(encode, texts, key, progress=progress))

        index = cached("sparse", key, build, lambda folder: np.load(folder / "weights.npy"))
        doc_ids, queries = list(dataset.corpus), retrieved_queries(dataset, None)
        scores = _weights(list(queries.values())) @ index.T
        rankings = {
            qid: [(doc_ids[i], float(row[i])) for i in np.argsort(-row, kind="stable")[:k]]
            for qid, row in zip(queries, scores)
        }
        done(progress, spec)
        return Run(str(spec), rankings, 0.0)


@pytest.fixture
def sparse_kind() -> Iterator[type[SparseKind]]:
    register_role(SparseRole)
    register(SparseKind)
    SparseKind.encoded, SparseKind.gate = [], None
    yield SparseKind
    base.unregister("sparse")
    unregister_role("sparse")


def test_the_operator_settings_decide_whether_a_link_may_run_a_new_role_model(sparse_kind: type[SparseKind]) -> None:
    plain = load_settings({})
    assert system_refusal("sparse:toy-splade", plain) is None  # the role's preset
    assert system_refusal("rrf(bm25,sparse:toy-splade)", plain) is None
    refused = system_refusal("sparse:someone/huge", plain)
    assert refused is not None and "R2MED_ALLOW_MODELS" in refused
    assert system_refusal("sparse:someone/huge", load_settings({"R2MED_ALLOW_MODELS": "someone/huge"})) is None
    demo = load_settings({"R2MED_DEMO_MODE": "1", "R2MED_ALLOW_MODELS": "*"})
    assert system_refusal("sparse:someone/huge", demo) == "this read-only demo runs only the preset models"
    # the presets of one role are not another's: a sparse preset is no dense or cross-encoder model
    assert system_refusal("dense:toy-splade", plain) is not None
    assert system_refusal("bm25>rerank:toy-splade@10", plain) is not None
    vetted = vet_link_systems(["sparse:toy-splade", "sparse:/models/mine"], plain, offered=["bm25"])
    assert vetted.kept == ["sparse:toy-splade"] and len(vetted.notes) == 1

    unregister_role("sparse")  # a kind whose role nobody registered: its models never run on a server
    assert system_refusal("sparse:toy-splade", plain) == "this server runs no sparse models"


def test_each_built_in_role_allows_only_its_own_presets() -> None:
    plain = load_settings({})
    assert system_refusal("bm25>rerank:bge-reranker@10", plain) is None
    assert system_refusal("minilm", plain) is None
    # a dense preset's name used to pass as a cross-encoder (it fell back on the dense presets)
    assert system_refusal("bm25>rerank:minilm@10", plain) is not None
    assert system_refusal("dense:bge-reranker", plain) is not None
    assert model_role("llm").refusal("gpt-4o", plain) is None
    assert model_role("llm").refusal("gpt-4o", load_settings({"R2MED_DEMO_MODE": "1"})) is not None


def test_provenance_records_the_ids_the_new_role_names(sparse_kind: type[SparseKind]) -> None:
    assert system_models("sparse:toy-splade") == (["naver/toy-splade-v3"], [])
    assert system_models("sparse:someone/mine") == (["someone/mine"], [])
    models, _ = system_models("rrf(bm25,sparse:toy-splade)>rerank:bge-reranker@10")
    assert models == ["naver/toy-splade-v3", "BAAI/bge-reranker-v2-m3"]
    provenance = run_provenance(load_demo(TASK), "sparse:toy-splade")
    assert [model["id"] for model in provenance.models] == ["naver/toy-splade-v3"]


def test_the_new_role_cache_entries_travel_between_machines(sparse_kind: type[SparseKind], tmp_path: Path) -> None:
    dataset = load_demo(TASK)
    first = run_system(dataset, "sparse:toy-splade")
    assert sum(sparse_kind.encoded) == len(dataset.corpus)
    archive = tmp_path / "sparse.tar.gz"
    assert main(["export", "--output", str(archive), "--kind", "sparse"]) == 0  # the CLI knows its cache kind

    shutil.rmtree(cache_root())  # another machine: an empty cache
    report = import_entries(archive)
    assert not report.rejected and [entry.split("/")[0] for entry in report.added] == ["sparse"]
    sparse_kind.encoded = []
    again = run_system(load_demo(TASK), "sparse:toy-splade")
    assert again.rankings == first.rankings and sparse_kind.encoded == []  # the imported index, not a rebuild
    # by default every kind that travels is exported: the stored run and the role's index
    assert {folder.parent.name for folder in entries()} == {"sparse", "runs"}


def test_a_background_job_shows_the_new_role_progress(sparse_kind: type[SparseKind]) -> None:
    dataset = load_demo(TASK)
    sparse_kind.gate = threading.Event()
    job = start_run(dataset, "sparse:toy-splade")
    assert REGISTRY.get(run_job_key(dataset, "sparse:toy-splade")) is job
    seen = None
    deadline = time.monotonic() + 30
    while seen is None and time.monotonic() < deadline:
        status = job.status()
        seen = status if status.total is not None else None
        time.sleep(0.1)
    sparse_kind.gate.set()
    assert seen is not None, "the job never showed the encoding's documents"
    assert seen.total == len(dataset.corpus) and 0 < seen.done < seen.total  # type: ignore[operator]
    assert job.wait(60) and job.state == "done", job.error
    assert job.result.rankings == run_system(dataset, "sparse:toy-splade").rankings
