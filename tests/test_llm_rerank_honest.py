"""LLM rerankers say what they did: unusable replies counted in the run's record, true wall time, an
ETA that never grows while a reply is pending, estimates from the server's measured speed, and a
prompt the server's context cannot hold refused with the setting to change (fake HTTP server here;
tests/test_llm_real.py runs the same against a real llama.cpp server)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from r2med_core.data import Dataset
from r2med_core.llm import llm_rerank as lr
from r2med_core.llm import speed
from r2med_core.llm.client import Endpoint
from r2med_core.llm.llm_rerank import RerankIncomplete, estimate, listwise_rerank
from r2med_core.reporting.provenance import run_provenance
from r2med_core.runs import Run, llm_outcomes
from tests.test_generation import KEY, FakeLLM, fast

DOCS = {f"d{i}": f"Passage {i} about a disease number {i}." for i in range(1, 6)}
QUERIES = {f"q{i}": f"Which disease is number {i}?" for i in range(1, 5)}
ORDER = [("d2", 5.0), ("d4", 4.0), ("d1", 3.0), ("d5", 2.0), ("d3", 1.0)]


@pytest.fixture
def toy() -> Dataset:
    return Dataset(name="toy", corpus=dict(DOCS), queries=dict(QUERIES), qrels={}, source="test")


@pytest.fixture
def first() -> Run:
    return Run("bm25", {qid: list(ORDER) for qid in QUERIES})


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def endpoint(llm: FakeLLM, **settings: Any) -> Endpoint:
    return Endpoint(llm.url, settings.pop("model", "fake-model"), api_key=KEY, **settings)


def test_unusable_replies_are_counted_in_the_runs_record_and_its_provenance(
    toy: Dataset, first: Run, llm: FakeLLM
) -> None:
    llm.responder = lambda messages: "1. Lupus\n2. Pleurisis Elliot Syndrome\n3. Gout"  # no JSON, as SmolLM2 wrote
    run = listwise_rerank(first, toy, endpoint(llm))
    assert all([d for d, _ in run.top(q)] == [d for d, _ in ORDER] for q in QUERIES)  # first-stage order kept
    record = run.usage[-1]
    assert (record["requests"], record["unusable"], record["reordered"]) == (4, 4, 0)
    line = "listwise rerank by fake-model: 4 of 4 replies unusable: the first-stage order was kept"
    assert llm_outcomes(run.usage) == [line]
    rows = dict(run_provenance(toy, run.name, wall_seconds=run.seconds, usage=run.usage).summary_rows())
    assert rows["LLM outcome"] == line


def test_a_partly_usable_job_says_how_many_were_reordered(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.responder = lambda messages: "```json\n[3, 1]\n```" if "number 1?" in messages[-1]["content"] else "no idea"
    run = listwise_rerank(first, toy, endpoint(llm))
    assert run.usage[-1]["outcome"] == (
        "3 of 4 replies unusable: the first-stage order was kept; 1 of 4 queries reordered"
    )
    llm.responder = lambda messages: "```json\n[1, 2, 3, 4, 5]\n```"  # the model's list is the first stage's
    same = listwise_rerank(first, toy, endpoint(llm, model="other"))
    assert same.usage[-1]["outcome"] == "no query's order changed"


def test_wall_time_is_the_jobs_not_the_sum_of_its_requests(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.responder = lambda messages: "```json\n[1]\n```"
    llm.latency = 0.6
    run = listwise_rerank(first, toy, endpoint(llm), workers=4)
    assert len(llm.requests) == 4 and run.seconds < 1.8  # four 0.6 s requests at once; their sum is 2.4 s


def test_the_eta_never_grows_while_a_reply_is_pending() -> None:
    clock = speed.Countdown(total=4, expected=60.0)
    clock.started = clock.last_at = 100.0
    before = [clock.seconds_left(now) for now in (101.0, 110.0, 150.0, 170.0)]
    assert before == [59.0, 50.0, 10.0, 0.0]
    assert clock.reply(25.0, now=120.0) == 20.0  # queued 5 s behind another request: 20 s its own
    pending = [clock.seconds_left(now) for now in (120.0, 121.0, 130.0, 139.0, 200.0)]
    assert pending == [60.0, 59.0, 50.0, 41.0, 0.0]  # 3 more at 20 s each, counted down


def test_estimates_use_the_servers_measured_speed(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    guessed = estimate(first, toy, endpoint(llm), k=5, seconds_per_request=20.0)
    assert not guessed.measured and guessed.seconds == 4 * 20.0 and "not measured yet" in guessed.summary()
    for prompt, completion, seconds in [(1000, 1, 2.0), (100, 100, 4.2), (500, 50, 3.0)]:
        speed.observe(llm.url, "fake-model", "listwise", prompt, completion, seconds)
    rates = speed.recall(llm.url, "fake-model").rates()
    assert rates is not None and rates[0] == pytest.approx(500, rel=0.05) and rates[1] == pytest.approx(25, rel=0.05)
    measured = estimate(first, toy, endpoint(llm), k=5)
    typical = (1 + 100 + 50) / 3
    prompts = measured.prompt_tokens
    assert measured.measured and measured.seconds == pytest.approx(prompts / 500 + 4 * typical / 25, rel=0.05)
    assert "measured" in measured.summary() and "completion tokens/s" in measured.summary()


def test_a_prompt_the_servers_context_cannot_hold_stops_the_job_naming_the_setting(
    toy: Dataset, first: Run, llm: FakeLLM
) -> None:
    refusal = {"error": {"message": "Requested tokens (2612) exceed context window of 2048"}}
    llm.script = [(400, {}, refusal)] * 8
    with pytest.raises(RerankIncomplete) as refused:
        listwise_rerank(first, toy, endpoint(llm), **fast())
    said = str(refused.value)
    assert "context (2,048 tokens)" in said and "--n-ctx" in said and "smaller K" in said
    assert len(llm.requests) == 1  # every prompt of the job would fail alike: nothing more is sent


def test_a_reply_bound_is_fitted_to_a_known_context_and_a_prompt_that_cannot_fit_is_refused() -> None:
    wide = Endpoint("http://127.0.0.1:9/v1", "m", max_tokens=10240)
    fitted, note = lr.fit_context(wide, 2600, 8192)
    assert fitted.max_tokens == 5592 and note and "not 10,240" in note and "context of 8,192" in note
    assert lr.fit_context(wide, 2600, 16384) == (wide, None) and lr.fit_context(wide, 2600, None) == (wide, None)
    with pytest.raises(lr.LLMRerankError, match=r"context \(2,048 tokens\).*--n-ctx 16384"):
        lr.fit_context(wide, 2600, 2048)


def test_the_outcome_is_said_wherever_the_runs_numbers_are(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    from r2med_core.evaluation import evaluate
    from r2med_core.reporting.saved_report import Report, ReportSystem

    llm.responder = lambda messages: "I think number 3 is best."
    run = listwise_rerank(first, toy, endpoint(llm))
    said = "4 of 4 replies unusable: the first-stage order was kept"
    qrels = {qid: {"d1": 1} for qid in QUERIES}
    results = evaluate(run, qrels, dataset_name="toy")  # Metrics, the explorer, Compare and the CLI show its notes
    assert any(said in note for note in results.notes)
    assert not evaluate(first, qrels, dataset_name="toy").notes
    record = run_provenance(toy, run.name, wall_seconds=run.seconds, usage=run.usage)  # the Leaderboard's row
    assert any(said in line for line in record.outcomes())
    system = ReportSystem(run.name, "BM25 → LLM", run, results, provenance=record)
    html = Report(toy, [system]).html()  # the saved report: the systems table and the provenance
    assert html.count(said) >= 2
