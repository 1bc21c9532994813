"""The Leaderboard's comparison of a local score with the paper's is decided in the core
(``analysis.paper_comparison``): which published number a local system meets, and the flag."""

from __future__ import annotations

import math

import pytest

from r2med_core.analysis.paper_comparison import PaperComparison, compare_with_paper
from r2med_core.analysis.published import GAP_TOLERANCE, published_score


def test_a_local_score_off_the_papers_is_flagged_and_a_close_one_matches() -> None:
    paper = published_score("bm25", "Biology", "ndcg_at_10")
    assert paper is not None
    off = compare_with_paper("bm25", "Biology", "ndcg_at_10", paper + 2 * GAP_TOLERANCE)
    assert off.paper == paper and off.gap == pytest.approx(2 * GAP_TOLERANCE)
    assert off.flag == "⚠ differs from the paper"
    assert compare_with_paper("bm25", "Biology", "ndcg_at_10", paper).flag == "✓ matches"


def test_a_rewrite_meets_its_published_setting() -> None:
    versus = compare_with_paper("bm25+hyde:gpt4", "Biology", "ndcg_at_10", 0.5)
    assert versus.paper == published_score("hyde/gpt4/bm25", "Biology", "ndcg_at_10")


def test_systems_and_metrics_the_paper_has_no_number_for() -> None:
    unmatched = compare_with_paper("minilm", "Biology", "ndcg_at_10", 0.3)
    assert unmatched == PaperComparison(None, None, "no published counterpart")
    unpublished = compare_with_paper("bge", "Biology", "mrr", 0.3)  # dense retrievers: no MRR in the paper
    assert unpublished.paper is None and unpublished.flag.startswith("the paper did not publish")
    assert compare_with_paper("bm25", "Biology", "ndcg_at_10", math.nan).flag == "not computed locally"
    with pytest.raises(ValueError, match="unknown task"):
        compare_with_paper("bm25", "clinical-case", "ndcg_at_10", 0.3)
