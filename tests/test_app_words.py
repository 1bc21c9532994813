"""Where a clinician looks, a metric name or a grade number comes with its meaning the first time a page
shows it (AppTest): the precise name stays, for researchers, the words come from the core."""

from __future__ import annotations

import pytest

from r2med_app.views.markup import md
from r2med_core.evaluation import metric_explained, metric_meaning
from r2med_core.judging.pooling import JUDGED_WORDS

from .test_app import as_written, open_app


@pytest.fixture(autouse=True)
def _compute_without_a_click(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")


def captions(at) -> str:  # type: ignore[no-untyped-def]
    return " ".join(c.value for c in at.caption)


def test_metric_names_come_with_their_meaning_on_the_metrics_explorer_compare_and_leaderboard_pages() -> None:
    mrr = md(metric_explained("mrr"))
    assert mrr == md("MRR (how high the first relevant document ranks: 1 = first, 0.5 = second, 0.1 = tenth)")
    metrics = open_app("metrics", task="clinical-case")
    said = as_written(metrics.table[0].value)["what it says"]  # the metrics table says what each row's metric says
    assert said["MRR"] == metric_meaning("mrr") and said["Recall@100"] == metric_meaning("recall_at_100")
    assert md(JUDGED_WORDS) in captions(metrics)  # the pooling section's Judged@10, in words
    assert any(h.value.startswith("Documents nobody judged") for h in metrics.subheader)
    explorer = open_app("explorer", task="clinical-case", system="bm25")
    assert mrr in captions(explorer)
    compare = open_app("compare", task="clinical-case", compare=["bm25", "minilm"])
    assert md(metric_explained("ndcg_at_10")) in captions(compare)
    leaderboard = open_app("leaderboard")
    assert md(metric_explained("ndcg_at_10")) in captions(leaderboard)


def test_grades_are_shown_with_their_words_on_the_overview_and_in_the_explorer() -> None:
    overview = open_app("overview", task="clinical-case")
    assert "Judgements by grade: grade 1 (relevant): 24, grade 2 (highly relevant): 12." in captions(overview)
    explorer = open_app("explorer", task="clinical-case", system="bm25")
    labels = " ".join(e.label for e in explorer.expander)
    assert md("· grade 2 (highly relevant) ·") in labels  # a gold document's
    assert md("✓ gold, grade 2 (highly relevant)") in labels  # a retrieved one's
