"""``<system>>rerank:<model>@<k>`` (optionally ``+tail``): a cross-encoder reranks the top k of a
first-stage system, as the benchmark's reranker evaluation does (see ``r2med_core.retrieval.rerank``).

Why a kind, and why this name: the app's pages choose a reranker as a separate setting (the sidebar's
reranker and depth, ``rerank=``/``rerank_k=`` in a link), and the run that setting produces has
always been named ``reranked_name(first stage, model, k)``, e.g. ``bm25>rerank:bge-reranker@10``.
This kind parses exactly that name, so links, run files and cache entries made before keep working,
and a reranked system can now also be named wherever a system is (``eval --retriever``, sweeps, a
fusion's member). It stores no run of its own: the first stage is the cached run of its base (at
depth 100 or more, the run the pages use) and the cross-encoder's scores are cached by
``rerank.rerank_key``, the same entries the sidebar's reranker reads and writes.
"""

from __future__ import annotations

from r2med_core.cache import entry_path
from r2med_core.data import Dataset
from r2med_core.kinds.base import (
    MODEL_LOAD_SECONDS,
    Parse,
    SpecError,
    SystemKind,
    SystemSpec,
    estimate_seconds,
    register,
    rfind_top_level,
    run_system,
)
from r2med_core.kinds.roles import ModelRole, preset_or_allowed, register_role
from r2med_core.progress import Progress
from r2med_core.retrieval.rerank import RERANKER_PRESETS, rerank, rerank_key, rerank_label, reranked_name
from r2med_core.runs import Run
from r2med_core.settings import Settings

MARKER = ">rerank:"
TAIL = "+tail"
#: The first stage is retrieved at least this deep (the depth the app's pages run a system at).
FIRST_STAGE_DEPTH = 100
RERANK_PAIRS_PER_S = 6.0  # a cross-encoder on the CPU


def rerank_seconds(n_queries: int, depth: int) -> float:
    """The cost of reranking ``depth`` documents per query with a cross-encoder on the CPU."""
    return MODEL_LOAD_SECONDS + n_queries * depth / RERANK_PAIRS_PER_S


def rerank_differences(model: str, keep_tail: bool) -> list[str]:
    """How a reranking departs from the benchmark's (empty: one of its rerankers, top k only)."""
    out = []
    if model not in RERANKER_PRESETS:
        out.append(f"reranker {model!r} is not one the benchmark evaluated")
    if keep_tail:
        out.append("the first-stage tail is kept below the reranked k (the benchmark's run holds only k)")
    return out


def reranked_spec(base: SystemSpec, model: str, k: int, keep_tail: bool = False) -> SystemSpec:
    return SystemSpec("rerank", model, members=(base,), params=(("k", k), ("tail", keep_tail)))


@register_role
class CrossEncoderRole(ModelRole):
    """A cross-encoder reranker: one of its presets, or an id or path the operator allows; its
    scores (the "rerank" cache) may travel between machines."""

    name = "reranker"
    cache_kinds = ("rerank",)

    def refusal(self, model: str, settings: Settings) -> str | None:
        return preset_or_allowed(model, RERANKER_PRESETS, settings)

    def provenance_ids(self, model: str) -> list[str]:
        return [RERANKER_PRESETS.get(model, model)]


@register
class RerankKind(SystemKind):
    name = "rerank"
    grammar = "SYSTEM>rerank:MODEL@K[+tail] (a cross-encoder reranks SYSTEM's top K)"
    priority = 10
    stores_run = False  # the first stage and the scores are cached; the reordering is instant

    def parse(self, text: str, parse: Parse) -> SystemSpec | None:
        at = rfind_top_level(text, MARKER)
        if at < 0:
            return None
        rest = text[at + len(MARKER) :]
        keep_tail = rest.endswith(TAIL)
        rest = rest.removesuffix(TAIL)
        model, _, depth = rest.rpartition("@")
        if not model or not depth.isdigit() or int(depth) < 1 or depth != str(int(depth)):
            raise SpecError(f"{text!r}: a reranking is SYSTEM>rerank:MODEL@K with K a whole number of at least 1")
        return reranked_spec(parse(text[:at]), model, int(depth), keep_tail)

    def format(self, spec: SystemSpec) -> str:
        return reranked_name(str(spec.members[0]), spec.name, spec.param("k"), spec.param("tail"))

    def label(self, spec: SystemSpec) -> str:
        return f"{spec.members[0].label} → {rerank_label(spec.name, spec.param('k'), spec.param('tail'))}"

    def compute(self, dataset: Dataset, spec: SystemSpec, k: int, progress: Progress | None) -> Run:
        depth = spec.param("k")
        first = run_system(dataset, spec.members[0], k=max(k, depth, FIRST_STAGE_DEPTH))
        reranked = rerank(first, dataset, spec.name, depth, keep_tail=spec.param("tail"), progress=progress)
        return Run(str(spec), {q: r[:k] for q, r in reranked.rankings.items()}, reranked.seconds, reranked.usage)

    def models(self, spec: SystemSpec) -> tuple[tuple[str, str], ...]:
        return (*super().models(spec), (CrossEncoderRole.name, spec.name))

    def published_kind(self, spec: SystemSpec) -> str | None:
        return "reranker"

    def differences(self, spec: SystemSpec, dataset_name: str | None) -> list[str]:
        out = super().differences(spec, dataset_name)
        return out + [d for d in rerank_differences(spec.name, spec.param("tail")) if d not in out]

    def estimate_seconds(self, dataset: Dataset, spec: SystemSpec, k: int) -> float:
        depth = spec.param("k")
        base, first_k = spec.members[0], max(k, depth, FIRST_STAGE_DEPTH)
        first = estimate_seconds(dataset, base, first_k)
        if first == 0.0:  # the first stage is on disk: the scores may be too
            key = rerank_key(run_system(dataset, base, k=first_k), dataset, spec.name, depth)
            if entry_path("rerank", key).is_dir():
                return 0.0
        return first + rerank_seconds(len(dataset.queries), depth)
