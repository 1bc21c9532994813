"""Reciprocal-rank fusion: combine several runs by rank, not score (scores are not comparable)."""

from __future__ import annotations

from r2med_core.runs import Ranking, Run

#: The constant of Cormack et al. (2009); it damps the weight of the very top ranks.
RRF_K = 60


def reciprocal_rank_fusion(runs: list[Run], name: str, k: int = RRF_K, depth: int = 100) -> Run:
    """Sum ``1 / (k + rank)`` over the runs that retrieved a document; keep the top ``depth``."""
    if len(runs) < 2:
        raise ValueError("fusion needs at least two runs")
    query_ids = list(dict.fromkeys(qid for run in runs for qid in run.rankings))
    fused: dict[str, Ranking] = {}
    for qid in query_ids:
        totals: dict[str, float] = {}
        for run in runs:
            for rank, (doc, _) in enumerate(run.top(qid), start=1):
                totals[doc] = totals.get(doc, 0.0) + 1.0 / (k + rank)
        # Ties (same fused score) keep first-seen order: stable sort over insertion order.
        fused[qid] = sorted(totals.items(), key=lambda item: -item[1])[:depth]
    return Run(name, fused)
