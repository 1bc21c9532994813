"""The shipped copy of the R2MED authors' published results: the numbers users compare against.

Expected values were read by hand from the upstream result files
(``base retriever/bm25/*.json``, ``gar/hyde/gpt4/bm25/*.json``, the first commit's
``gar/hyde/o3-mini/nv/*.json``, ...) and from the later papers each post-paper row names.
"""

from __future__ import annotations

import importlib.util
import json
import math
from importlib.resources import files
from pathlib import Path

import pandas as pd
import pytest

from r2med_core.analysis.published import (
    ATTRIBUTION,
    EVALUATIONS,
    GAP_TOLERANCE,
    METRICS,
    PUBLISHED_TASKS,
    RETRIEVER_NAMES,
    SETTING_KINDS,
    Setting,
    _with_avg,
    gains_over,
    leaderboard,
    load_published,
    normalise_metric,
    paper_gap,
    post_paper_board,
    post_paper_results,
    published_score,
    published_settings,
)
from r2med_core.evaluation import ALL_METRICS

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
    text = files("r2med_core.analysis").joinpath("published_results.json").read_text(encoding="utf-8")
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
    # results/ has 568 files; the first commit adds HyDE (o3-mini) × 3 retrievers, Search-R1
    # (qwen-3b-ins) + BM25 and the 3 rerankers over the top 100: 7 settings × 8 tasks.
    assert counts == {"rewrite": 424 + 32, "retriever": 120, "reranker": 24 + 24}
    assert len(published_settings()) == 15 + 53 + 3 + 7


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


@pytest.mark.parametrize("bad", ["bleu", "ndcg_at_2", "NDCG@1000", ""])
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
    assert list(board.columns) == ["key", "kind", "origin", *PUBLISHED_TASKS, "Avg"]
    assert len(board) == 78
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
    # results/: BM25, 15 BM25 rewrites, 3 rerankers @10; first commit: 2 BM25 rewrites, 3 rerankers @100.
    assert len(board) == 1 + 15 + 3 + 2 + 3


def test_setting_labels_and_keys() -> None:
    assert Setting("retriever", "bm25").label == "BM25"
    assert Setting("rewrite", "bm25", method="hyde", llm="gpt4").label == "HyDE (gpt4) + BM25"
    reranked = Setting("reranker", "nv", reranker="bge-reranker", top_k=10)
    assert reranked.label == "bge-reranker@10 over NV-Embed-v2"
    assert reranked.key == "bge-reranker/nv/top_10"
    for setting in published_settings():
        assert Setting.from_key(setting.key) == setting
        assert setting.kind in SETTING_KINDS
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


#: The first commit's ``gar/hyde/o3-mini/nv/<task>.json`` -> test.ndcg_at_10, in PUBLISHED_TASKS order.
O3_MINI_NV_NDCG10 = (0.34014, 0.55897, 0.51281, 0.28995, 0.40304, 0.48972, 0.50863, 0.2047)
FIRST_COMMIT_KEYS = {
    "hyde/o3-mini/bm25",
    "hyde/o3-mini/bge",
    "hyde/o3-mini/nv",
    "search-r1/qwen-3b-ins/bm25",
    "bge-reranker/nv/top_100",
    "monobert/nv/top_100",
    "rankllama/nv/top_100",
}


def test_the_papers_best_figure_is_41_35_averaged_as_the_paper_does() -> None:
    board = leaderboard("NDCG@10", kind="rewrite", points=True)
    row = board.loc["HyDE (o3-mini) + NV-Embed-v2"]
    # The paper's average: the mean over the 8 tasks of nDCG@10 × 100, printed to 2 decimals.
    assert [row[t] for t in PUBLISHED_TASKS] == pytest.approx([v * 100 for v in O3_MINI_NV_NDCG10])
    assert row["Avg"] == pytest.approx(sum(v * 100 for v in O3_MINI_NV_NDCG10) / 8)
    assert f"{row['Avg']:.2f}" == "41.35"
    assert f"{board.loc['HyDE (o3-mini) + BM25', 'Avg']:.2f}" == "41.01"  # R2MED's own leaderboard
    assert row["origin"] == "first commit"
    assert f"{leaderboard(kind='retriever', points=True).loc['NV-Embed-v2', 'Avg']:.2f}" == "31.43"  # "31.4"


