"""Pooling: unjudged documents of the systems' top k, Judged@k, and metrics with/without the team's judgements."""

from __future__ import annotations

from pathlib import Path

import ir_measures
import pytest

from r2med_core.data import DataError
from r2med_core.evaluation import MAIN_METRICS, evaluate
from r2med_core.judging.adjudication import Decision
from r2med_core.judging.annotations import Annotation, AnnotationStore
from r2med_core.judging.pooling import (
    ORIGINAL,
    TEAM,
    Pool,
    compare_with_team,
    judged_at_k,
    pool,
    pooling_by_measure,
    scores_with_team,
)
from r2med_core.judging.team import team_qrels
from r2med_core.runs import Run


def _run(name: str, rankings: dict[str, list[str]]) -> Run:
    return Run(
        name, {qid: [(doc, float(len(docs) - i)) for i, doc in enumerate(docs)] for qid, docs in rankings.items()}
    )


QRELS = {"q1": {"g1": 2, "n1": 0}, "q2": {"g2": 1}, "q3": {}}
A = _run("A", {"q1": ["g1", "u1", "n1", "u2", "u3"], "q2": ["u4", "g2"], "q3": ["x"], "q9": ["y"]})
B = _run("B", {"q1": ["u2", "u5", "g1", "u1"], "q2": ["g2", "u6"]})


def test_pool_keeps_only_unjudged_top_depth_documents_deduplicated_with_contributors() -> None:
    pooled = pool({"A": A, "B": B}, QRELS, depth=3)
    assert isinstance(pooled, Pool) and pooled.depth == 3 and pooled.systems == ("A", "B")
    # q1: A's top 3 = g1, u1, n1 (n1 is judged, grade 0) → u1; B's top 3 = u2, u5, g1 → u2, u5.
    # Order: best rank anywhere (u2 rank 1 in B; u1, u5 rank 2, A before B), u3 and B's u1 at rank 4 are cut.
    assert [(d.doc_id, d.systems) for d in pooled.docs["q1"]] == [("u2", ("B",)), ("u1", ("A",)), ("u5", ("B",))]
    assert [(d.doc_id, d.systems) for d in pooled.docs["q2"]] == [("u4", ("A",)), ("u6", ("B",))]
    # q3 has no judgements and q9 is not in the qrels: never evaluated, so never pooled.
    assert set(pooled.docs) == {"q1", "q2"} and len(pooled) == 5
    deeper = pool({"A": A, "B": B}, QRELS, depth=4)
    u1 = next(d for d in deeper.docs["q1"] if d.doc_id == "u1")
    assert u1.systems == ("A", "B")  # retrieved by both within depth 4: listed once, both credited
    assert deeper.contributed() == {"A": 3, "B": 4} and deeper.unique() == {"A": 1, "B": 2}
    with pytest.raises(ValueError, match="positive integer"):
        pool({"A": A}, QRELS, depth=0)


def _team(store: AnnotationStore, decisions: list[Decision] | None = None) -> dict[str, dict[str, int]]:
    return team_qrels(QRELS, store.list(), decisions or [], dataset="R2MED", task="T").qrels


def test_pool_skips_documents_the_team_judged() -> None:
    pooled = pool({"A": A}, {**QRELS, "q1": {**QRELS["q1"], "u1": 1}}, depth=5)
    assert [d.doc_id for d in pooled.docs["q1"]] == ["u2", "u3"]


def test_judged_at_k_is_ir_measures_judged() -> None:
    mean, per_query = judged_at_k(A, QRELS, k=10)
    expected = ir_measures.calc_aggregate(
        [ir_measures.Judged @ 10], {q: g for q, g in QRELS.items() if g}, A.as_score_dict()
    )[ir_measures.Judged @ 10]
    assert mean == pytest.approx(expected)
    assert per_query == pytest.approx({"q1": 2 / 5, "q2": 1 / 2})  # n1 (grade 0) counts as judged
    assert judged_at_k(A, QRELS, k=1)[1] == pytest.approx({"q1": 1.0, "q2": 0.0})
    assert judged_at_k(Run("empty"), QRELS) == (0.0, {})


