"""Failure diagnosis: each failed query's class on a hand-made task where every class is known, the
LLM judge's stored proposals, and the demo end to end against the BM25 answer oracle."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from r2med_core import load_demo, run_system
from r2med_core.analysis.diagnosis import (
    FAILURE_CLASSES,
    NO_REFERENCE,
    NOT_FAILED,
    POSSIBLY_UNJUDGED,
    PROPOSER_PREFIX,
    REASONING_GAP,
    REPRESENTATION_GAP,
    counts_frame,
    diagnose,
    filter_by_class,
    judge_proposals,
    with_failure_class,
)
from r2med_core.analysis.explore import query_table
from r2med_core.data import Dataset
from r2med_core.evaluation import evaluate
from r2med_core.judging.annotations import Annotation, AnnotationStore
from r2med_core.judging.identity import Person
from r2med_core.judging.llm_judge import propose_labels, proposer_name, unjudged_pairs
from r2med_core.judging.visibility import Sight
from r2med_core.llm.client import Endpoint
from r2med_core.runs import Run

FILLER = [f"f{i}" for i in range(12)]  # documents nobody judged


def ranking(*docs: str) -> list[tuple[str, float]]:
    return [(doc, float(100 - i)) for i, doc in enumerate(docs)]


@pytest.fixture
def tiny() -> tuple[Dataset, Run, Run]:
    """Seven queries, one per situation, with the system's and the oracle's runs written by hand."""
    corpus = {d: d for d in [*FILLER, "g_ok", "g_edge", "g_reason", "g_repr", "g_unj", "g_noans", "g_zero"]}
    queries = {q: f"query {q}" for q in ("ok", "edge", "reason", "repr", "unj", "noans", "zero")}
    answers = {q: {"answer": f"answer {q}"} for q in queries if q != "noans"}
    answers["noans"] = {"answer": "   "}  # blank: no reference answer
    qrels = {
        "ok": {"g_ok": 2},
        "edge": {"g_edge": 1},
        "reason": {"g_reason": 1},
        "repr": {"g_repr": 1},
        "unj": {"g_unj": 1},
        "noans": {"g_noans": 1},
        "zero": {"g_zero": 0},  # only a grade-0 judgement: no gold, left out
    }
    dataset = Dataset("tiny", corpus, queries, qrels, source="test", query_meta=answers)
    system = Run(
        "bm25",
        {
            "ok": ranking("g_ok", *FILLER[:9]),
            "edge": ranking(*FILLER[:9], "g_edge"),  # gold at rank 10: not a failure
            "reason": ranking(*FILLER[:10], "g_reason"),  # gold at rank 11: a failure
            "repr": ranking(*FILLER[:10]),
            "unj": ranking(*FILLER[:10]),  # f3 will be proposed relevant by the judge
            "noans": ranking(*FILLER[:10]),
            "zero": ranking(*FILLER[:10]),
        },
    )
    oracle = Run(
        "oracle:bm25",
        {
            "ok": ranking("g_ok"),
            "edge": ranking("g_edge"),
            "reason": ranking("f0", "f1", "g_reason"),
            "repr": ranking(*FILLER[:10], "g_repr"),  # rank 11: the oracle misses too
            "unj": ranking("g_unj"),  # the oracle finds it, but the judge's proposal comes first
            "zero": ranking("g_zero"),
        },
    )
    return dataset, system, oracle


def test_each_failed_query_gets_the_class_its_evidence_says(tiny: tuple[Dataset, Run, Run]) -> None:
    dataset, system, oracle = tiny
    found = diagnose(dataset, system, oracle, proposals={"unj": {"f3", "not-retrieved"}, "ok": {"f0"}})
    assert found.class_of() == {
        "ok": NOT_FAILED,
        "edge": NOT_FAILED,
        "reason": REASONING_GAP,
        "repr": REPRESENTATION_GAP,
        "unj": POSSIBLY_UNJUDGED,
        "noans": NO_REFERENCE,
    }
    assert found.counts() == {POSSIBLY_UNJUDGED: 1, NO_REFERENCE: 1, REASONING_GAP: 1, REPRESENTATION_GAP: 1}
    assert found.n_failed == 4 and found.oracle == "oracle:bm25" and found.depth == 10
    detail = {q.query_id: q for q in found.queries}
    assert detail["reason"].best_gold_rank == 11 and detail["reason"].oracle_gold_rank == 3
    assert detail["repr"].oracle_gold_rank == 11
    assert detail["unj"].proposed_in_top == ("f3",)  # only the proposals the system retrieved
    assert detail["noans"].oracle_gold_rank is None


def test_failure_is_nothing_gold_in_the_top_depth(tiny: tuple[Dataset, Run, Run]) -> None:
    dataset, system, oracle = tiny
    deeper = diagnose(dataset, system, oracle, depth=11).class_of()
    assert deeper["reason"] == NOT_FAILED
    assert deeper["repr"] == REASONING_GAP  # the oracle is read to the same depth: its gold at 11 counts
    shallow = diagnose(dataset, system, oracle, depth=9).class_of()
    assert shallow["edge"] == REASONING_GAP  # the oracle has it at 1
    with pytest.raises(ValueError, match="depth"):
        diagnose(dataset, system, oracle, depth=0)


def test_without_any_oracle_run_failures_have_no_reference_answer(tiny: tuple[Dataset, Run, Run]) -> None:
    dataset, system, _ = tiny
    found = diagnose(replace(dataset, query_meta={}), system, None, proposals={"unj": {"f3"}})
    assert found.counts() == {POSSIBLY_UNJUDGED: 1, NO_REFERENCE: 3, REASONING_GAP: 0, REPRESENTATION_GAP: 0}


def test_the_explorer_table_gets_the_class_and_filters_on_it(tiny: tuple[Dataset, Run, Run]) -> None:
    dataset, system, oracle = tiny
    found = diagnose(dataset, system, oracle)
    table = with_failure_class(query_table(dataset, evaluate(system, dataset.qrels), system), found)
    assert dict(zip(table["query_id"], table["failure_class"])) == found.class_of()
    gaps = filter_by_class(table, [REASONING_GAP, REPRESENTATION_GAP])
    assert sorted(gaps["query_id"]) == ["reason", "repr", "unj"]  # no proposals given: unj is a reasoning gap
    assert len(filter_by_class(table, [])) == len(table)
    bars = counts_frame({"BM25": found})
    assert list(bars["class"]) == list(FAILURE_CLASSES) and bars["queries"].sum() == found.n_failed


def test_only_the_judges_unrejected_proposals_count(tmp_path: Path, tiny: tuple[Dataset, Run, Run]) -> None:
    dataset, system, oracle = tiny
    store = AnnotationStore(tmp_path / "labels.sqlite")
    judge = Endpoint(None, "toy-judge")
    assert proposer_name(judge).startswith(PROPOSER_PREFIX)
    pairs = unjudged_pairs(dataset, [system])
    grades = {
        (p.query_id, p.doc_id): 3 if (p.query_id, p.doc_id) in {("unj", "f3"), ("repr", "f4")} else 0 for p in pairs
    }
    assert propose_labels(store, dataset, pairs, grades, judge).added == 2
    rejected = next(a for a in store.list(query_id="repr") if a.doc_id == "f4")
    store.review(rejected.id, False, "Dr. Reviewer")
    store.add(  # a person's own unjudged label is not the judge's proposal
        Annotation(
            dataset=dataset.source, task=dataset.name, query_id="noans", doc_id="f2",
            failure_type="relevant_unjudged", annotator="Dr. Test",
        )
    )  # fmt: skip
    assert judge_proposals(store, dataset) == {"unj": frozenset({"f3"})}
    found = diagnose(dataset, system, oracle, proposals=judge_proposals(store, dataset)).class_of()
    assert found["unj"] == POSSIBLY_UNJUDGED and found["repr"] == REPRESENTATION_GAP and found["noans"] == NO_REFERENCE
    # With sign-in on, someone signed out sees no proposal, so no query is "possibly unjudged" for them;
    # an annotator labelling blind sees it once they judged the document.
    assert judge_proposals(store, dataset, Sight(None, signed_in=True)) == {}
    ann = Sight(Person("ann", "proxy", frozenset({"annotator"})), signed_in=True)
    assert judge_proposals(store, dataset, ann) == {}
    store.add(Annotation(dataset=dataset.source, task=dataset.name, query_id="unj", doc_id="f3",
                         failure_type="not_relevant", annotator="ann"))  # fmt: skip
    assert judge_proposals(store, dataset, ann) == {"unj": frozenset({"f3"})}


def test_the_demo_end_to_end_against_the_bm25_oracle() -> None:
    demo = load_demo("clinical-case")
    system, oracle = run_system(demo, "bm25"), run_system(demo, "oracle:bm25")
    found = diagnose(demo, system, oracle)
    per_query = evaluate(system, demo.qrels).per_query
    failed = {q for q in per_query.index if per_query.loc[q, "ndcg_at_10"] == 0}
    assert failed and {q.query_id for q in found.queries if q.failed} == failed  # failure = nDCG@10 = 0
    oracle_hits = evaluate(oracle, demo.qrels).per_query["ndcg_at_10"] > 0
    for q in found.queries:
        if q.failed:  # every demo query has an answer and no proposals are stored
            assert q.failure_class == (REASONING_GAP if oracle_hits[q.query_id] else REPRESENTATION_GAP)
    assert sum(found.counts().values()) == len(failed)
