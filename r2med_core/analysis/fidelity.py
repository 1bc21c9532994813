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

from r2med_core.kinds.dense import BENCHMARK_DENSE_PRESETS, TASK_INSTRUCTION_PRESETS
from r2med_core.kinds.rerank import rerank_differences
from r2med_core.llm.prompts import official_max_tokens, official_sampling
from r2med_core.systems import SpecError, SystemSpec, leaf_systems, parse_system
from r2med_core.tasks import TASKS

# Re-exported: the dense presets configured as the benchmark ran them, and those with a per-task
# instruction (each kind says how it departs from the protocol: ``SystemKind.differences``).
__all__ = ["BENCHMARK_DENSE_PRESETS", "TASK_INSTRUCTION_PRESETS", "Fidelity", "fidelity"]


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
    return spec.system_kind.differences(spec, dataset_name)


def _live_differences(
    method: str, live: Mapping[str, Any], dataset_name: str | None, made: str = "live rewrites"
) -> list[str]:
    """What a generation's recorded settings change (a live one's: ``generation.live_generation_settings``;
    a shipped set's: its ``provenance.json``). ``made``: how the rewrites are named ("live rewrites",
    "rewrites precomputed by MODEL")."""
    out: list[str] = []
    if live.get("base_url") == "local":
        out.append("rewrites from the offline demo model (demo quality)")
    if live.get("prompts") != "official":
        out.append(f"{made} with R2MED Explorer's own prompts, not the benchmark's")
    elif dataset_name is not None and dataset_name not in TASKS:
        out.append(f"{made} with the official prompts of a same-family task (not an R2MED task)")
    if live.get("prompts") == "official" and method == "query2doc" and not live.get("examples"):
        out.append("query2doc zero-shot: the benchmark's prompt is few-shot")
    sampling = {k: live.get(k) for k in ("temperature", "top_p", "seed") if live.get(k) is not None}
    if live.get("base_url") != "local" and sampling != official_sampling(str(live.get("model", ""))):
        shown = ", ".join(f"{k} {v}" for k, v in sampling.items()) or "default"
        out.append(f"{made} sampled with {shown}, not the benchmark's sampling")
    budget, official = live.get("max_tokens"), official_max_tokens(str(live.get("model", "")))
    if live.get("base_url") != "local" and budget != official:
        shown = f"{made} cut at {budget} tokens" if budget is not None else f"{made} without a token limit"
        out.append(f"{shown}, not the benchmark's {official}" if official else f"{shown}; the benchmark sent no limit")
    return out


def _recorded_settings(made: Mapping[str, Any]) -> dict[str, Any] | None:
    """The settings an LLM-made rewrite file records (``r2med_core.llm.provenance``), in the shape of a live
    generation's (``generation.live_generation_settings``); None when it records none."""
    sampling = made.get("sampling")
    if made.get("made_by") != "llm" or not isinstance(sampling, Mapping):
        return None
    return {"model": made.get("model", ""), "prompts": made.get("prompt_set"), **sampling}


def fidelity(
    system: str | SystemSpec,
    *,
    dataset_name: str | None = None,
    reranker: str | None = None,
    keep_tail: bool = False,
    live: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
    provenance: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> Fidelity:
    """Whether ``system`` (with its rewrite, an optional reranker) runs as the benchmark ran it.

    ``dataset_name``: instruction models use a generic instruction off the 8 R2MED tasks.
    ``live``: for rewrites generated live here, the settings they were made with, by ``(method, llm)``
    (a precomputed rewrite file combines by the benchmark's own rules). ``provenance``: what made a
    precomputed rewrite file where it says so (``Dataset.rewrite_provenance``): a set written by hand is
    never the benchmark's setting, and an LLM's is judged by the sampling and prompts it records.
    """
    name = str(system)
    try:
        spec = parse_system(system) if isinstance(system, str) else system
    except SpecError:
        return Fidelity(name, ("a run made elsewhere or an unknown system: its setting is not known",))
    differences = _retriever_differences(spec.base, dataset_name)
    rewrites = {m.rewrite for m in leaf_systems(spec) if m.rewrite}
    for rewrite in sorted(rewrites):
        made = (provenance or {}).get(rewrite, {})
        if made.get("made_by") == "hand":
            differences.append(f"the {rewrite[0]} rewrite ({rewrite[1]}) was written by hand, not by an LLM")
        live_settings = (live or {}).get(rewrite)
        settings = live_settings or _recorded_settings(made)
        if settings is not None:
            named = "live rewrites" if live_settings else f"rewrites precomputed by {made.get('model') or 'an LLM'}"
            differences += [
                d for d in _live_differences(rewrite[0], settings, dataset_name, named) if d not in differences
            ]
    if reranker:
        differences += [d for d in rerank_differences(reranker, keep_tail) if d not in differences]
    return Fidelity(name, tuple(differences))
