"""Dense retrievers: a preset (``minilm``, ``e5``, ``nv`` …) or ``dense:<model id or path>``, with the
benchmark's per-task instructions; ``+METHOD:LLM`` retrieves with a precomputed rewrite."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from r2med_core.cache import entry_path
from r2med_core.data import Dataset
from r2med_core.kinds.base import (
    MODEL_LOAD_SECONDS,
    Parse,
    Rewrite,
    SystemKind,
    SystemSpec,
    done,
    kept_loaded,
    register,
    retrieved_queries,
    rewritten_texts,
    scaled,
    split_rewrite,
)
from r2med_core.kinds.roles import ModelRole, ProgressReader, preset_or_allowed, register_role
from r2med_core.llm.rewrite import dense_query
from r2med_core.progress import Progress
from r2med_core.retrieval.dense import (
    MTEB_PRESETS,
    MTEB_SETTING,
    PRESETS,
    REASONEMBED_PRESETS,
    REASONEMBED_SETTING,
    DenseModel,
    DenseRetriever,
    canonical_preset,
    resolve_model,
)
from r2med_core.retrieval.encoding import docs_per_s, finished_docs
from r2med_core.retrieval.encoding import status as encoding_status
from r2med_core.runs import Ranking, Run
from r2med_core.settings import Settings
from r2med_core.tasks import RETRIEVER_NAMES, TASKS, task_instructions

#: Dense presets configured as the benchmark ran them (model, pooling, cosine, per-task instruction,
#: document prefix, max length): the paper's retrievers, named as published.
BENCHMARK_DENSE_PRESETS: frozenset[str] = frozenset(RETRIEVER_NAMES) - {"bm25"}
#: The dense presets whose query instruction is per task (a non-R2MED dataset gets a generic one).
TASK_INSTRUCTION_PRESETS: frozenset[str] = (
    frozenset({"inst-l", "inst-xl", "bmr-410m", "bmr-2b", "bmr-7b", "e5", "grit", "sfr", "nv"}) | REASONEMBED_PRESETS
)


def dense_model(dataset: Dataset, model_name: str) -> DenseModel:
    """The model as it runs on this dataset: prompts filled with the benchmark's instructions for an
    R2MED task, or this app's generic instruction elsewhere (see ``systems.dense_instruction_notes``)."""
    return resolve_model(model_name).with_instruction(task_instructions(dataset.name))


def dense_retriever(dataset: Dataset, model_name: str, progress: Progress | None = None) -> DenseRetriever:
    """A dense retriever with its corpus index loaded (encoded once, then cached on disk)."""
    return indexed(DenseRetriever(dense_model(dataset, model_name)), dataset, progress)


def indexed(retriever: DenseRetriever, dataset: Dataset, progress: Progress | None = None) -> DenseRetriever:
    """The retriever with the dataset's corpus index loaded (encoded once, then cached on disk)."""
    retriever.index_corpus(list(dataset.corpus), list(dataset.corpus.values()), dataset.fingerprint, progress)
    return retriever


def dense_query_vectors(
    retriever: DenseRetriever, dataset: Dataset, rewrite: Rewrite | None, progress: Progress | None = None
) -> np.ndarray:
    """Query embeddings as the benchmark makes them; with a rewrite, query2doc encodes one joined text
    and the others average the query's and the generated text's embeddings (the instruction on the
    query half only, or on both for Instructor, NV-Embed and GritLM); cosine follows at search."""
    qids = list(dataset.queries)
    if rewrite is None:
        return retriever.encode([dataset.queries[q] for q in qids], "query", progress)
    hy_docs = rewritten_texts(dataset, rewrite)
    plans = [
        dense_query(rewrite[0], rewrite[1], dataset.queries[q], hy_docs[q]).texts
        if q in hy_docs
        else (dataset.queries[q],)
        for q in qids
    ]
    return retriever.encode_queries(plans, progress)


@register_role
class DenseRole(ModelRole):
    """A dense encoder: a preset, or an id or path the operator allows; its corpus encoding (the
    "dense" cache) is what a background job waits for, so the job shows its documents/s and ETA."""

    name = "dense"
    cache_kinds = ("dense",)

    def refusal(self, model: str, settings: Settings) -> str | None:
        return preset_or_allowed(model, PRESETS, settings)

    def provenance_ids(self, model: str) -> list[str]:
        resolved = resolve_model(model)
        return [resolved.query_model, *([resolved.doc_model] if resolved.doc_model else [])]

    def progress_reader(self, dataset: Dataset, model: str) -> ProgressReader | None:
        key = DenseRetriever(dense_model(dataset, model)).cache_key(dataset.fingerprint)
        return lambda: encoding_status(key)


