"""The shipped copy of the R2MED authors' published results: the numbers users compare against.

Expected values were read by hand from the upstream result files
(``base retriever/bm25/*.json``, ``gar/hyde/gpt4/bm25/*.json``, ...).
"""

from __future__ import annotations

import json
import math
from importlib.resources import files

import pandas as pd
import pytest

from r2med_core.published import (
    ATTRIBUTION,
    KINDS,
    METRICS,
    PUBLISHED_TASKS,
    RETRIEVER_NAMES,
    Setting,
    _with_avg,
    leaderboard,
    load_published,
    normalise_metric,
    published_score,
    published_settings,
)

BASE_RETRIEVERS = {
    "bm25",
    "bge",
    "contriever",
    "medcpt",
    "inst-l",
    "inst-xl",
    "bmr-410m",
    "bmr-2b",
    "bmr-7b",
    "e5",
    "grit",
    "sfr",
    "nv",
    "openai",
    "voyage",
}

#: ``base retriever/bm25/<task>.json`` -> test.ndcg_at_10, in PUBLISHED_TASKS order.
BM25_NDCG10 = (0.19188, 0.21548, 0.19683, 0.00659, 0.02551, 0.23692, 0.21662, 0.12024)


def _raw() -> dict:
    text = files("r2med_core").joinpath("published_results.json").read_text(encoding="utf-8")
    return json.loads(text)


def test_tasks_are_the_eight_r2med_tasks() -> None:
    assert PUBLISHED_TASKS == (
        "Biology",
        "Bioinformatics",
        "Medical-Sciences",
        "MedXpertQA-Exam",
        "MedQA-Diag",
        "PMC-Treatment",
        "PMC-Clinical",
        "IIYi-Clinical",
    )


def test_known_paper_numbers() -> None:
    assert published_score("BM25", "Biology", "ndcg_at_10") == 0.19188
    assert published_score("bm25", "Biology", "ndcg_at_10") == 0.19188
    # An upstream file that spells metrics NDCG@10 / MRR:
    assert published_score("HyDE (gpt4) + BM25", "Biology", "ndcg_at_10") == 0.57342
    assert published_score("hyde/gpt4/bm25", "Biology", "mrr") == 0.69201
    assert published_score(Setting.from_key("hyde/gpt4/bm25"), "Biology", "NDCG@10") == 0.57342
    # nv/IIYi-Clinical ndcg_at_10 and the bge-reranker over its top 10 on Biology.
    assert published_score("NV-Embed-v2", "IIYi-Clinical", "ndcg_at_10") == 0.14808
    assert published_score("bge-reranker@10 over NV-Embed-v2", "Biology", "P@10") == 0.11748


def test_every_task_for_all_15_base_retrievers() -> None:
    frame = load_published()
    base = frame[frame["kind"] == "retriever"]
    assert set(zip(base["retriever"], base["task"])) == {(r, t) for r in BASE_RETRIEVERS for t in PUBLISHED_TASKS}
    assert len(base) == 15 * 8
    assert base["ndcg_at_10"].notna().all()
    assert set(RETRIEVER_NAMES) == BASE_RETRIEVERS


def test_record_counts_by_kind() -> None:
    counts = load_published()["kind"].value_counts().to_dict()
    assert counts == {"rewrite": 424, "retriever": 120, "reranker": 24}
    assert len(published_settings()) == 15 + 53 + 3


def test_metric_names_are_normalised() -> None:
    raw = _raw()
    names = {name for record in raw["records"] for name in record["metrics"]}
    assert names == set(METRICS)
    assert not any("@" in n or n != n.lower() for n in names)
    frame = load_published()
    assert not any("@" in str(c) for c in frame.columns)
    assert list(frame.columns[-len(METRICS) :]) == list(METRICS)


def test_every_value_is_a_score() -> None:
    values = load_published()[list(METRICS)].stack().dropna()
    assert len(values) > 5000
    assert ((values >= 0) & (values <= 1)).all()


def test_normalise_metric_accepts_paper_spellings() -> None:
    assert normalise_metric("NDCG@10") == "ndcg_at_10"
    assert normalise_metric("P@10") == "precision_at_10"
    assert normalise_metric("Recall@100") == "recall_at_100"
    assert normalise_metric("MAP@25") == "map_at_25"
    assert normalise_metric("MRR") == "mrr"
    assert normalise_metric("ndcg_at_1") == "ndcg_at_1"


