"""A metric is one registered record: registering a family is one entry that the evaluator, the labels,
the tables and the MTEB names all see, and that never makes the paper seem to have published it."""

from __future__ import annotations

import pytest
import pytrec_eval

from r2med_core import evaluation, measures
from r2med_core.analysis import published
from r2med_core.evaluation import MAIN_METRICS, evaluate, metric_explained, metric_label, metric_name
from r2med_core.measures import Measure
from r2med_core.reporting.tables import means_table
from r2med_core.runs import Run

SUCCESS = Measure("success_at", "success", "Success", "whether a relevant document is in the top {k}", (1, 5, 10))
RPREC = Measure("rprec", "Rprec", "R-Prec", "precision at R, the number of relevant documents")

QRELS = {"q1": {"d1": 2, "d3": 1}, "q2": {"d9": 1}, "q3": {"d2": 1, "d4": 1, "d5": 0}}
RUN = Run(
    "toy",
    {
        "q1": [("d2", 3.0), ("d3", 2.0), ("d1", 1.0)],
        "q2": [("d1", 5.0), ("d2", 4.0)],
        "q3": [("d4", 9.0), ("d2", 8.0), ("d5", 7.0)],
    },
)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Measure]:
    """A copy of the registry for one test to register into (the real one is left as it was)."""
    copy = dict(measures.MEASURES)
    monkeypatch.setattr(measures, "MEASURES", copy)
    return copy


def _direct(measure: str) -> dict[str, dict[str, float]]:
    return pytrec_eval.RelevanceEvaluator(QRELS, {measure}).evaluate(RUN.as_score_dict())


def test_the_paper_published_21_metrics_for_bm25_and_a_new_family_does_not_change_that(
    registry: dict[str, Measure],
) -> None:
    before = {kind: evaluation.published_metrics(kind) for kind in measures.PAPER}
    notes = {kind: evaluation.published_metrics_note(kind) for kind in measures.PAPER}
    assert len(before["bm25"]) == 21 and len(before["dense"]) == 20
    measures.register(SUCCESS)
    assert {kind: evaluation.published_metrics(kind) for kind in measures.PAPER} == before
    assert {kind: evaluation.published_metrics_note(kind) for kind in measures.PAPER} == notes
    assert measures.published_metrics() == published.METRICS  # what the paper's data file may hold
    # ... but everything that lists what the evaluator reports has it
    assert evaluation.ALL_METRICS[-len(SUCCESS.cutoffs) :] == ("success_at_1", "success_at_5", "success_at_10")
    assert metric_label("success_at_5") == "Success@5"
    assert metric_explained("success_at_10") == "Success@10 (whether a relevant document is in the top 10)"
    assert measures.parse("success@10") == "success_at_10"


def test_a_new_family_is_evaluated_by_pytrec_eval(registry: dict[str, Measure]) -> None:
    measures.register(SUCCESS)
    results = evaluate(RUN, QRELS, dataset_name="toy")
    direct = _direct("success.1,5,10")
    for qid, values in direct.items():
        for key, value in values.items():
            assert results.per_query.loc[qid, metric_name(key)] == value
    assert results.means["success_at_1"] == pytest.approx(1 / 3)  # only q3 ranks a relevant document first
    assert "success_at_10" in results.to_json()["test"]
    assert "success_at_10" in means_table([results]).columns


def test_a_measure_without_a_cutoff_works_end_to_end(registry: dict[str, Measure]) -> None:
    measures.register(RPREC)
    results = evaluate(RUN, QRELS, dataset_name="toy")
    direct = _direct("Rprec")
    assert metric_name("Rprec") == "rprec"
    assert results.per_query["rprec"].to_dict() == {qid: v["Rprec"] for qid, v in direct.items()}
    assert results.means["rprec"] == pytest.approx(sum(v["Rprec"] for v in direct.values()) / 3)
    assert metric_label("rprec") == "R-Prec" and measures.parse("R-Prec") == "rprec"
    assert metric_explained("rprec") == "R-Prec (precision at R, the number of relevant documents)"
    assert "rprec" not in evaluation.published_metrics("bm25")
    assert "(no MRR)" in str(evaluation.published_metrics_note("dense"))  # R-Prec was published for nothing


def test_a_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="already registered"):
        measures.register(Measure("mrr", "recip_rank", "MRR", "again"))
    with pytest.raises(ValueError, match="unknown kinds"):
        Measure("x", "x", "X", "x", published=frozenset({"fusion"}))


def test_every_table_is_read_from_the_registry() -> None:
    assert set(MAIN_METRICS) <= set(evaluation.ALL_METRICS)
    assert all(measures.find(m) is not None for m in (*evaluation.ALL_METRICS, *evaluation.DEEP_METRICS))
    assert evaluation.DEEP_METRICS == ("ndcg_at_1000", "map_at_1000", "recall_at_1000", "precision_at_1000")
    assert [metric_label(m) for m in ("ndcg_at_10", "precision_at_1", "mrr", "not_a_metric")] == [
        "nDCG@10",
        "P@1",
        "MRR",
        "not_a_metric",
    ]
    with pytest.raises(KeyError, match="unknown metric"):
        evaluation.metric_meaning("not_a_metric")
    with pytest.raises(KeyError):
        metric_name("bpref")
