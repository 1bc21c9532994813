"""Static embeddings as a system: ``static:minilm`` (distilled offline from the offline MiniLM),
``static:<preset>`` (the static models MTEB ran on R2MED) or ``static:<hub id or local path>``;
``+METHOD:LLM`` retrieves with a precomputed rewrite, as a dense model does.

Why a kind of its own and not a dense preset: its model is made (distilled) or fetched by other code,
its speed is minutes where a transformer's is hours, and every user who picks it should read its
measured cost and quality beside it (``retrieval.static.cost_and_quality``). Everything after the
encoder is the dense kind's (queries, rewrites, the corpus cache, cosine search), so it subclasses it.
"""

from __future__ import annotations

from r2med_core.data import Dataset
from r2med_core.kinds.base import MODEL_LOAD_SECONDS, Parse, Rewrite, SpecError, SystemSpec, register, split_rewrite
from r2med_core.kinds.dense import DenseKind
from r2med_core.kinds.roles import ModelRole, ProgressReader, preset_or_allowed, register_role
from r2med_core.progress import Progress
from r2med_core.retrieval.encoding import busy_factor, measured_docs_per_s
from r2med_core.retrieval.encoding import status as encoding_status
from r2med_core.retrieval.static import (
    DISTILLED_CACHE,
    STATIC_PRESETS,
    StaticRetriever,
    canonical_static,
    cost_and_quality,
    is_distilled,
    measured,
    require_model2vec,
    static_source,
)
from r2med_core.retrieval.static import measured_docs_per_s as static_docs_per_s
from r2med_core.runs import Run
from r2med_core.settings import Settings

NOT_BENCHMARK = "static embeddings are not the benchmark's setting (the R2MED paper ran no static model)"
MTEB_NOTE = "MTEB ran it on R2MED with its own settings; the paper did not"


@register_role
class StaticRole(ModelRole):
    """A static model: a preset, or a hub id or path the operator allows; its corpus encoding (the
    "dense" cache) and, for ``minilm``, its distilled model ("static-model") may travel between machines."""

    name = "static"
    cache_kinds = ("dense", DISTILLED_CACHE)

    def refusal(self, model: str, settings: Settings) -> str | None:
        return preset_or_allowed(model, STATIC_PRESETS, settings)

    def provenance_ids(self, model: str) -> list[str]:
        source = static_source(model)
        return ["offline:all-MiniLM-L6-v2 (distilled with model2vec)"] if source == "distill:minilm" else [source]

    def progress_reader(self, dataset: Dataset, model: str) -> ProgressReader | None:
        key = StaticRetriever(model).cache_key(dataset.fingerprint)
        return lambda: encoding_status(key)


@register
class StaticKind(DenseKind):
    name = "static"
    grammar = f"static:<preset ({', '.join(STATIC_PRESETS)}) or a model2vec / static hub id or local path>"
    priority = 95
    #: Encoding is a tokenizer and a Python loop of table means: background jobs take turns (the GIL).
    holds_gil = True

    def parse(self, text: str, parse: Parse) -> SystemSpec | None:
        core, rewrite = split_rewrite(text)
        if not core.startswith("static:"):
            return None
        if len(core) == 7:
            raise SpecError(f"static: names no model; expected {self.grammar}")
        return SystemSpec("static", canonical_static(core[7:]), rewrite)

    def format(self, spec: SystemSpec) -> str:
        return f"static:{spec.name}"

    def label(self, spec: SystemSpec) -> str:
        preset = STATIC_PRESETS.get(spec.name)
        return preset.label if preset else f"static {spec.name}"

    def with_rewrite(self, spec: SystemSpec, rewrite: Rewrite | None) -> SystemSpec:
        return SystemSpec("static", spec.name, rewrite)

    def unloaded(self, dataset: Dataset, spec: SystemSpec, progress: Progress | None = None) -> StaticRetriever:
        return StaticRetriever(spec.name, progress)

    def compute(self, dataset: Dataset, spec: SystemSpec, k: int, progress: Progress | None) -> Run:
        require_model2vec()  # before any progress is shown: the message names the extra to install
        return super().compute(dataset, spec, k, progress)

    def models(self, spec: SystemSpec) -> tuple[tuple[str, str], ...]:
        return ((StaticRole.name, spec.name),)

    def differences(self, spec: SystemSpec, dataset_name: str | None) -> list[str]:
        if spec.name == "minilm":
            return [cost_and_quality()]
        if spec.name in STATIC_PRESETS:
            return [f"{NOT_BENCHMARK}; {MTEB_NOTE}"]
        return [NOT_BENCHMARK]

    def cost_notes(self, dataset: Dataset, spec: SystemSpec, k: int) -> list[str]:
        return [cost_and_quality()] if spec.name == "minilm" else [NOT_BENCHMARK]

    def docs_per_s(self, dataset: Dataset, spec: SystemSpec, device: str) -> float:
        here = measured_docs_per_s(f"static:{spec.name}", device)
        if here:
            return here / busy_factor()
        characters = sum(len(text) for text in dataset.corpus.values()) / max(len(dataset.corpus), 1)
        return (static_docs_per_s(characters) or 1000.0) / busy_factor()  # unmeasured: a static model's order

    def estimate_seconds(self, dataset: Dataset, spec: SystemSpec, k: int) -> float:
        seconds = super().estimate_seconds(dataset, spec, k)
        if spec.name == "minilm" and not is_distilled():  # the distillation's measured CPU time, under today's load
            made = measured()
            seconds += float(made.get("distill_cpu_seconds") or made.get("distill_seconds", 120.0)) * busy_factor()
        return seconds - MODEL_LOAD_SECONDS + 0.5  # a lookup table loads in well under a second