@pytest.mark.parametrize("bad", ["bleu", "ndcg_at_3", "NDCG@1000", ""])
def test_unknown_metric_is_a_clear_error(bad: str) -> None:
    with pytest.raises(ValueError, match="unknown metric"):
        leaderboard(bad)
    with pytest.raises(ValueError, match="unknown metric"):
        published_score("BM25", "Biology", bad)


def test_unknown_task_or_kind_is_an_error_unknown_setting_is_none() -> None:
    with pytest.raises(ValueError, match="unknown task"):
        published_score("BM25", "biology", "ndcg_at_10")
    with pytest.raises(ValueError, match="unknown kind"):
        leaderboard(kind="dense")
    assert published_score("BM25 (our own)", "Biology", "ndcg_at_10") is None


def test_unpublished_metric_is_none_not_zero() -> None:
    # Dense-retriever files report neither mrr nor cutoff 25.
    assert published_score("bge", "Biology", "mrr") is None
    assert published_score("bge", "Biology", "ndcg_at_25") is None
    assert published_score("bge", "Biology", "ndcg_at_10") == 0.12706


def test_avg_by_hand_for_bm25() -> None:
    raw = _raw()
    from_file = {
        r["task"]: r["metrics"]["ndcg_at_10"]
        for r in raw["records"]
        if r["kind"] == "retriever" and r["retriever"] == "bm25"
    }
    assert tuple(from_file[t] for t in PUBLISHED_TASKS) == BM25_NDCG10
    row = leaderboard("ndcg_at_10").loc["BM25"]
    assert row["Avg"] == pytest.approx(sum(BM25_NDCG10) / 8, abs=1e-12)
    assert row["Avg"] == pytest.approx(0.15125875)
    assert [row[t] for t in PUBLISHED_TASKS] == list(BM25_NDCG10)


def test_avg_needs_all_eight_tasks() -> None:
    table = pd.DataFrame([[0.5] * 8, [1.0] * 7 + [math.nan]], columns=list(PUBLISHED_TASKS), index=["a", "b"])
    out = _with_avg(table)
    assert out.loc["a", "Avg"] == 0.5
    assert math.isnan(out.loc["b", "Avg"])


def test_leaderboard_shape_and_order() -> None:
    board = leaderboard()
    assert list(board.columns) == ["key", "kind", *PUBLISHED_TASKS, "Avg"]
    assert len(board) == 71
    assert board.index.is_unique
    assert board["Avg"].is_monotonic_decreasing
    assert board.iloc[0]["key"] == "query2doc/gpt4/nv"

    base = leaderboard("NDCG@10", kind="retriever")
    assert set(base["kind"]) == {"retriever"}
    assert len(base) == 15
    assert base.index[0] == "NV-Embed-v2"
    assert base.index[-1] == "MedCPT"


def test_leaderboard_skips_settings_without_the_metric() -> None:
    board = leaderboard("mrr")
    # Only files in the newer format publish MRR: BM25, the BM25 rewrites and the rerankers.
    assert "bge-large-en-v1.5" not in board.index
    assert "BM25" in board.index
    assert board.loc["HyDE (gpt4) + BM25", "Biology"] == 0.69201
    assert len(board) == 1 + 15 + 3


def test_setting_labels_and_keys() -> None:
    assert Setting("retriever", "bm25").label == "BM25"
    assert Setting("rewrite", "bm25", method="hyde", llm="gpt4").label == "HyDE (gpt4) + BM25"
    reranked = Setting("reranker", "nv", reranker="bge-reranker", top_k=10)
    assert reranked.label == "bge-reranker@10 over NV-Embed-v2"
    assert reranked.key == "bge-reranker/nv/top_10"
    for setting in published_settings():
        assert Setting.from_key(setting.key) == setting
        assert setting.kind in KINDS
    with pytest.raises(ValueError):
        Setting("rewrite", "bm25")  # a rewrite needs a method and an llm


def test_load_published_returns_an_independent_copy() -> None:
    first = load_published()
    first.loc[:, "ndcg_at_10"] = 0.0
    assert published_score("BM25", "Biology", "ndcg_at_10") == 0.19188
    assert load_published()["ndcg_at_10"].max() > 0.5


def test_attribution_travels_with_the_data() -> None:
    header = _raw()
    title = "R2MED: A Benchmark for Reasoning-Driven Medical Retrieval"
    assert title in ATTRIBUTION and "Li et al., 2025" in ATTRIBUTION and "MIT" in ATTRIBUTION
    assert title in header["attribution"]
    assert header["license"] == "MIT"
    assert "github.com/R2MED/R2MED" in header["source"]
    assert "shall be included in all copies" in header["license_text"]
