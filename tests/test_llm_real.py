"""The LLM rerankers, the LLM judge and the relevance proposals against a real llama.cpp server
(``llama_server``: llama-cpp-python's server with SmolLM2-135M, temperature 0, seed 42) on the demo.

What a user relies on: a reranked run holds only first-stage documents, each once, and a query
whose reply was unusable keeps the first-stage order — with the count of unusable replies in the
run's record; the estimate made from the server's measured speed is within a factor of 2 of the
time the job took, and the run's time is that job's; the judge grades or counts what it could not
read. Replies are bounded at ``TEST_REPLY_TOKENS`` (a test setting, so the tests stay quick; the
benchmark's list-wise reranker sends no bound). The fake server (test_llm_rerank*.py) stays for
hostile replies.
"""

from __future__ import annotations

import time

import pytest

from r2med_core.data import Dataset, load_demo
from r2med_core.judging.annotations import AnnotationStore
from r2med_core.judging.llm_judge import estimate as judge_estimate
from r2med_core.judging.llm_judge import judge_pairs, propose_labels, unjudged_pairs
from r2med_core.kinds.base import run_system
from r2med_core.llm.batch import BatchReport
from r2med_core.llm.client import ChatClient
from r2med_core.llm.llm_rerank import estimate, listwise_rerank
from r2med_core.runs import Run, llm_outcomes
from tests.llm_server import LlamaServer

#: Reply bound in these tests (module docstring).
TEST_REPLY_TOKENS = 64
K = 5
#: Seconds a request may take: a loaded 2-core machine ran SmolLM2 at under 1 token/s.
TIMEOUT = 600.0


def _first(queries: int) -> tuple[Dataset, Run]:
    dataset = load_demo("clinical-case")
    bm25 = run_system(dataset, "bm25")
    chosen = sorted(bm25.rankings)[:queries]
    return dataset, Run(bm25.name, {q: bm25.rankings[q] for q in chosen})


def _check_reranked(first: Run, run: Run, report: BatchReport) -> None:
    """Only first-stage top-k documents, each once; unusable replies keep the first-stage order and
    are counted in the run's record."""
    for qid, ranking in run.rankings.items():
        docs = [doc for doc, _ in ranking]
        top = [doc for doc, _ in first.top(qid, K)]
        assert len(docs) == len(set(docs)) and set(docs) <= set(top)
        if qid in report.unparsable:
            assert docs == top
    record = run.usage[-1]
    assert record["unusable"] == len(report.unparsable) and record["requests"] == len(first.rankings)
    if report.unparsable:
        lines = llm_outcomes(run.usage)
        assert lines and f"{len(report.unparsable)} of {len(first.rankings)} replies unusable" in lines[0]


def test_listwise_reranker_on_a_real_server_estimate_time_and_record(llama_server: LlamaServer) -> None:
    dataset, first = _first(2)
    endpoint = llama_server.endpoint(timeout=TIMEOUT)
    # A fresh server's first long prompt also sets up its buffers (it decoded several times slower than the
    # next ones): warm it first with a prompt as long as a list-wise one, of unrelated text so that no
    # measured prompt finds its prefix cached (not measured).
    filler = " ".join(["the patient reports a persistent cough and mild fever"] * 150)
    ChatClient(llama_server.endpoint(max_tokens=4)).chat([{"role": "user", "content": f"{filler}\nSay OK."}])
    one = Run(first.name, {q: first.rankings[q] for q in sorted(first.rankings)[:1]})
    assert not estimate(one, dataset, endpoint, k=K, max_tokens=TEST_REPLY_TOKENS).measured
    started = time.monotonic()
    report = BatchReport("listwise", "")
    run = listwise_rerank(one, dataset, endpoint, K, report_to=report, max_tokens=TEST_REPLY_TOKENS)
    took = time.monotonic() - started
    assert run.seconds <= took + 1.0  # the job's wall time, not a sum of timeouts
    _check_reranked(one, run, report)
    # The second query, estimated from the server's speed as the first reply measured it.
    expected = estimate(first, dataset, endpoint, k=K, max_tokens=TEST_REPLY_TOKENS)
    assert expected.measured and expected.cached == 1 and expected.to_send == 1
    started = time.monotonic()
    report = BatchReport("listwise", "")
    both = listwise_rerank(first, dataset, endpoint, K, report_to=report, max_tokens=TEST_REPLY_TOKENS)
    took = time.monotonic() - started
    assert took / 2 <= expected.seconds <= took * 2, (expected.seconds, took, expected.basis)
    _check_reranked(first, both, report)


def test_insertrank_style_reranker_on_a_real_server(llama_server: LlamaServer) -> None:
    dataset, first = _first(1)
    report = BatchReport("insertrank", "")
    endpoint = llama_server.endpoint(timeout=TIMEOUT)
    run = listwise_rerank(first, dataset, endpoint, K, report_to=report, show_scores=True, max_tokens=TEST_REPLY_TOKENS)
    assert ">insertrank:" in run.name and run.usage[-1]["use"] == "insertrank rerank"
    _check_reranked(first, run, report)


def test_llm_judge_and_relevance_proposals_on_a_real_server(llama_server: LlamaServer, tmp_path) -> None:
    dataset, first = _first(1)
    pairs = unjudged_pairs(dataset, [first], k=2)[:2]
    assert len(pairs) == 2
    endpoint = llama_server.endpoint(timeout=TIMEOUT)
    before = judge_estimate(dataset, pairs, endpoint)
    assert before.requests == 2 and "about" in before.describe()
    judged = judge_pairs(dataset, pairs, endpoint)
    assert set(judged.failed) == set(judged.unparsable) and judged.sent == 2  # no request failed
    units = {(p.query_id, p.doc_id) for p in pairs}
    assert set(judged.results) | set(judged.unparsable) == units  # a grade, or counted as unusable
    assert all(grade in (0, 1, 2, 3) for grade in judged.results.values())
    assert "unparsable" in judged.summary() or not judged.unparsable
    store = AnnotationStore(tmp_path / "labels.sqlite")
    proposed = propose_labels(store, dataset, pairs, judged.results, endpoint, threshold=1)
    graded_up = sum(1 for grade in judged.results.values() if grade >= 1)
    assert proposed.added == graded_up and proposed.added + proposed.below_threshold == len(judged.results)
    after = judge_estimate(dataset, pairs, endpoint)
    # Graded pairs are never sent again; an unusable reply is asked again on the next run.
    assert after.requests == len(judged.unparsable) and after.cached == len(judged.results)


pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")
