"""Reciprocal-rank fusion ``rrf(A,B,...)`` of two or more systems (each fused from its top 100)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from r2med_core.data import Dataset
from r2med_core.kinds.base import (
    Parse,
    SpecError,
    SystemKind,
    SystemSpec,
    estimate_seconds,
    register,
    run_key,
    run_system,
    scaled,
    search_text,
    split_top_level,
)
from r2med_core.progress import Progress
from r2med_core.retrieval.fusion import reciprocal_rank_fusion
from r2med_core.runs import Ranking, Run

#: Members are fused from at least this many documents each, whatever k the fusion keeps.
MEMBER_DEPTH = 100


@register
class FusionKind(SystemKind):
    name = "fusion"
    grammar = "rrf(A,B,...) (reciprocal-rank fusion of systems)"
    priority = 20
    typed_text = True

    def parse(self, text: str, parse: Parse) -> SystemSpec | None:
        if not (text.startswith("rrf(") and text.endswith(")")):
            return None
        members = tuple(parse(part) for part in split_top_level(text[4:-1]))
        if len(members) < 2:
            raise SpecError("rrf(...) needs at least two systems, e.g. rrf(bm25,minilm)")
        return SystemSpec("fusion", members=members)

    def format(self, spec: SystemSpec) -> str:
        return "rrf(" + ",".join(str(m) for m in spec.members) + ")"

    def label(self, spec: SystemSpec) -> str:
        return "RRF(" + " + ".join(m.label for m in spec.members) + ")"

    def key_parts(self, dataset: Dataset, spec: SystemSpec, k: int) -> dict[str, Any]:
        return {"members": [run_key(dataset, m, k) for m in spec.members]}

    def compute(self, dataset: Dataset, spec: SystemSpec, k: int, progress: Progress | None) -> Run:
        started = time.perf_counter()
        runs = []
        for i, member in enumerate(spec.members):
            step = scaled(progress, i / len(spec.members), (i + 1) / len(spec.members))
            runs.append(run_system(dataset, member, k=max(k, MEMBER_DEPTH), progress=step))
        fused = reciprocal_rank_fusion(runs, str(spec), depth=k)
        usage = tuple(entry for run in runs for entry in run.usage)  # what each member's LLM use cost
        return Run(fused.name, fused.rankings, time.perf_counter() - started, usage)

    def search(
        self, dataset: Dataset, spec: SystemSpec, text: str, k: int, hy_doc: str | None, progress: Progress | None
    ) -> Ranking:
        members = [
            Run(str(m), {"q": search_text(dataset, m, text, max(k, MEMBER_DEPTH), hy_doc=hy_doc, progress=progress)})
            for m in spec.members
        ]
        return reciprocal_rank_fusion(members, str(spec), depth=k).top("q")

    def differences(self, spec: SystemSpec, dataset_name: str | None) -> list[str]:
        out = ["reciprocal-rank fusion: a combination the benchmark did not evaluate"]
        return out + [d for d in super().differences(spec, dataset_name) if d not in out]

    def estimate_seconds(self, dataset: Dataset, spec: SystemSpec, k: int) -> float:
        return sum(estimate_seconds(dataset, m, max(k, MEMBER_DEPTH)) for m in spec.members)

    def link_refusal(self, spec: SystemSpec, offered: set[str], refuse: Callable[[str], str | None]) -> str | None:
        for member in spec.members:
            if member.kind == self.name:
                return "fusions of fusions are not run"
            if str(member) not in offered and refuse(str(member)) is not None:
                return "a fusion may only combine systems already offered"
        return None