def test_first_commit_rows_exist_with_their_settings() -> None:
    frame = load_published()
    first = frame[frame["origin"] == "first commit"]
    assert set(first["key"]) == FIRST_COMMIT_KEYS
    assert (first.groupby("key")["task"].nunique() == 8).all()
    assert set(frame.loc[frame["origin"] != "first commit", "origin"]) == {"repository"}
    assert Setting.from_key("hyde/o3-mini/nv") == Setting("rewrite", "nv", method="hyde", llm="o3-mini")
    reranked = first[first["kind"] == "reranker"]
    assert set(reranked["top_k"]) == {100} and set(reranked["retriever"]) == {"nv"}
    assert set(reranked["reranker"]) == {"bge-reranker", "monobert", "rankllama"}
    assert published_score("monoBERT@100 over NV-Embed-v2", "Biology", "NDCG@10") == 0.07426
    assert published_score("monobert/nv/top_100", "Biology", "mrr") == 0.13577
    assert published_score("Search-R1 (qwen-3b-ins) + BM25", "Biology", "ndcg_at_10") == 0.34385


def test_rerankers_over_the_top_100_keep_the_first_stages_100_documents() -> None:
    """Reranking NV-Embed-v2's top 100 reorders the same 100 documents, so recall@100 is unchanged."""
    for task in PUBLISHED_TASKS:
        first_stage = published_score("nv", task, "recall_at_100")
        for reranker in ("bge-reranker", "monobert", "rankllama"):
            assert published_score(f"{reranker}/nv/top_100", task, "recall_at_100") == first_stage, task


def test_dense_cutoffs_3_and_5_are_kept_and_metric_names_are_the_evaluators() -> None:
    assert METRICS == ALL_METRICS
    assert published_score("bge", "Biology", "ndcg_at_3") == 0.09392
    assert published_score("hyde/o3-mini/nv", "Biology", "ndcg_at_5") == 0.31115
    assert published_score("hyde/o3-mini/nv", "Biology", "recall_at_3") == 0.22792
    assert published_score("bm25", "Biology", "ndcg_at_3") is None  # BM25's files have no @3
    assert len(leaderboard("ndcg_at_3", kind="retriever")) == 14


REQUIRED_LATER = {
    "BM25",
    "NV-Embed-v2",
    "gte-Qwen2-7B-instruct",
    "Qwen3-Embedding-4B",
    "Qwen3-Embedding-8B",
    "ReasonIR-8B",
    "RaDeR-gte-Qwen2-7B",
    "DIVER-Retriever-4B",
    "ReasonEmbed-Qwen3-4B",
    "ReasonEmbed-Qwen3-8B",
    "ReasonEmbed-Llama-3.1-8B",
    "InsertRank (DeepSeek-R1)",
}


def test_every_post_paper_row_names_its_source_setting_and_evaluation() -> None:
    results = post_paper_results()
    assert REQUIRED_LATER <= {r.model for r in results}
    for result in results:
        assert result.url.startswith("https://arxiv.org/abs/"), result.model
        assert result.paper and result.table and result.setting and result.queries, result.model
        assert result.evaluation in EVALUATIONS, result.model
        if result.kind == "reranker":
            assert result.first_stage, result.model
    board = post_paper_board()
    assert board["Avg"].is_monotonic_decreasing
    assert board.index[0] == "InsertRank (DeepSeek-R1)"
    assert board["url"].notna().all() and board["setting"].notna().all()


def test_reasonembed_table_3_and_insertrank_as_printed() -> None:
    board = post_paper_board()
    best = board.loc["ReasonEmbed-Qwen3-8B"]
    assert best["Avg"] == 43.18 and best["evaluation"] == "authors' re-run"
    assert [best[t] for t in PUBLISHED_TASKS] == [54.01, 66.33, 67.64, 20.93, 27.96, 51.38, 33.76, 23.43]
    assert "Table 3" in best["table"] and best["url"] == "https://arxiv.org/abs/2510.08252"
    assert "original queries" in best["setting"]
    expected_avgs = {
        "RaDeR-gte-Qwen2-7B": 35.19,
        "Qwen3-Embedding-8B": 34.22,
        "DIVER-Retriever-4B": 32.23,
        "ReasonIR-8B": 27.94,
    }
    assert {m: board.loc[m, "Avg"] for m in expected_avgs} == expected_avgs
    insert = board.loc["InsertRank (DeepSeek-R1)"]
    assert insert["Avg"] == 51.1 and insert[list(PUBLISHED_TASKS)].isna().all()
    assert insert["first stage"] == "BM25" and insert["evaluation"] == "authors' re-run"
    assert insert["url"] == "https://arxiv.org/abs/2506.14086"


def test_transcribed_averages_agree_with_their_task_values() -> None:
    """Each printed average is the mean of its printed task values up to rounding (0.005 for the
    average, 0.005 for the tasks): a mistyped value shows. The one row whose source disagrees with
    itself says so in its note."""
    off = set()
    for result in post_paper_results():
        if result.scores is not None and abs(sum(result.scores) / 8 - result.avg) > 0.01 + 1e-9:
            off.add(result.model)
            assert result.note and "35.19" in result.note
    assert off == {"RaDeR-gte-Qwen2-7B"}


