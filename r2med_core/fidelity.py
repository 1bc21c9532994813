"""Say what reproduces what: is a local setting the benchmark's, and if not, how does it differ?

A local number is comparable with a published one only when it was produced the way the benchmark
produced it. ``fidelity`` looks at a system name (and the rewrite, reranker and live-generation
settings that went with it) and lists every way it departs from R2MED's protocol; an empty list
means the setting is the benchmark's. The app shows the list as a small badge next to local
numbers, and the README's "Fidelity" table says the same thing per system kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .prompts import OFFICIAL_MAX_TOKENS, official_sampling
from .published import RETRIEVER_NAMES
from .rerank import RERANKER_PRESETS
from .systems import SpecError, SystemSpec, parse_system
from .tasks import TASKS

#: Dense presets configured as the benchmark ran them (model, pooling, cosine, per-task instruction,
#: document prefix, max length): the paper's retrievers, named as published. The preset table
#: itself lives in ``retrieval/dense.py``.
BENCHMARK_DENSE_PRESETS: frozenset[str] = frozenset(RETRIEVER_NAMES) - {"bm25"}
#: Of those, the ones whose query instruction is per task (a non-R2MED dataset gets a generic one).
TASK_INSTRUCTION_PRESETS: frozenset[str] = frozenset(
    {"inst-l", "inst-xl", "bmr-410m", "bmr-2b", "bmr-7b", "e5", "grit", "sfr", "nv"}
)

_BM25_DIFFERENCES = {
    "bm25s": "bm25s's own tokenizer and query weighting, not the benchmark's Lucene analyzer and gensim weighting",
    "bm25-okapi": "rank_bm25's BM25Okapi, not the benchmark's BM25 (Lucene analyzer, gensim LuceneBM25Model)",
}


@dataclass(frozen=True)
class Fidelity:
    """How a local setting relates to the benchmark's: ``differences`` is empty when it is the same."""

    setting: str
    differences: tuple[str, ...] = ()

    @property
    def is_benchmark(self) -> bool:
        return not self.differences

    def badge(self) -> str:
        """A short marker for a local number: empty for the benchmark's setting."""
        return "" if self.is_benchmark else "≠ benchmark"

    def explain(self) -> str:
        """One line: the benchmark's setting, or each way this one differs."""
        if self.is_benchmark:
            return "the benchmark's setting"
        return "not the benchmark's setting: " + "; ".join(self.differences)


def _retriever_differences(spec: SystemSpec, dataset_name: str | None) -> list[str]:
    if spec.kind == "fusion":
        out = ["reciprocal-rank fusion: a combination the benchmark did not evaluate"]
        for member in spec.members:
            out += [d for d in _retriever_differences(member, dataset_name) if d not in out]
        return out
    if spec.kind == "bm25":
        return [_BM25_DIFFERENCES[spec.name]] if spec.name in _BM25_DIFFERENCES else []
    if spec.name == "minilm":
        return ["MiniLM is the offline default, not a paper model"]
    if spec.name not in BENCHMARK_DENSE_PRESETS:
        return [f"dense model {spec.name!r} is not one of the benchmark's dense configurations"]
    if spec.name in TASK_INSTRUCTION_PRESETS and dataset_name is not None and dataset_name not in TASKS:
        return [f"{dataset_name} is not an R2MED task: a generic query instruction replaces the per-task one"]
    return []


def _live_differences(method: str, live: Mapping[str, Any], dataset_name: str | None) -> list[str]:
    """What a live generation's recorded settings change (see ``generation.live_generation_settings``)."""
    out: list[str] = []
    if live.get("base_url") == "local":
        out.append("rewrites from the offline demo model (demo quality)")
    if live.get("prompts") != "official":
        out.append("live rewrites with R2MED Explorer's own prompts, not the benchmark's")
    elif dataset_name is not None and dataset_name not in TASKS:
        out.append("live rewrites with the official prompts of a same-family task (not an R2MED task)")
    if live.get("prompts") == "official" and method == "query2doc" and not live.get("examples"):
        out.append("query2doc zero-shot: the benchmark's prompt is few-shot")
    sampling = {k: live.get(k) for k in ("temperature", "top_p", "seed") if live.get(k) is not None}
    if live.get("base_url") != "local" and sampling != official_sampling(str(live.get("model", ""))):
        shown = ", ".join(f"{k} {v}" for k, v in sampling.items()) or "default"
        out.append(f"live rewrites sampled with {shown}, not the benchmark's sampling")
    budget = live.get("max_tokens")
    if live.get("base_url") != "local" and budget is not None and budget != OFFICIAL_MAX_TOKENS:
        out.append(f"live rewrites cut at {budget} tokens, not the benchmark's {OFFICIAL_MAX_TOKENS}")
    return out


def fidelity(
    system: str | SystemSpec,
    *,
    dataset_name: str | None = None,
    reranker: str | None = None,
    keep_tail: bool = False,
    live: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> Fidelity:
    """Whether ``system`` (with its rewrite, an optional reranker) runs as the benchmark ran it.

    ``dataset_name``: instruction models use a generic instruction off the 8 R2MED tasks.
    ``live``: for rewrites generated live here, the settings they were made with, by ``(method, llm)``
    (a precomputed rewrite file combines by the benchmark's own rules).
    """
    name = str(system)
    try:
        spec = parse_system(system) if isinstance(system, str) else system
    except SpecError:
        return Fidelity(name, ("a run made elsewhere or an unknown system: its setting is not known",))
    differences = _retriever_differences(spec.base, dataset_name)
    rewrites = {m.rewrite for m in (spec.members or (spec,)) if m.rewrite}
    for rewrite in sorted(rewrites):
        settings = (live or {}).get(rewrite)
        if settings is not None:
            differences += [d for d in _live_differences(rewrite[0], settings, dataset_name) if d not in differences]
    if reranker:
        if reranker not in RERANKER_PRESETS:
            differences.append(f"reranker {reranker!r} is not one the benchmark evaluated")
        if keep_tail:
            differences.append("the first-stage tail is kept below the reranked k (the benchmark's run holds only k)")
    return Fidelity(name, tuple(differences))
