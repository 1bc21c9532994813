"""A local score next to the paper's: which published number a local system is compared with, and
the Leaderboard's verdict on the gap.

The rule needs the system kinds (``systems.published_kind``: the paper published different metric
sets for BM25, dense retrievers and rerankers), which ``published`` cannot import (the dense kind
reads its names from it), so it lives beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from r2med_core.analysis.published import paper_gap, published_key_for, published_score
from r2med_core.evaluation import published_metrics
from r2med_core.systems import published_kind

__all__ = ["PaperComparison", "compare_with_paper"]


@dataclass(frozen=True)
class PaperComparison:
    """The paper's number for a local system (None without one), ``gap`` = local − paper (None when
    either is missing) and ``flag``, the words the Leaderboard shows (``published.paper_gap``)."""

    paper: float | None
    gap: float | None
    flag: str


def compare_with_paper(system: str, task: str, metric: str, local: float) -> PaperComparison:
    """Compare a local mean of ``metric`` for ``system`` on ``task`` (one of ``published.PUBLISHED_TASKS``)
    with the paper's: its published counterpart (``bm25+hyde:gpt4`` → HyDE (gpt4) + BM25), and whether
    the paper published that metric for that kind of system at all. ValueError for an unknown task
    or metric, as ``published.published_score``."""
    key = published_key_for(system)
    paper = published_score(key, task, metric) if key else None
    kind = published_kind(system)
    unpublished = bool(key and kind and metric not in published_metrics(kind))
    gap, flag = paper_gap(local, paper, metric_published=not unpublished)
    return PaperComparison(paper, gap, flag)