def test_accepted_addition_changes_metric_rank_and_judged(tmp_path: Path) -> None:
    store = AnnotationStore(tmp_path / "a.sqlite")
    label = store.add(
        Annotation(
            dataset="R2MED", task="T", query_id="q2", doc_id="u4", failure_type="relevant_unjudged", annotator="ann"
        )
    )
    runs = {"A": A, "B": B, "C": _run("C", {"q1": ["g1"], "q2": ["g2"]})}  # C: perfect on the old judgements
    before = compare_with_team(runs, QRELS, _team(store))
    assert (before["without"] == before["with"]).all()  # a proposal is not a judgement
    store.review(label.id, True, "rev")
    table = compare_with_team(runs, QRELS, _team(store)).set_index("system")
    assert table.loc["A", "without"] == pytest.approx(evaluate(A, QRELS).means["ndcg_at_10"])
    extended = {**QRELS, "q2": {"g2": 1, "u4": 1}}
    assert table.loc["A", "with"] == pytest.approx(evaluate(A, extended).means["ndcg_at_10"])
    assert table.loc["A", "with"] > table.loc["A", "without"]
    assert table.loc["B", "with"] < table.loc["B", "without"]  # B misses the new relevant document
    # Without the addition C leads; with it A does (C never retrieved u4).
    assert (table.loc["A", "rank_without"], table.loc["A", "rank_with"], table.loc["A", "rank_change"]) == (2, 1, 1)
    assert (table.loc["C", "rank_without"], table.loc["C", "rank_with"], table.loc["C", "rank_change"]) == (1, 2, -1)
    assert table.loc["B", "rank_change"] == 0
    assert table.loc["A", "judged_without"] == pytest.approx((2 / 5 + 1 / 2) / 2)
    assert table.loc["A", "judged_with"] == pytest.approx((2 / 5 + 1) / 2)


def test_the_pooling_table_reads_a_column_per_system_and_a_row_per_measure_in_words() -> None:
    """The Metrics page's table: each system's numbers down its column (so it fits a narrow window), the
    rank as "without → with", each measure said in words."""
    runs = {"A": A, "C": _run("C", {"q1": ["g1"], "q2": ["g2"]})}
    extended = {**QRELS, "q2": {"g2": 1, "u4": 1}}
    table = compare_with_team(runs, QRELS, extended)
    pooled = pool(runs, QRELS, 5)
    shown = pooling_by_measure(table, pooled, {"A": "System A"})
    assert list(shown.columns) == ["what it says", "System A", "C"]
    assert list(shown.index) == [
        "nDCG@10 without", "nDCG@10 with", "rank", "Judged@10", "Judged@10 with", "pooled @5", "only it",
    ]  # fmt: skip
    assert list(shown.loc["rank", ["System A", "C"]]) == ["2 → 1", "1 → 2"]  # A leads once u4 is judged relevant
    assert shown.loc["nDCG@10 with", "System A"] == f"{table.loc[0, 'with']:.4f}"
    assert shown.loc["Judged@10", "System A"] == f"{(2 / 5 + 1 / 2) / 2:.4f}"
    assert list(shown.loc["pooled @5", ["System A", "C"]]) == ["4", "0"]  # u1, u2, u3 (q1) and u4 (q2): A's alone
    assert shown.loc["only it", "System A"] == "4"
    assert all(shown["what it says"])


def test_one_reevaluation_with_the_original_and_the_teams_qrels() -> None:
    extended = {**QRELS, "q2": {"g2": 1, "u4": 1}}
    runs = {"A": A, "B": B}
    scores = scores_with_team(runs, QRELS, extended, dataset_name="T")
    assert list(zip(scores["system"], scores["qrels"])) == [("A", ORIGINAL), ("A", TEAM), ("B", ORIGINAL), ("B", TEAM)]
    assert list(scores.columns) == ["system", "qrels", *MAIN_METRICS]
    for (name, which), row in scores.set_index(["system", "qrels"]).iterrows():
        expected = evaluate(runs[name], QRELS if which == ORIGINAL else extended).means
        assert dict(row) == pytest.approx({m: expected[m] for m in MAIN_METRICS})
    # The Metrics page's and the command line's comparison is the same re-evaluation, ranked.
    table = compare_with_team(runs, QRELS, extended, metric="map_at_10").set_index("system")
    by = scores.set_index(["system", "qrels"])["map_at_10"]
    assert list(table["without"]) == [by[("A", ORIGINAL)], by[("B", ORIGINAL)]]
    assert list(table["with"]) == [by[("A", TEAM)], by[("B", TEAM)]]