@register
class DenseKind(SystemKind):
    name = "dense"
    grammar = f"a dense preset ({', '.join(PRESETS)}) or dense:<model id or path>, optionally followed by +METHOD:LLM"
    priority = 95
    typed_text = True

    def parse(self, text: str, parse: Parse) -> SystemSpec | None:
        core, rewrite = split_rewrite(text)
        if core.startswith("dense:") and len(core) > 6:
            return SystemSpec("dense", core[6:], rewrite)
        preset = canonical_preset(core)
        return SystemSpec("dense", preset, rewrite) if preset else None

    def format(self, spec: SystemSpec) -> str:
        return spec.name if spec.name in PRESETS else f"dense:{spec.name}"

    def label(self, spec: SystemSpec) -> str:
        return PRESETS[spec.name].label if spec.name in PRESETS else spec.name

    def with_rewrite(self, spec: SystemSpec, rewrite: Rewrite | None) -> SystemSpec:
        return SystemSpec("dense", spec.name, rewrite)

    def key_parts(self, dataset: Dataset, spec: SystemSpec, k: int) -> dict[str, object]:
        # The model exactly as it runs (instruction filled in), so a changed prompt never reuses a run.
        return {"model": self.unloaded(dataset, spec).cache_key(dataset.fingerprint)}

    def unloaded(self, dataset: Dataset, spec: SystemSpec, progress: Progress | None = None) -> DenseRetriever:
        """The retriever before its corpus is indexed (a kind with another encoder returns its own)."""
        return DenseRetriever(dense_model(dataset, spec.name))

    def loaded(self, dataset: Dataset, spec: SystemSpec, progress: Progress | None = None) -> DenseRetriever:
        """The retriever with its corpus index loaded (encoded once, then cached on disk)."""
        return indexed(self.unloaded(dataset, spec, progress), dataset, progress)

    def compute(self, dataset: Dataset, spec: SystemSpec, k: int, progress: Progress | None) -> Run:
        started = time.perf_counter()
        queries = retrieved_queries(dataset, spec.rewrite)
        qids = list(queries)
        dense = self.loaded(dataset, spec, scaled(progress, 0.0, 0.9))
        # with a rewrite, only the queries it holds, with its query text (the benchmark's rule)
        retrieved = replace(dataset, queries=queries) if spec.rewrite else dataset
        vectors = dense_query_vectors(dense, retrieved, spec.rewrite, scaled(progress, 0.9, 1.0))
        rankings = dense.search_vectors(vectors, k, query_ids=qids)  # ignore_identical_ids, as BEIR
        hy_docs = dataset.rewrites.get(spec.rewrite, {}) if spec.rewrite else {}
        blank = [not queries[q].strip() and not hy_docs.get(q, "").strip() for q in qids]
        rankings = [[] if empty else ranking for ranking, empty in zip(rankings, blank)]
        done(progress, spec)
        return Run(str(spec), dict(zip(qids, rankings)), time.perf_counter() - started)

    def search(
        self, dataset: Dataset, spec: SystemSpec, text: str, k: int, hy_doc: str | None, progress: Progress | None
    ) -> Ranking:
        retriever = kept_loaded(dataset, spec, lambda: self.loaded(dataset, spec, progress))
        texts = dense_query(*spec.rewrite, text, hy_doc or "").texts if spec.rewrite else (text,)
        return retriever.search_vectors(retriever.encode_queries([texts]), k)[0]

    def models(self, spec: SystemSpec) -> tuple[tuple[str, str], ...]:
        return ((DenseRole.name, spec.name),)

    def published_kind(self, spec: SystemSpec) -> str | None:
        return "dense"

    def differences(self, spec: SystemSpec, dataset_name: str | None) -> list[str]:
        if spec.name == "minilm":
            return ["MiniLM is the offline default, not a paper model"]
        if spec.name in REASONEMBED_PRESETS:
            found = [f"{spec.name} runs in {REASONEMBED_SETTING} (instructions, pooling, lengths), not the benchmark's"]
        elif spec.name in MTEB_PRESETS:
            return [
                f"{spec.name} runs {MTEB_SETTING} (its generic instruction on queries and documents, 512 tokens), "
                "not the benchmark's"
            ]
        elif spec.name not in BENCHMARK_DENSE_PRESETS:
            return [f"dense model {spec.name!r} is not one of the benchmark's dense configurations"]
        else:
            found = []
        if spec.name in TASK_INSTRUCTION_PRESETS and dataset_name is not None and dataset_name not in TASKS:
            found.append(f"{dataset_name} is not an R2MED task: a generic query instruction replaces the per-task one")
        return found

    def estimate_seconds(self, dataset: Dataset, spec: SystemSpec, k: int) -> float:
        n_docs, n_queries = len(dataset.corpus), len(dataset.queries)
        retriever = self.unloaded(dataset, spec)
        key = retriever.cache_key(dataset.fingerprint)
        speed = self.docs_per_s(dataset, spec, retriever.hardware.device)
        queries = n_queries * (2 if spec.rewrite else 1) / (speed * 4)  # queries are short
        if (entry_path("dense", key) / "manifest.json").is_file():
            return MODEL_LOAD_SECONDS + queries
        left = n_docs - finished_docs(key, n_docs)
        return MODEL_LOAD_SECONDS + left / speed + queries

    def docs_per_s(self, dataset: Dataset, spec: SystemSpec, device: str) -> float:
        """The encoding speed to expect here (measured on this machine, else the table's figure)."""
        return docs_per_s(spec.name, device)
