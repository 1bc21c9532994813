"""What the explorer computes: safe highlighting, gold ranks, rewrite effects, query filters."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from r2med_core import load_demo
from r2med_core.analysis.explore import (
    GoldRow,
    filter_queries,
    gold_frame,
    gold_rows,
    highlight,
    mask_blind,
    query_table,
    query_terms,
    relevance_from_data,
    retrieved_frame,
    shared_with_gold,
)
from r2med_core.data import load_r2med_dir
from r2med_core.evaluation import evaluate, metric_label
from r2med_core.runs import Run


def test_highlight_escapes_before_marking() -> None:
    text = 'Insulin <script>alert("x")</script> <img src=x onerror=alert(1)> & treated'
    html = highlight(text, query_terms("insulin treating for alerts"))
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;" in html and "&amp;" in html
    assert "<mark>Insulin</mark>" in html and "<mark>treated</mark>" in html  # same stem as "treating"
    assert "<mark>alert</mark>" in html  # inside escaped markup, still only text
    assert html.count("<mark>") == html.count("</mark>")


def test_a_blind_annotator_sees_no_scores_of_queries_they_have_not_labelled(tiny_r2med: Path) -> None:
    """Blind first: the table keeps every query's id and text, blanks the rest for the unlabelled ones,
    and the score filters cannot pick them out (q2 fails; filtering on failure must not reveal it)."""
    ds = load_r2med_dir(tiny_r2med)
    run = _tiny_run()
    table = query_table(ds, evaluate(run, ds.qrels), run)
    masked = mask_blind(table, ["q2"])
    q1, q2 = (masked[masked["query_id"] == q].iloc[0] for q in ("q1", "q2"))
    assert q2["query"] == table[table["query_id"] == "q2"].iloc[0]["query"]
    assert all(pd.isna(q2[c]) for c in masked.columns if c not in ("query_id", "query"))
    assert q1["ndcg_at_10"] == table[table["query_id"] == "q1"].iloc[0]["ndcg_at_10"] and q1["gold"] > 0
    assert list(filter_queries(masked, failures_only=True)["query_id"]) == []
    assert list(filter_queries(masked, missed_gold=True)["query_id"]) == ["q1"]
    assert list(filter_queries(masked, search="troponin")["query_id"]) == ["q2"]  # text search still finds it
    assert mask_blind(table, []) is table


def test_highlight_keeps_line_breaks_and_marks_nothing_without_terms() -> None:
    assert highlight("a\nb <c>", frozenset()) == "a<br>b &lt;c&gt;"


def _tiny_run() -> Run:
    return Run("toy", {"q1": [("dka_1", 3.0), ("gout_0", 2.0)], "q2": [("asthma_0", 1.0)]})


def test_gold_rows_and_rewrite_effects(tiny_r2med: Path) -> None:
    ds = load_r2med_dir(tiny_r2med)
    rewritten = Run("toy+hyde", {"q1": [("dka_0", 5.0), ("gout_0", 1.0)]})
    rows = gold_rows(ds, _tiny_run(), "q1", rewritten)
    assert rows == [GoldRow("dka_0", 2, None, 1), GoldRow("dka_1", 1, 1, None)]
    assert [r.rewrite_effect for r in rows] == ["rescued", "lost"]
    assert GoldRow("d", 1, 9, 2).rewrite_effect == "up 7" and GoldRow("d", 1, 2, 9).rewrite_effect == "down 7"
    frame = gold_frame(rows, with_rewrite=True)
    assert list(frame["rank"]) == ["not in top 100", "1"]
    assert list(frame["with rewrite"]) == ["1", "not in top 100"]


def test_query_table_and_filters(tiny_r2med: Path) -> None:
    ds = load_r2med_dir(tiny_r2med)
    run = _tiny_run()
    table = query_table(ds, evaluate(run, ds.qrels), run)
    assert list(table["query_id"]) == ["q1", "q2"]  # q3 has no judgements
    row = table.set_index("query_id").loc["q2"]
    assert row["ndcg_at_10"] == 0 and row["gold_missed"] == 1
    assert list(filter_queries(table, failures_only=True)["query_id"]) == ["q2"]
    assert list(filter_queries(table, missed_gold=True)["query_id"]) == ["q1", "q2"]
    assert list(filter_queries(table, search="TROPONIN")["query_id"]) == ["q2"]
    assert list(filter_queries(table, search="q1")["query_id"]) == ["q1"]


def test_retrieved_frame_marks_gold(tiny_r2med: Path) -> None:
    ds = load_r2med_dir(tiny_r2med)
    frame = retrieved_frame(ds, _tiny_run(), "q1", k=5)
    assert list(frame["document"]) == ["dka_1", "gout_0"]
    assert list(frame["gold"]) == ["✓ grade 1", ""]


def test_shared_with_gold(tiny_r2med: Path) -> None:
    ds = load_r2med_dir(tiny_r2med)
    assert shared_with_gold(ds, "q1") == frozenset({"diabet", "ketoacidosi", "treat"})


def test_metric_labels() -> None:
    assert [metric_label(m) for m in ("ndcg_at_10", "recall_at_100", "precision_at_1", "map_at_25", "mrr")] == [
        "nDCG@10",
        "Recall@100",
        "P@1",
        "MAP@25",
        "MRR",
    ]


def test_gold_documents_missing_from_the_corpus_are_shown_not_fatal(tiny_r2med: Path) -> None:
    from .conftest import TINY_QRELS, write_jsonl

    write_jsonl(tiny_r2med / "qrels.jsonl", [*TINY_QRELS, {"q_id": "q1", "p_id": "ghost", "score": 2}])
    ds = load_r2med_dir(tiny_r2med)
    run = Run("r", {"q1": [("dka_0", 2.0), ("asthma_0", 1.0)]})
    assert "ketoacidosi" in shared_with_gold(ds, "q1")  # the known gold documents still count
    rows = {row.doc_id: row for row in gold_rows(ds, run, "q1")}
    assert rows["ghost"].rank is None and rows["dka_0"].rank == 1
    table = query_table(ds, evaluate(run, ds.qrels), run)
    assert int(table.set_index("query_id").loc["q1", "gold_missed"]) == 2


def test_highlighting_skips_filler_and_shows_words_as_written() -> None:
    from r2med_core.analysis.explore import overlap

    query = "A 67-year-old man presents with emergent intravenous dizziness. What is the most likely diagnosis?"
    terms = query_terms(query)
    html = highlight(query, terms)
    for filler in ("A", "67", "year", "old", "man", "presents", "with", "What", "is", "the", "most", "likely"):
        assert f"<mark>{filler}</mark>" not in html
    assert "<mark>emergent</mark>" in html and "<mark>dizziness</mark>" in html
    document = "Emergency intravenous fluids for the dizzy and old man; intravenous again."
    # The words as the document writes them, once each — never stems such as "emerg" or "intraven".
    assert overlap(document, terms) == ["dizzy", "Emergency", "intravenous"]


def test_step_follows_the_filtered_list() -> None:
    from r2med_core.analysis.explore import step

    shown = ["q2", "q5", "q9"]
    assert step(shown, "q5", 1) == "q9" and step(shown, "q9", 1) == "q2"  # wraps
    assert step(shown, "q2", -1) == "q9"
    assert step(shown, "q1", 1) == "q2" and step(shown, "q1", -1) == "q9"  # a hidden query: first / last
    assert step([], "q1", 1) is None


def test_verdict_and_axis_range() -> None:
    from r2med_core.analysis.explore import axis_range, verdict
    from r2med_core.evaluation import PairedTest

    base = {"baseline": "a", "system": "b", "metric": "ndcg_at_10", "wins": 5, "ties": 1, "losses": 1}
    better = PairedTest(
        **base, mean_a=0.2, mean_b=0.3, t_pvalue=0.01, randomization_pvalue=0.004, randomization_pvalue_holm=0.012
    )
    assert verdict(better, "nDCG@10") == "significantly better on nDCG@10 (Δ +0.100, p = 0.012 after Holm)"
    same = PairedTest(**base, mean_a=0.3, mean_b=0.28, t_pvalue=0.5, randomization_pvalue=0.41)
    assert verdict(same, "nDCG@10") == "no significant difference on nDCG@10 (Δ -0.020, p = 0.41)"
    low, high = axis_range([0.0, 0.1, 0.3])
    assert low < 0 and 0.3 < high < 0.35  # fits the data, not a fixed 0–1
    assert axis_range([]) == [0.0, 1.0]


def test_retrieved_frame_has_a_text_preview(tiny_r2med: Path) -> None:
    ds = load_r2med_dir(tiny_r2med)
    frame = retrieved_frame(ds, _tiny_run(), "q1", k=5)
    assert frame["preview"].iloc[0].startswith("Ketoacidosis causes an anion gap")


def test_two_systems_side_by_side_mark_gold_in_each_column(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from r2med_core import load_demo, run_system
    from r2med_core.analysis.explore import side_by_side

    monkeypatch.setenv("R2MED_CACHE_DIR", str(tmp_path))
    dataset = load_demo("clinical-case")
    bm25, hyde = run_system(dataset, "bm25"), run_system(dataset, "bm25+hyde:demo-writer")
    table = side_by_side(dataset, {"BM25": bm25, "BM25 + HyDE": hyde}, "3", k=5)
    assert list(table.columns) == ["rank", "BM25", "BM25 + HyDE"] and list(table["rank"]) == [1, 2, 3, 4, 5]
    assert not any(cell.startswith("✓") for cell in table["BM25"])  # BM25 misses every gold document here
    marked = [cell for cell in table["BM25 + HyDE"] if cell.startswith("✓")]
    assert len(marked) == 3 and "✓ addison_crisis_hemorrhage_0 (grade 2)" in marked  # HyDE: ranks 1-3


def test_the_explorer_shows_another_system_side_by_side() -> None:
    from tests.test_app import open_app

    at = open_app("explorer", task="clinical-case", systems=["bm25", "bm25+hyde:demo-writer"], system="bm25", q="3")
    assert not at.exception, [e.value for e in at.exception]
    (box,) = [e for e in at.expander if e.label == "Side by side with another system"]
    assert not box.dataframe  # nothing computed until asked
    at.toggle(key="w_side_show").set_value(True).run()
    (box,) = [e for e in at.expander if e.label == "Side by side with another system"]
    table = box.dataframe[0].value
    assert table.columns[0] == "rank" and len(table.columns) == 3
    assert sum(str(c).startswith("✓") for c in table.iloc[:, 2]) == 3


def test_why_relevant_from_the_data_names_the_answer_link_or_says_there_is_no_answer() -> None:
    dataset = load_demo("clinical-evidence")
    qid = next(iter(dataset.qrels))
    doc = next(d for d, g in dataset.qrels[qid].items() if g == 2)
    told = relevance_from_data(dataset, qid, doc)
    assert told[0] == "The benchmark's judges gave it grade 2 (highly relevant)."
    assert told[1].startswith("The question's reference answer: “Paroxysmal hypertension")
    assert "never uses" in told[2] and "metanephrines" in told[2].lower()
    assert "metanephrines" not in dataset.queries[qid].lower()  # the link is the answer's, not the question's
    no_answer = replace(dataset, query_meta={})
    assert relevance_from_data(no_answer, qid, doc)[1] == "This task gives no reference answer for the question."