def test_documents_judged_not_relevant_count_as_judged_but_change_no_metric(tmp_path: Path) -> None:
    store = AnnotationStore(tmp_path / "a.sqlite")
    common = {"dataset": "R2MED", "task": "T", "failure_type": "not_relevant"}
    store.add(Annotation(**common, query_id="q1", doc_id="u1", annotator="ann"))
    store.add(Annotation(**common, query_id="q3", doc_id="x", annotator="ann"))  # q3 has no judgements
    rejected = store.add(Annotation(**common, query_id="q2", doc_id="u4", annotator="bob"))
    store.review(rejected.id, False, "rev")
    store.add(Annotation(**{**common, "task": "other"}, query_id="q1", doc_id="u2", annotator="ann"))
    store.add(Annotation(**{**common, "failure_type": "grade_0"}, query_id="q2", doc_id="u5", annotator="ann"))
    store.add(Annotation(**{**common, "failure_type": "grade_2"}, query_id="q2", doc_id="u6", annotator="ann"))
    store.add(Annotation(**common, query_id="q1", doc_id="g1", annotator="ann"))  # a gold document: not lowered
    team = _team(store)
    # One person's grade 0 (either page's) fills a hole without a review; q3 stays out of the means.
    assert team == {"q1": {"g1": 2, "n1": 0, "u1": 0}, "q2": {"g2": 1, "u5": 0}, "q3": {}}
    row = compare_with_team({"A": A}, QRELS, team).iloc[0]
    assert row["with"] == pytest.approx(row["without"])
    assert row["judged_with"] == pytest.approx((3 / 5 + 1 / 2) / 2)  # u1 now judged in A's q1 top 5
    assert [d.doc_id for d in pool({"A": A}, team, 5).docs["q1"]] == ["u2", "u3"]


def test_a_reviewers_decision_replaces_what_the_labels_said_about_a_pair(tmp_path: Path) -> None:
    store = AnnotationStore(tmp_path / "a.sqlite")
    common = {"dataset": "R2MED", "task": "T", "query_id": "q1"}
    for doc in ("u1", "u2"):
        accepted = store.add(Annotation(**common, doc_id=doc, failure_type="grade_1", annotator="ann"))
        store.review(accepted.id, True, "rev")
    store.add(Annotation(**common, doc_id="u3", failure_type="grade_0", annotator="ann"))
    store.add(Annotation(**{**common, "query_id": "q2"}, doc_id="u4", failure_type="grade_0", annotator="ann"))

    def decision(query: str, doc: str, grade: int, id: int) -> Decision:
        return Decision(
            id=id, dataset="R2MED", task="T", query_id=query, doc_id=doc, failure_type=f"grade_{grade}", reviewer="r"
        )

    decisions = [decision("q1", "u1", 0, 1), decision("q2", "u4", 2, 2), decision("q3", "x", 1, 3)]
    assert _team(store, decisions) == {
        "q1": {"g1": 2, "n1": 0, "u1": 0, "u2": 1, "u3": 0},
        "q2": {"g2": 1, "u4": 2},
        "q3": {"x": 1},
    }


def test_pool_downloads_trec_like_and_csv_in_the_pools_order() -> None:
    from r2med_core.judging.pooling import pool_csv, pool_text

    pooled = pool({"A": A, "B": B}, QRELS, depth=4)
    assert pool_text(pooled) == "q1 0 u2\nq1 0 u1\nq1 0 u5\nq2 0 u4\nq2 0 u6\n"
    rows = pool_csv(pooled).splitlines()
    assert rows[0] == "query_id,doc_id,systems" and rows[2] == "q1,u1,A B" and rows[-1] == "q2,u6,B"
    spaced = pool({"A": _run("A", {"q1": ["a doc"]})}, QRELS, depth=1)
    with pytest.raises(DataError, match="an id a TREC line cannot hold"):
        pool_text(spaced)
    assert pool_csv(spaced).splitlines()[1] == "q1,a doc,A"  # CSV quotes what TREC cannot hold