def test_rows_quoted_from_the_paper_match_the_benchmarks_files() -> None:
    quoted = {r.model: r for r in post_paper_results() if r.evaluation == "benchmark's own"}
    ours = {"BM25": "bm25", "NV-Embed-v2": "nv", "OpenAI-3-Large": "openai", "GritLM-7B": "grit"}
    assert set(quoted) == set(ours)
    for model, key in ours.items():
        paper = [round(100 * published_score(key, task, "ndcg_at_10"), 2) for task in PUBLISHED_TASKS]
        assert list(quoted[model].scores) == paper, model


def test_gains_per_task_show_where_reasonembed_gains_come_from() -> None:
    gains = gains_over("NV-Embed-v2")
    assert "NV-Embed-v2" not in gains.index
    row = gains.loc["ReasonEmbed-Qwen3-8B"]
    assert row["Biology"] == pytest.approx(54.01 - 27.15)
    assert row["Bioinformatics"] == pytest.approx(66.33 - 50.10)
    assert row["Medical-Sciences"] == pytest.approx(67.64 - 47.81)
    assert row["PMC-Clinical"] == pytest.approx(33.76 - 39.91)  # below NV-Embed-v2 there
    assert row["Avg"] == pytest.approx(43.18 - 31.43)
    assert gains.loc["InsertRank (DeepSeek-R1)", "Avg"] == pytest.approx(51.1 - 31.43)
    assert gains.loc["InsertRank (DeepSeek-R1)", list(PUBLISHED_TASKS)].isna().all()
    with pytest.raises(ValueError, match="unknown post-paper result"):
        gains_over("NV-Embed-v3")
    with pytest.raises(ValueError, match="no per-task scores"):
        gains_over("InsertRank (DeepSeek-R1)")


def test_paper_gap_flags() -> None:
    assert paper_gap(0.50, 0.495, metric_published=True) == (pytest.approx(0.005), "✓ matches")
    gap, flag = paper_gap(0.50, 0.50 - 2 * GAP_TOLERANCE, metric_published=True)
    assert gap == pytest.approx(2 * GAP_TOLERANCE) and flag == "⚠ differs from the paper"
    assert paper_gap(0.5, None, metric_published=True) == (None, "no published counterpart")
    assert paper_gap(math.nan, 0.4, metric_published=True) == (None, "not computed locally")
    assert paper_gap(0.5, None, metric_published=False)[1].startswith("the paper did not publish")


def _transcriber():  # type: ignore[no-untyped-def]
    path = Path(__file__).resolve().parent.parent / "scripts" / "transcribe_published.py"
    spec = importlib.util.spec_from_file_location("transcribe_published", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_post_paper_rows_are_the_transcription_file() -> None:
    """The JSON is generated from scripts/post_paper_results.toml, never edited by hand."""
    script = _transcriber()
    toml = Path(script.__file__).with_name("post_paper_results.toml")
    assert script.post_paper(toml) == _raw()["post_paper"]


def test_the_transcriber_rejects_a_row_without_source_or_with_a_mistyped_value(tmp_path: Path) -> None:
    script = _transcriber()
    source = '[[source]]\nid = "x"\npaper = "P"\ntable = "T"\nurl = "https://arxiv.org/abs/1"\n'
    row = (
        '[[row]]\nsource = "x"\nmodel = "M"\nkind = "retriever"\nqueries = "original queries"\n'
        "setting = \"alone\"\nevaluation = \"authors' re-run\"\navg = 10.0\n"
    )
    good = tmp_path / "good.toml"
    good.write_text(source + row + "scores = [10, 10, 10, 10, 10, 10, 10, 10]\n", encoding="utf-8")
    assert script.post_paper(good)[0]["scores"]["IIYi-Clinical"] == 10
    typo = tmp_path / "typo.toml"
    typo.write_text(source + row + "scores = [10, 10, 10, 10, 10, 10, 10, 100]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"typo.toml: row 1 \(M\): the mean of its scores"):
        script.post_paper(typo)
    no_url = tmp_path / "no_url.toml"
    no_url.write_text(source.replace('url = "https://arxiv.org/abs/1"\n', "") + row, encoding="utf-8")
    with pytest.raises(ValueError, match="missing url"):
        script.post_paper(no_url)


def test_the_post_paper_board_leaves_a_missing_text_blank() -> None:
    """A source that names no first stage (or no note) shows a blank cell on the Leaderboard, not "None"."""
    from r2med_core.analysis.published import post_paper_board

    board = post_paper_board()
    text = ["evaluation", "queries", "first stage", "setting", "paper", "table", "url", "note"]
    assert not board[text].isna().any().any()
    assert (board["first stage"] == "").any() and (board["note"] == "").any()
