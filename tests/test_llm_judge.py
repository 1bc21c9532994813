"""The LLM relevance judge and the "why is this relevant?" explanation, against a real local HTTP server."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, ClassVar

import pytest

from r2med_core import load_demo, run_system
from r2med_core.cache import cache_root
from r2med_core.compute.jobs import REGISTRY
from r2med_core.judging.annotations import AnnotationStore
from r2med_core.judging.llm_judge import (
    JUDGE_PROMPT_VERSION,
    MAX_EXPLANATION_CHARS,
    Pair,
    cached_explanation,
    estimate,
    explain_relevance,
    grade_key,
    judge_agreement,
    judge_pairs,
    judged_sample,
    parse_grade,
    propose_labels,
    record_agreement,
    recorded_agreements,
    unjudged_pairs,
)
from r2med_core.judging.team import read_team_qrels, review_queue
from r2med_core.llm import client
from r2med_core.llm.batch import RetryPolicy, Usage
from r2med_core.llm.client import Endpoint, LocalEndpoint

from .test_generation import KEY, FakeLLM, closed_port, needs_offline_model, usage_of


class ScriptedLLM(FakeLLM):
    """The fake server, answering each prompt with ``answer(prompt)`` (scripted failures still first)."""

    def __init__(self, answer: Callable[[str], str]) -> None:
        super().__init__()
        self.answer = answer

    def reply_for(self, messages: list[dict[str, str]]) -> str:
        return self.answer(messages[-1]["content"])


def grade_by_passage(grades: dict[str, int], default: str = "final score: 0") -> Callable[[str], str]:
    """Reply "final score: g" when the prompt holds the text of a document with a grade in ``grades``."""

    def answer(prompt: str) -> str:
        for text, grade in grades.items():
            if text in prompt:
                return f"The case points to the condition the passage treats.\nM: 3\nT: 3\n##final score: {grade}"
        return default

    return answer


@pytest.fixture
def dataset():
    return load_demo("clinical-case")


@pytest.fixture
def bm25(dataset):
    return run_system(dataset, "bm25")


def endpoint(server: FakeLLM, **settings: Any) -> Endpoint:
    return Endpoint(server.url, "judge-model", api_key=settings.pop("api_key", KEY), **settings)


def fast(**overrides: Any) -> dict[str, Any]:
    return {"retry": RetryPolicy(**{"base_delay": 0.001, "max_delay": 0.05, **overrides})}


@pytest.fixture
def server() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(lambda prompt: "final score: 1") as fake:
        yield fake


# --------------------------------------------------------------------------- reading untrusted replies


@pytest.mark.parametrize(
    ("reply", "grade"),
    [
        ("M: 2\nT: 3\n##final score: 2", 2),
        ("Final Score: **3**", 3),
        ('{"final_score": 1, "M": 2, "T": 1}', 1),
        ('Here you go: {"score": "0"} — done', 0),
        ("3", 3),
        ("final score: 1\nOn reflection… final score: 2", 2),  # the last final score counts
        ("final score: 4", None),
        ("final score: -1", None),
        ("final score: 2.5", None),
        ('{"final_score": true}', None),
        ("M: 3, T: 2", None),  # sub-scores are not a final score
        ("I cannot grade this passage.", None),
        ("", None),
    ],
)
def test_grades_are_read_strictly_from_untrusted_replies(reply: str, grade: int | None) -> None:
    parsed = parse_grade(reply)
    assert parsed.grade == grade
    assert (parsed.problem == "") == (grade is not None)


# --------------------------------------------------------------------------- which pairs


def test_unjudged_pairs_are_top_k_documents_the_qrels_leave_out_once_each(dataset, bm25) -> None:
    minilm = run_system(dataset, "minilm")
    pairs = unjudged_pairs(dataset, [bm25, minilm], k=5)
    assert pairs and len({(p.query_id, p.doc_id) for p in pairs}) == len(pairs)
    for pair in pairs:
        assert pair.doc_id not in dataset.qrels[pair.query_id] and pair.qrels_grade is None
        credited = bm25 if pair.system == bm25.name else minilm
        assert credited.rank_of(pair.query_id, pair.doc_id) == pair.rank <= 5
    only_bm25 = {(p.query_id, p.doc_id) for p in unjudged_pairs(dataset, [bm25], k=5)}
    assert only_bm25 <= {(p.query_id, p.doc_id) for p in pairs}
    assert all(p.system == bm25.name for p in pairs if (p.query_id, p.doc_id) in only_bm25)


def test_judged_sample_is_reproducible_and_marks_assumed_negatives(dataset, bm25) -> None:
    first = judged_sample(dataset, 10, seed=3)
    assert first == judged_sample(dataset, 10, seed=3) and len(first) == 10
    assert all(p.qrels_grade == dataset.qrels[p.query_id][p.doc_id] and not p.assumed for p in first)
    mixed = judged_sample(dataset, 10, seed=3, assumed_negatives=bm25)
    assumed = [p for p in mixed if p.assumed]
    assert len(assumed) == 10 and all(p.qrels_grade == 0 and p.doc_id not in dataset.qrels[p.query_id] for p in assumed)


# --------------------------------------------------------------------------- judging


def test_judging_grades_caches_and_resumes_without_new_requests(dataset, bm25) -> None:
    pairs = unjudged_pairs(dataset, [bm25], k=3)[:6]
    graded = {dataset.corpus[p.doc_id][:60]: 3 - i % 4 for i, p in enumerate(pairs)}
    with ScriptedLLM(grade_by_passage(graded)) as fake:
        ahead = estimate(dataset, pairs, endpoint(fake))
        assert (ahead.pairs, ahead.cached, ahead.requests) == (6, 0, 6) and ahead.input_tokens > 0
        seen: list[float] = []
        first = judge_pairs(dataset, pairs, endpoint(fake), progress=lambda f, m: seen.append(f), **fast())
        assert first.complete and first.sent == 6 and seen[-1] == 1.0
        assert [first.results[p.query_id, p.doc_id] for p in pairs] == [3 - i % 4 for i in range(6)]
        body = fake.requests[0]["body"]
        assert body["temperature"] == 0.0 and body["max_tokens"] == 300 and "seed" not in body
        prompt = body["messages"][-1]["content"]
        assert "(M)" in prompt and "(T)" in prompt and "final score: N" in prompt
        assert dataset.corpus[pairs[0].doc_id][:200] in prompt and dataset.queries[pairs[0].query_id][:200] in prompt

        again = judge_pairs(dataset, pairs, endpoint(fake, api_key="sk-other"), **fast())
        assert again.from_cache == 6 and again.sent == 0 and len(fake.requests) == 6  # the key is not in the key
        assert estimate(dataset, pairs, endpoint(fake)).requests == 0
        hotter = judge_pairs(dataset, pairs[:1], Endpoint(fake.url, "another-model", api_key=KEY), **fast())
        assert hotter.sent == 1 and len(fake.requests) == 7  # another model is judged afresh


def test_judge_tokens_are_metered_and_cached_grades_keep_what_they_cost(dataset, bm25, server: ScriptedLLM) -> None:
    pairs = unjudged_pairs(dataset, [bm25], k=2)[:4]
    first = judge_pairs(dataset, pairs[:2], endpoint(server), **fast())
    sent = [usage_of(r["body"]["messages"], "final score: 1") for r in server.requests]
    cost = Usage(sum(u["prompt_tokens"] for u in sent), sum(u["completion_tokens"] for u in sent))
    assert cost.prompt_tokens > 0 and cost.completion_tokens == 2 * 3
    assert first.tokens == first.spent == cost

    more = judge_pairs(dataset, pairs, endpoint(server), **fast())  # two cached, two new
    assert more.from_cache == 2 and more.sent == 2
    new = [usage_of(r["body"]["messages"], "final score: 1") for r in server.requests[2:]]
    new_cost = Usage(sum(u["prompt_tokens"] for u in new), sum(u["completion_tokens"] for u in new))
    assert more.tokens == new_cost and more.spent == cost + new_cost

    cached = judge_pairs(dataset, pairs, endpoint(server), **fast())
    assert not cached.tokens and cached.spent == cost + new_cost and len(server.requests) == 4


def test_the_same_pair_found_by_two_systems_is_graded_once(dataset, bm25, server: ScriptedLLM) -> None:
    pair = unjudged_pairs(dataset, [bm25], k=1)[0]
    twice = [pair, Pair(pair.query_id, pair.doc_id, "another-system", 4)]
    result = judge_pairs(dataset, twice, endpoint(server), **fast())
    assert result.sent == 1 and len(server.requests) == 1 and list(result.results) == [(pair.query_id, pair.doc_id)]


def test_a_malformed_reply_fails_its_pair_only_and_is_retried_next_time(dataset, bm25) -> None:
    pairs = unjudged_pairs(dataset, [bm25], k=2)[:3]
    bad = dataset.corpus[pairs[1].doc_id][:60]
    replies = {"answer": lambda prompt: "I'd say it is fairly relevant." if bad in prompt else "final score: 2"}
    with ScriptedLLM(lambda prompt: replies["answer"](prompt)) as fake:
        result = judge_pairs(dataset, pairs, endpoint(fake), **fast())
        assert set(result.results) == {(p.query_id, p.doc_id) for p in (pairs[0], pairs[2])}
        ((unit, message),) = result.failed.items()
        assert unit == (pairs[1].query_id, pairs[1].doc_id) and "no final score" in message
        assert "1 pairs failed" in result.problem() and result.error is None

        replies["answer"] = lambda prompt: '{"final_score": 3}'
        retry = judge_pairs(dataset, pairs, endpoint(fake), **fast())
        assert retry.complete and retry.sent == 1 and retry.from_cache == 2
        assert retry.results[pairs[1].query_id, pairs[1].doc_id] == 3


def test_out_of_range_replies_fail_their_pairs_without_stopping_the_batch(dataset, bm25, server: ScriptedLLM) -> None:
    """Unusable replies are not failures in a row (``r2med_core.llm.batch``): every pair is asked."""
    server.answer = lambda prompt: "final score: 7"
    pairs = unjudged_pairs(dataset, [bm25], k=3)[:6]
    result = judge_pairs(dataset, pairs, endpoint(server), **fast(max_consecutive_failures=3))
    assert len(server.requests) == 6 and not result.results and not result.remaining and result.error is None
    assert len(result.unparsable) == 6 and all("outside 0-3" in m for m in result.failed.values())
    assert "6 pairs failed" in (result.problem() or "") and "6 unparsable" in result.summary()


def test_rate_limits_are_retried_then_stop_the_batch_with_the_rest_left(dataset, bm25, server: ScriptedLLM) -> None:
    pairs = unjudged_pairs(dataset, [bm25], k=3)[:4]
    limited = (429, {"Retry-After": "0"}, {"error": {"message": "slow down", "code": "rate_limit_exceeded"}})
    server.script = [limited, limited]
    sleeps: list[float] = []
    result = judge_pairs(dataset, pairs, endpoint(server), **fast(sleep=sleeps.append))
    assert result.complete and result.sent == 4 and len(sleeps) == 2 and len(server.requests) == 6

    more = unjudged_pairs(dataset, [bm25], k=6)[10:14]
    server.script = [limited] * 10
    stopped = judge_pairs(dataset, more, endpoint(server), **fast(max_retries=2, sleep=sleeps.append))
    assert "rate-limiting (429)" in stopped.error and not stopped.results
    assert len(stopped.remaining) == 3 and len(stopped.failed) == 1
    server.script = []
    resumed = judge_pairs(dataset, more, endpoint(server), **fast())
    assert resumed.complete and resumed.sent == 4


def test_a_slow_server_times_out_and_nothing_is_cached(dataset, bm25, server: ScriptedLLM) -> None:
    server.script = [("slow", 0.6)] * 3
    pairs = unjudged_pairs(dataset, [bm25], k=2)[:2]
    result = judge_pairs(dataset, pairs, endpoint(server, timeout=0.15), **fast())
    assert result.error and "could not reach" in result.error and "0.15 s" in result.error
    assert not result.results and len(result.remaining) == 1
    assert not (cache_root() / "llm_judge" / "grades").exists()


def test_a_tampered_cache_entry_is_not_trusted(dataset, bm25, server: ScriptedLLM) -> None:
    pairs = unjudged_pairs(dataset, [bm25], k=1)[:1]
    assert judge_pairs(dataset, pairs, endpoint(server), **fast()).results
    (entry,) = (cache_root() / "llm_judge" / "grades").rglob("*.json")
    for bad in ('{"grade": 7}', '{"grade": "3"}', '{"grade": true}', "[1]", "not json"):
        entry.write_text(bad)
        assert estimate(dataset, pairs, endpoint(server)).requests == 1
    again = judge_pairs(dataset, pairs, endpoint(server), **fast())
    assert again.sent == 1 and again.results == {(pairs[0].query_id, pairs[0].doc_id): 1}


def test_a_reply_echoing_the_key_is_never_kept_or_shown(dataset, bm25, server: ScriptedLLM) -> None:
    server.answer = lambda prompt: f"Your key is {KEY}. final score: 2"
    pairs = unjudged_pairs(dataset, [bm25], k=1)[:2]
    result = judge_pairs(dataset, pairs, endpoint(server), **fast())
    assert result.complete
    stored = "".join(p.read_text() for p in (cache_root() / "llm_judge").rglob("*.json"))
    assert "final score: 2" in stored and KEY not in stored

    server.answer = lambda prompt: f"{KEY} is not a grade"
    failed = judge_pairs(dataset, unjudged_pairs(dataset, [bm25], k=2)[5:6], endpoint(server), **fast())
    assert failed.failed and KEY not in json.dumps(list(failed.failed.values())) and "***" in str(failed.failed)

    server.answer = lambda prompt: f"It bridges via {KEY}: the case is Wilson disease."
    gold = next(iter(dataset.positives(pairs[0].query_id)))
    said = explain_relevance(endpoint(server), dataset.queries[pairs[0].query_id], dataset.corpus[gold])
    assert said.text and KEY not in said.text and "***" in said.text


def test_cancel_keeps_the_finished_grades_and_a_new_start_resumes(dataset, bm25, server: ScriptedLLM) -> None:
    """The app's Cancel makes the job's progress callback raise: grades made so far stay cached."""
    pairs = unjudged_pairs(dataset, [bm25], k=3)[:5]
    gate, asked = threading.Event(), threading.Event()

    def answer(prompt: str) -> str:
        if len(server.requests) == 3:
            asked.set()
            gate.wait(10)
        return "final score: 2"

    server.answer = answer
    job = REGISTRY.start(
        ("test-judge",), "judge", lambda job: judge_pairs(dataset, pairs, endpoint(server), progress=job.progress)
    )
    assert asked.wait(10)
    REGISTRY.cancel(("test-judge",))
    gate.set()
    assert job.wait(10) and job.state == "cancelled"
    assert len(server.requests) == 3
    resumed = judge_pairs(dataset, pairs, endpoint(server), **fast())
    assert (resumed.from_cache, resumed.sent) == (3, 2) and resumed.complete and len(server.requests) == 5


# --------------------------------------------------------------------------- proposals


def test_proposals_land_as_proposed_by_the_model_and_wait_for_review(dataset, bm25, server: ScriptedLLM) -> None:
    pairs = unjudged_pairs(dataset, [bm25], k=3)[:4]
    grades = {(p.query_id, p.doc_id): g for p, g in zip(pairs, [3, 2, 1, 0])}
    store = AnnotationStore()
    made = propose_labels(store, dataset, pairs, grades, endpoint(server), threshold=2)
    assert (made.added, made.below_threshold) == (2, 2)
    labels = store.list()
    assert {(a.query_id, a.doc_id) for a in labels} == {(p.query_id, p.doc_id) for p in pairs[:2]}
    for label, pair, grade in zip(labels, pairs, [3, 2]):
        assert (label.status, label.accepted, label.reviewer) == ("proposed", False, "")
        assert label.annotator == "proposed by judge-model" and label.failure_type == "relevant_unjudged"
        assert (label.system, label.rank) == (pair.system, pair.rank)
        assert f"grade {grade}/3" in label.note and JUDGE_PROMPT_VERSION in label.note
    assert read_team_qrels(store, dataset).changes == ()  # nothing counts before a review
    queue = review_queue(store.list(), [])
    assert [item.annotators for item in queue] == [("proposed by judge-model",)] * 2

    again = propose_labels(store, dataset, pairs, grades, endpoint(server), threshold=1)
    assert (again.added, again.already_proposed) == (1, 2) and len(store) == 3
    gold_doc = next(iter(dataset.positives(pairs[0].query_id)))
    gold = Pair(pairs[0].query_id, gold_doc, qrels_grade=dataset.qrels[pairs[0].query_id][gold_doc])
    assert propose_labels(store, dataset, [gold], {(gold.query_id, gold.doc_id): 3}, endpoint(server)).added == 0


# --------------------------------------------------------------------------- agreement


def test_kappa_and_confusion_on_a_known_example(dataset, server: ScriptedLLM) -> None:
    docs = [d for d in list(dataset.corpus)[:6]]
    truth = [2, 1, 1, 0, 0, 0]
    judged = [3, 2, 1, 0, 1, 2]  # relevant at >= 2: [1, 1, 0, 0, 0, 1] against [1, 1, 1, 0, 0, 0]
    sample = [Pair("q", d, qrels_grade=t) for d, t in zip(docs, truth)]
    sample.append(Pair("q", "not-graded", qrels_grade=1))  # failed pairs are left out
    grades = {("q", d): g for d, g in zip(docs, judged)}
    measured = judge_agreement(dataset, sample, grades, endpoint(server), threshold=2)
    # p_o = 4/6, p_e = 0.5·0.5 + 0.5·0.5 = 0.5: kappa = (4/6 − 0.5) / 0.5 = 1/3
    assert measured.pairs == 6 and measured.agreed == 4
    assert measured.kappa == pytest.approx(1 / 3)
    assert measured.confusion.to_dict(orient="index") == {
        0: {0: 1, 1: 1, 2: 1, 3: 0},
        1: {0: 0, 1: 1, 2: 1, 3: 0},
        2: {0: 0, 1: 0, 2: 0, 3: 1},
    }
    from sklearn.metrics import cohen_kappa_score

    assert measured.graded_kappa == pytest.approx(cohen_kappa_score(truth, judged))

    only_gold = judge_agreement(dataset, sample[:3], grades, endpoint(server))
    assert math.isnan(only_gold.kappa)  # every qrels pair relevant: kappa says nothing

    record_agreement(dataset, measured, endpoint(server))
    (kept,) = recorded_agreements()
    assert (kept["task"], kept["model"], kept["pairs"]) == (dataset.name, "judge-model", 6)
    assert kept["kappa"] == pytest.approx(1 / 3) and KEY not in json.dumps(kept)


# --------------------------------------------------------------------------- explanations


def test_explanation_is_cached_capped_and_names_its_model(dataset, server: ScriptedLLM) -> None:
    qid = next(iter(dataset.qrels))
    doc = next(iter(dataset.positives(qid)))
    query, passage = dataset.queries[qid], dataset.corpus[doc]
    long_reply = "The case describes Wilson disease;\n\nthis document is about copper chelation. " * 20
    server.answer = lambda prompt: long_reply
    ep = endpoint(server)
    assert cached_explanation(ep, query, passage) is None
    said = explain_relevance(ep, query, passage)
    assert said.model == "judge-model" and said.error is None and not said.from_cache
    assert said.text.startswith("The case describes Wilson disease; this document") and "\n" not in said.text
    assert len(said.text) <= MAX_EXPLANATION_CHARS and said.text.endswith("…")
    prompt = server.requests[0]["body"]["messages"][-1]["content"]
    assert passage[:200] in prompt and "bridging step" in prompt
    assert server.requests[0]["body"]["temperature"] == 0.0

    spent = usage_of(server.requests[0]["body"]["messages"], long_reply)
    assert said.usage == Usage(spent["prompt_tokens"], spent["completion_tokens"])
    again = explain_relevance(ep, query, passage)
    assert again.from_cache and again.text == said.text and len(server.requests) == 1
    assert again.usage == said.usage  # the cached explanation keeps what it cost
    assert cached_explanation(ep, query, passage) == again
    other = Endpoint(server.url, "other-model", api_key=KEY)
    assert cached_explanation(other, query, passage) is None  # cached per model


def test_explanation_failures_are_messages_not_exceptions(dataset, server: ScriptedLLM) -> None:
    qid = next(iter(dataset.qrels))
    doc = next(iter(dataset.positives(qid)))
    down = Endpoint(f"http://127.0.0.1:{closed_port()}/v1", "m", api_key=KEY)
    said = explain_relevance(down, dataset.queries[qid], dataset.corpus[doc], retry=RetryPolicy(sleep=lambda s: None))
    assert said.text is None and "could not reach" in said.error and KEY not in said.error
    server.script = [("empty",)]
    empty = explain_relevance(endpoint(server), dataset.queries[qid], dataset.corpus[doc])
    assert empty.text is None and "empty reply" in empty.error
    assert cached_explanation(endpoint(server), dataset.queries[qid], dataset.corpus[doc]) is None


# --------------------------------------------------------------------------- a local model as judge


class InProcessModel:
    """Stands in for the local model's generation (``client.LocalModel``): replies ``reply``, and
    counts what it was asked; everything around it (client, parsing, cache) is the real code."""

    reply: ClassVar[str] = "final score: 3"
    asked: ClassVar[list[list[dict[str, str]]]] = []

    def __init__(self, endpoint: LocalEndpoint) -> None:
        self.endpoint = endpoint

    def complete(self, messages: list[dict[str, str]]) -> str:
        InProcessModel.asked.append(messages)
        return InProcessModel.reply


@pytest.fixture
def local_model(tmp_path, monkeypatch: pytest.MonkeyPatch) -> LocalEndpoint:
    weights = tmp_path / "tiny-judge.gguf"
    weights.write_bytes(b"GGUF not a real model")
    InProcessModel.reply, InProcessModel.asked = "final score: 3", []
    monkeypatch.setattr(client, "LocalModel", InProcessModel)
    return LocalEndpoint(str(weights), max_tokens=16)


def test_a_local_model_grade_and_a_server_grade_of_one_pair_are_cached_apart(
    dataset, bm25, server: ScriptedLLM, local_model: LocalEndpoint
) -> None:
    pair = unjudged_pairs(dataset, [bm25], k=1)[0]
    unit = (pair.query_id, pair.doc_id)
    query, passage = dataset.queries[pair.query_id], dataset.corpus[pair.doc_id]
    assert grade_key(local_model, query, passage) != grade_key(endpoint(server), query, passage)

    api = judge_pairs(dataset, [pair], endpoint(server), **fast())  # the server says 1
    assert api.results == {unit: 1} and len(server.requests) == 1 and api.tokens.completion_tokens > 0
    local = judge_pairs(dataset, [pair], local_model)  # the local model says 3: not the server's cached 1
    assert local.complete and local.results == {unit: 3} and local.sent == 1 and local.from_cache == 0
    assert len(InProcessModel.asked) == 1 and "final score: N" in InProcessModel.asked[0][-1]["content"]
    assert local.label == "tiny-judge-demo" and local.endpoint.startswith("local:")
    assert local.tokens == Usage() and local.usage == {unit: Usage()}  # a model in this process meters nothing

    again_api = judge_pairs(dataset, [pair], endpoint(server), **fast())
    again_local = judge_pairs(dataset, [pair], local_model)
    assert again_api.results == {unit: 1} and again_api.from_cache == 1 and again_api.spent == api.spent
    assert again_local.results == {unit: 3} and again_local.from_cache == 1
    assert len(server.requests) == 1 and len(InProcessModel.asked) == 1
    assert judge_pairs(dataset, [pair], replace(local_model, max_tokens=8)).sent == 1  # another reply bound
    store = AnnotationStore()
    propose_labels(store, dataset, [pair], local.results, local_model)
    assert [a.annotator for a in store.list()] == ["proposed by tiny-judge-demo"]  # never the model's path


def test_a_local_models_rambling_fails_its_pair_and_a_missing_model_stops_the_batch(
    dataset, bm25, local_model: LocalEndpoint, tmp_path
) -> None:
    pairs = unjudged_pairs(dataset, [bm25], k=2)[:2]
    InProcessModel.reply = "The passage is about medicine and the query is about medicine too."
    result = judge_pairs(dataset, pairs, local_model)
    assert not result.results and result.error is None and len(result.failed) == 2
    assert all("unusable reply (no final score in the reply)" in m for m in result.failed.values())
    InProcessModel.reply = "final score: 2"
    assert judge_pairs(dataset, pairs, local_model).sent == 2  # nothing unusable was cached

    missing = LocalEndpoint(str(tmp_path / "gone.gguf"))
    stopped = judge_pairs(dataset, pairs, missing)
    assert "no local model" in (stopped.error or "") and len(stopped.remaining) == 2 and not stopped.results
    found = explain_relevance(missing, dataset.queries[pairs[0].query_id], dataset.corpus[pairs[0].doc_id])
    assert found.text is None and "no local model" in (found.error or "")


@needs_offline_model
def test_end_to_end_with_the_offline_small_model(dataset, bm25) -> None:
    """Two pairs, a few tokens per reply: the pipeline, not the model's judgement (it rarely gives a score)."""
    local = LocalEndpoint(max_tokens=8)
    pairs = unjudged_pairs(dataset, [bm25], k=1)[:2]
    units = {(p.query_id, p.doc_id) for p in pairs}
    first = judge_pairs(dataset, pairs, local)
    assert first.error is None and set(first.results) | set(first.failed) == units
    assert all(m.startswith("unusable reply (") for m in first.failed.values())  # unparseable: said so, no crash
    assert first.label == "smollm2-135m-demo" and first.endpoint == "local:smollm2"
    again = judge_pairs(dataset, pairs, local)
    assert again.from_cache == len(first.results) and again.sent == len(first.failed)
    store = AnnotationStore()
    propose_labels(store, dataset, pairs, again.results, local, threshold=1)
    assert {a.annotator for a in store.list()} <= {"proposed by smollm2-135m-demo"}
    assert {a.status for a in store.list()} <= {"proposed"}
    query, passage = dataset.queries[pairs[0].query_id], dataset.corpus[pairs[0].doc_id]
    named = explain_relevance(local, query, passage)
    assert named.model == "smollm2-135m-demo" and (named.text or named.error)
    if named.text:
        assert cached_explanation(local, query, passage) == replace(named, from_cache=True)


def test_the_time_a_judging_takes_is_said_before_the_click_from_the_servers_measured_speed(
    dataset, bm25, server: ScriptedLLM
) -> None:
    pairs = unjudged_pairs(dataset, [bm25], k=2)[:6]
    before = estimate(dataset, pairs, endpoint(server))
    assert before.seconds == 6 * 5.0 and "about 30 s (a guess of 5 s a request" in before.describe()
    server.latency = 0.2
    judge_pairs(dataset, pairs[:3], endpoint(server), **fast())  # three replies measure the server
    after = estimate(dataset, pairs, endpoint(server))
    assert after.requests == 3 and "measured" in after.describe() and "completion tokens/s" in after.describe()
    assert 0.3 <= after.seconds <= 1.2  # three more requests of about 0.2 s each
