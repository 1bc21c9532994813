"""Metric parity with pytrec_eval, the results-file shape, and the paired significance tests."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest
import pytrec_eval

from r2med_core.cli import main
from r2med_core.data import load_dir
from r2med_core.evaluation import (
    ALL_METRICS,
    Results,
    compare,
    evaluate,
    holm,
    metric_name,
    paired_test,
    published_metrics,
    published_metrics_note,
    randomization_words,
)
from r2med_core.runs import Run, read_trec

from .conftest import write_jsonl

PYTREC_MEASURES = {
    "ndcg_cut.1,10,25,50,100",
    "map_cut.1,10,25,50,100",
    "recall.1,10,25,50,100",
    "P.1,10,25,50,100",
    "recip_rank",
}


def _random_case(seed: int) -> tuple[Run, dict[str, dict[str, int]]]:
    """A run with many tied scores and graded (0/1/2) qrels, some queries unjudged or unretrieved."""
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(300)]
    qrels: dict[str, dict[str, int]] = {}
    rankings: dict[str, list[tuple[str, float]]] = {}
    for q in range(40):
        qid = f"q{q}"
        if q % 7 != 3:
            qrels[qid] = {d: rng.choice([0, 1, 1, 2]) for d in rng.sample(docs, rng.randint(1, 12))}
        if q % 11 != 5:
            picked = rng.sample(docs, 150)
            scores = [round(rng.uniform(0, 5), 1) for _ in picked]  # one decimal → plenty of ties
            rankings[qid] = sorted(zip(picked, scores), key=lambda x: -x[1])
    return Run("random", rankings), qrels


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_number_equals_pytrec_eval(seed: int) -> None:
    run, qrels = _random_case(seed)
    results = evaluate(run, qrels)
    direct = pytrec_eval.RelevanceEvaluator(qrels, PYTREC_MEASURES).evaluate(run.truncated(100).as_score_dict())
    assert set(results.per_query.index) == set(direct)
    for qid, values in direct.items():
        for key, value in values.items():
            assert results.per_query.loc[qid, metric_name(key)] == value
    for key in next(iter(direct.values())):
        expected = sum(v[key] for v in direct.values()) / len(direct)
        assert results.means[metric_name(key)] == pytest.approx(expected, abs=1e-12)
    assert set(results.means) == set(ALL_METRICS)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_means_are_bit_for_bit_pandas_means_of_the_per_query_table(seed: int) -> None:
    """The means are computed without pandas (so ``eval`` does not import it) and must not move."""
    run, qrels = _random_case(seed)
    results = evaluate(run, qrels, depth=1000)
    table = results.per_query
    assert table.index.name == "query_id" and list(table.columns) == list(results.means)
    assert results.means == {name: float(table[name].mean()) for name in table.columns}
    assert results.n_evaluated == len(table)


#: What the benchmark's dense evaluation (BEIR) asks pytrec_eval for.
BEIR_MEASURES = {"ndcg_cut.1,3,5,10,100", "map_cut.1,3,5,10,100", "recall.1,3,5,10,100", "P.1,3,5,10,100"}


@pytest.mark.parametrize("seed", [0, 3])
def test_dense_cutoffs_equal_the_beir_measure_set(seed: int) -> None:
    """Every system gets the union: @3 and @5 as BEIR computes them, shared cutoffs unchanged."""
    run, qrels = _random_case(seed)
    results = evaluate(run, qrels)
    direct = pytrec_eval.RelevanceEvaluator(qrels, BEIR_MEASURES).evaluate(run.truncated(100).as_score_dict())
    for key in next(iter(direct.values())):
        expected = sum(v[key] for v in direct.values()) / len(direct)
        assert results.means[metric_name(key)] == pytest.approx(expected, abs=1e-12)
    assert {"ndcg_at_3", "map_at_5", "recall_at_3", "precision_at_5", "ndcg_at_25", "mrr"} <= set(results.means)


def test_which_metrics_the_paper_published_per_kind_of_system() -> None:
    dense = published_metrics("dense")
    assert "ndcg_at_3" in dense and "precision_at_5" in dense and "recall_at_100" in dense
    assert "mrr" not in dense and "ndcg_at_25" not in dense
    bm25 = published_metrics("bm25")
    assert "mrr" in bm25 and "map_at_50" in bm25 and "ndcg_at_3" not in bm25
    assert published_metrics("reranker") == bm25
    assert set(dense) | set(bm25) == set(ALL_METRICS)
    assert published_metrics("fusion") == () and published_metrics_note("fusion") is None
    assert "1, 3, 5, 10, 100 (no MRR)" in str(published_metrics_note("dense"))


def test_only_judged_and_retrieved_queries_are_averaged() -> None:
    run = Run("r", {"a": [("x", 2.0), ("y", 1.0)], "b": [("x", 1.0)], "c": [("z", 1.0)]})
    qrels = {"a": {"y": 1}, "b": {"x": 1}, "d": {"x": 1}}
    results = evaluate(run, qrels)
    assert list(results.per_query.index) == ["a", "b"]
    assert results.means["mrr"] == pytest.approx((0.5 + 1.0) / 2)
    assert results.means["precision_at_1"] == pytest.approx(0.5)
    assert results.n_skipped == 2  # "c" has no judgements, "d" was not retrieved


def test_run_is_cut_to_depth_100() -> None:
    ranking = [(f"n{i}", 1000.0 - i) for i in range(100)] + [("gold", 1.0)]
    results = evaluate(Run("r", {"q": ranking}), {"q": {"gold": 1}})
    assert results.means["recall_at_100"] == 0.0
    assert "recall_at_1000" not in results.means  # @1000 only when asked for


def test_depth_1000_scores_at_1000_as_the_benchmarks_first_commit() -> None:
    ranking = [(f"n{i}", 2000.0 - i) for i in range(499)] + [("gold", 1.0)] + [(f"m{i}", 0.5) for i in range(600)]
    qrels = {"q": {"gold": 1, "other": 1}}
    results = evaluate(Run("r", {"q": ranking}), qrels, depth=1000)
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"recall.1000", "ndcg_cut.1000", "P.1000"}).evaluate(
        {"q": {doc: score for doc, score in ranking[:1000]}}
    )["q"]
    assert results.means["recall_at_100"] == 0.0 and results.means["recall_at_1000"] == 0.5
    assert results.means["ndcg_at_1000"] == pytest.approx(expected["ndcg_cut_1000"])
    assert results.means["precision_at_1000"] == pytest.approx(expected["P_1000"])
    assert list(results.per_query.columns)[-4:] == [
        f"{m}_1000" for m in ("ndcg_at", "map_at", "recall_at", "precision_at")
    ]


def test_results_json_has_the_official_shape() -> None:
    run, qrels = _random_case(0)
    payload = evaluate(run, qrels, dataset_name="Biology", seconds=30).to_json()
    assert set(payload) == {"dataset_name", "model_name", "evaluation_time", "test"}
    assert payload["dataset_name"] == "Biology" and payload["evaluation_time"] == "0.50 minutes"
    assert {"ndcg_at_10", "map_at_10", "recall_at_100", "precision_at_10", "mrr"} <= set(payload["test"])
    assert all(round(v, 5) == v for v in payload["test"].values())


def _results(name: str, values: list[float]) -> Results:
    frame = pd.DataFrame({"ndcg_at_10": values}, index=[f"q{i}" for i in range(len(values))])
    return Results("d", name, {"ndcg_at_10": sum(values) / len(values)}, frame, len(values), 0, 0.0)


def test_paired_test_counts_and_detects_a_real_difference() -> None:
    a = _results("A", [0.1, 0.2, 0.3, 0.4, 0.5, 0.1, 0.2, 0.3, 0.4, 0.5, 0.3, 0.3])
    b = _results("B", [0.5, 0.6, 0.7, 0.8, 0.9, 0.6, 0.7, 0.8, 0.9, 0.95, 0.3, 0.2])
    test = paired_test(a, b, n_resamples=2000)
    assert (test.wins, test.ties, test.losses) == (10, 1, 1)
    assert test.delta > 0.3
    assert test.t_pvalue < 0.01 and test.randomization_pvalue < 0.01
    same = paired_test(a, _results("A2", list(a.per_query["ndcg_at_10"])))
    assert same.t_pvalue == 1.0 and same.randomization_pvalue == 1.0 and same.ties == 12


def test_the_randomization_test_says_whether_it_was_exact_or_sampled_as_scipy_ran_it() -> None:
    """12 queries: scipy enumerates all 2**12 sign assignments (fewer than the 10,000 resamples asked
    for), so p is a multiple of 1/4096 and the words say exact; 20 queries: 10,000 random flips."""
    a = _results("A", [0.1 * (i % 5) for i in range(12)])
    b = _results("B", [0.1 * (i % 5) + 0.3 for i in range(12)])
    exact = paired_test(a, b)
    assert exact.exact and (exact.n_queries, exact.sign_assignments) == (12, 4096)
    assert exact.randomization_pvalue == pytest.approx(2 / 4096)  # only the all-positive and all-negative
    said = "two-sided exact paired randomization test (all 4,096 sign assignments of 12 queries)"
    assert exact.randomization_text == said
    many_a = _results("A", [0.05 * (i % 7) for i in range(20)])
    many_b = _results("B", [0.05 * (i % 7) + 0.01 * (i % 3) for i in range(20)])
    sampled = paired_test(many_a, many_b)
    assert not sampled.exact and (sampled.n_queries, sampled.sign_assignments) == (20, 10_000)
    assert "10,000 random sign flips of 20 queries" in sampled.randomization_text
    same = paired_test(a, _results("A2", list(a.per_query["ndcg_at_10"])))
    assert same.sign_assignments == 0 and same.randomization_text.startswith("no randomization test")
    # a caption over several comparisons names each kind once
    assert randomization_words([exact, sampled, exact]) == f"{exact.randomization_text}; {sampled.randomization_text}"


def test_holm_correction() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    a = _results("A", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    tests = compare(a, [_results("B", [0.2, 0.3, 0.4, 0.5, 0.6, 0.65]), _results("C", [0.1, 0.25, 0.3, 0.4, 0.5, 0.6])])
    assert all(t.t_pvalue_holm is not None and t.t_pvalue_holm >= t.t_pvalue for t in tests)


# --------------------------------------------------------------------------- qrels as the benchmark uses them


def _write_edge_case_dataset(root: Path) -> tuple[list[dict], str]:
    """Unknown documents, duplicates, grade-0-only and unknown-only queries, and tied run scores."""
    corpus = [{"id": f"d{i}", "text": f"document number {i}"} for i in range(12)]
    queries = [{"id": f"q{i}", "text": f"query {i}"} for i in range(6)]
    qrels = [
        {"q_id": "q0", "p_id": "d0", "score": 1},
        {"q_id": "q0", "p_id": "gone1", "score": 2},  # not in the corpus: still counts
        {"q_id": "q0", "p_id": "d3", "score": 1},
        {"q_id": "q1", "p_id": "d1", "score": 1},
        {"q_id": "q1", "p_id": "d1", "score": 0},  # duplicate: the last line wins (now grade 0)
        {"q_id": "q1", "p_id": "d2", "score": 0},
        {"q_id": "q1", "p_id": "d2", "score": 2},  # duplicate the other way
        {"q_id": "q2", "p_id": "d4", "score": 0},  # grade 0 only: averaged, scores 0
        {"q_id": "q3", "p_id": "gone2", "score": 1},  # only unknown documents: averaged, scores 0
        {"q_id": "q3", "p_id": "gone3", "score": 1},
        {"q_id": "q4", "p_id": "d5", "score": 2},
        {"q_id": "q4", "p_id": "d6", "score": 1},
        {"q_id": "q4", "p_id": "gone4", "score": 1},
    ]  # q5: no judgements at all
    write_jsonl(root / "corpus.jsonl", corpus)
    write_jsonl(root / "query.jsonl", queries)
    write_jsonl(root / "qrels.jsonl", qrels)
    lines = []
    for q in range(6):
        # scores with ties (trec_eval breaks them by document id), every query retrieved
        for rank, doc in enumerate([(q + j) % 12 for j in range(10)], start=1):
            lines.append(f"q{q} Q0 d{doc} {rank} {float(10 - (rank // 3)):.1f} edge")
    return qrels, "\n".join(lines) + "\n"


def test_qrels_edge_cases_equal_pytrec_eval_on_the_raw_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The reference is what the benchmark does: every qrels line into a dict (last wins), pytrec_eval."""
    root = tmp_path / "edge"
    qrels_rows, trec = _write_edge_case_dataset(root)
    (tmp_path / "run.trec").write_text(trec, encoding="utf-8")
    reference_qrels: dict[str, dict[str, int]] = {}
    for row in qrels_rows:
        reference_qrels.setdefault(str(row["q_id"]), {})[str(row["p_id"])] = int(row["score"])
    reference_run: dict[str, dict[str, float]] = {}
    for line in trec.splitlines():
        qid, _, doc, _, score, _ = line.split()
        reference_run.setdefault(qid, {})[doc] = float(score)
    direct = pytrec_eval.RelevanceEvaluator(reference_qrels, PYTREC_MEASURES).evaluate(reference_run)
    expected = {metric_name(key): sum(v[key] for v in direct.values()) / len(direct) for key in direct["q0"]}

    dataset = load_dir(root)
    results = evaluate(read_trec(tmp_path / "run.trec"), dataset.qrels)
    assert set(results.per_query.index) == set(direct) == {"q0", "q1", "q2", "q3", "q4"}
    for name, value in expected.items():
        assert results.means[name] == pytest.approx(value, abs=1e-12), name
    assert results.per_query.loc["q3"].eq(0).all() and results.per_query.loc["q2"].eq(0).all()
    # the unknown document counts in the denominator: q0 can reach at most 2 of its 3 relevant documents
    assert results.per_query.loc["q0", "recall_at_100"] == pytest.approx(2 / 3)

    # the command line agrees with the same reference
    assert main(["evaluate-run", "--run", str(tmp_path / "run.trec"), "--data-dir", str(root)]) == 0
    printed = json.loads(capsys.readouterr().out)["test"]
    for name, value in expected.items():
        assert printed[name] == pytest.approx(round(value, 5), abs=1e-9), name
