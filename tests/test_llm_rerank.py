"""LLM reranking against a real OpenAI-compatible HTTP server on 127.0.0.1 (the generation tests' fake)."""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from r2med_core.data import Dataset
from r2med_core.llm import llm_rerank as lr
from r2med_core.llm.batch import BatchReport, RetryPolicy, Usage
from r2med_core.llm.client import Endpoint, LocalEndpoint
from r2med_core.llm.endpoints import OPERATOR_KEY, VISITOR_KEY, OperatorLLM
from r2med_core.llm.llm_rerank import (
    RerankIncomplete,
    Window,
    estimate,
    listwise_messages,
    listwise_rerank,
    pointwise_rerank,
    reranker_endpoint,
)
from r2med_core.runs import Run
from tests.test_generation import KEY, FakeLLM, fast, needs_offline_model, usage_of

DOCS = {
    "d1": "Insulin infusion\n\nand intravenous fluids treat diabetic ketoacidosis.",
    "d2": "Gout is caused by urate crystals.",
    "d3": "Ketoacidosis: anion gap acidosis.",
    "d4": "Asthma is an airway disease.",
    "d5": "Troponin rises after a myocardial infarction.",
}
QUERIES = {"q1": "How is diabetic\nketoacidosis treated?", "q2": "What raises troponin?"}


@pytest.fixture
def toy() -> Dataset:
    return Dataset(name="toy", corpus=dict(DOCS), queries=dict(QUERIES), qrels={}, source="test")


@pytest.fixture
def first() -> Run:
    order = [("d2", 5.0), ("d4", 4.0), ("d1", 3.0), ("d5", 2.0), ("d3", 1.0)]
    return Run("bm25", {"q1": list(order), "q2": list(order)})


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def endpoint(llm: FakeLLM, **settings: Any) -> Endpoint:
    return Endpoint(llm.url, "fake-model", api_key=settings.pop("api_key", KEY), **settings)


def passages(prompt: str) -> dict[int, str]:
    """``{number: text}`` of the passages a list-wise prompt shows."""
    return {int(n): text for n, text in re.findall(r"^\[(\d+)\]\. (.*)$", prompt, re.MULTILINE)}


def json_reply(ids: Any) -> str:
    return f"The query asks about treatment.\nPassage 1 is off topic.\n```json\n{json.dumps(ids)}\n```"


def ranked(run: Run, qid: str) -> list[tuple[str, float]]:
    return run.top(qid)


# --------------------------------------------------------------------------- the benchmark's prompt


def test_listwise_prompt_is_the_benchmarks_word_for_word() -> None:
    messages = listwise_messages("Line one\nline two", ["first\n\npassage", "second passage"])
    assert messages[0] == {"role": "system", "content": "You are a helpful assistant."}
    assert messages[1]["content"] == (
        "The following passages are related to query: Line one  line two\n\n"
        "[1]. first passage\n\n[2]. second passage\n\n"
        "First identify the essential problem in the query.\n"
        "Think step by step to reason about why each document is relevant or irrelevant.\n"
        "Rank these passages based on their relevance to the query.\n"
        "Please output the ranking result of passages as a list, where the first element is the id of the most "
        "relevant passage, the second element is the id of the second most element, etc.\n"
        "Please strictly follow the format to output a list of 10 ids corresponding to the most relevant 10 "
        "passages, sorted from the most to least relevant passage. First think step by step and write the "
        "reasoning process, then output the ranking results as a list of ids in a json format."
    )


def test_passages_are_cut_to_64_cl100k_tokens_only_above_50_passages() -> None:
    assert lr._cl100k().encode("hello world") == [15339, 1917]  # cl100k_base itself, loaded offline
    long = "word " * 200
    cut = "word" + " word" * 63  # " word" is one cl100k token
    fifty = passages(listwise_messages("q", [long] * 50)[1]["content"])
    fifty_one = passages(listwise_messages("q", [long] * 51)[1]["content"])
    assert fifty[50] == long  # 50 passages: shown whole
    assert len(fifty_one) == 51 and set(fifty_one.values()) == {cut}


# --------------------------------------------------------------------------- list-wise through HTTP


def test_listwise_rerank_scores_listed_ids_k_down_and_caches(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.responder = lambda messages: json_reply([3, 1])
    seen: list[tuple[float, str]] = []
    threads: set[threading.Thread] = set()

    def progress(fraction: float, message: str) -> None:
        seen.append((fraction, message))
        threads.add(threading.current_thread())

    run = listwise_rerank(first, toy, endpoint(llm), k=10, progress=progress, workers=2)
    # top of q1 in first-stage order: d2 d4 d1 d5 d3 → [3, 1] names d1 then d2
    assert ranked(run, "q1") == [("d1", 10.0), ("d2", 9.0)] and ranked(run, "q2") == ranked(run, "q1")
    assert run.name == "bm25>llm-listwise:fake-model@10"
    q1 = [r for r in llm.requests if "query: How is diabetic" in r["body"]["messages"][1]["content"]]
    body = q1[0]["body"]  # two workers: the requests may arrive in either order
    assert (body["temperature"], body["top_p"], body["max_tokens"], "seed" in body) == (0.8, 0.8, 10240, False)
    assert "logprobs" not in body and q1[0]["auth"] == f"Bearer {KEY}"
    shown = passages(body["messages"][1]["content"])
    assert shown[3] == "Insulin infusion and intravenous fluids treat diabetic ketoacidosis."  # newlines → space
    assert "query: How is diabetic  ketoacidosis treated?" in body["messages"][1]["content"]
    assert seen[-1][0] == 1.0 and "done" in seen[-1][1] and any("2/2 requests" in m for _, m in seen)
    assert threads == {threading.current_thread()}  # a UI widget is only ever told from the caller's thread

    report = BatchReport("listwise", "")
    again = listwise_rerank(first, toy, endpoint(llm, api_key="sk-other"), k=10, report_to=report)
    assert again.rankings == run.rankings and len(llm.requests) == 2  # from the cache; the key is not in its key
    assert (report.sent, report.from_cache, report.complete) == (0, 2, True)


def test_rerank_tokens_are_summed_and_a_run_from_the_cache_still_says_what_it_cost(
    toy: Dataset, first: Run, llm: FakeLLM
) -> None:
    llm.responder = lambda messages: json_reply([3, 1])
    report = BatchReport("listwise", "")
    run = listwise_rerank(first, toy, endpoint(llm), k=10, report_to=report)
    sent = [usage_of(r["body"]["messages"], json_reply([3, 1])) for r in llm.requests]
    cost = Usage(sum(u["prompt_tokens"] for u in sent), sum(u["completion_tokens"] for u in sent))
    assert len(sent) == 2 and cost.prompt_tokens > 100 and report.tokens == report.spent == cost
    outcome = {"requests": 2, "unusable": 0, "failed": 0, "reordered": 2}
    assert run.usage == ({"model": "fake-model", "use": "listwise rerank", **cost.to_json(), **outcome},)

    cached_report = BatchReport("listwise", "")
    again = listwise_rerank(first, toy, endpoint(llm), k=10, report_to=cached_report)
    assert len(llm.requests) == 2 and not cached_report.tokens  # nothing new spent …
    assert cached_report.spent == cost and again.usage == run.usage  # … the run still says what it cost

    llm.responder = lambda messages: "It is about it.\nAnswer: relevant"
    judged, _ = pointwise_rerank(again, toy, endpoint(llm), k=2)
    assert [u["use"] for u in judged.usage] == ["listwise rerank", "pointwise rerank"]  # both stages counted
    assert judged.usage[1]["completion"] == 4 * 6  # 2 queries × top 2, six reply words each


def test_top_k_limits_the_passages_shown_and_the_scores(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.responder = lambda messages: json_reply([2, 1, 3])
    run = listwise_rerank(first, toy, endpoint(llm), k=3)
    assert len(passages(llm.requests[0]["body"]["messages"][1]["content"])) == 3
    assert ranked(run, "q1") == [("d4", 3.0), ("d2", 2.0), ("d1", 1.0)]


@pytest.mark.parametrize(
    ("reply", "expected", "note"),
    [
        ("I think passage 3 is best: [3, 1]", ["d2", "d4", "d1", "d5", "d3"], "first-stage order kept"),  # no block
        (json_reply([7, 3, 0, -1]), ["d1"], "3 ids not among the 5 shown"),  # out of range
        (json_reply([3, 1, 3]), ["d2", "d1"], "1 duplicated ids"),  # d1 keeps its last place (8)
        (json_reply(["3", "1"]), [], "2 ids not among"),  # strings are not the ids shown
        (json_reply([3.0, True]), ["d1", "d2"], "3 passages not listed"),  # 3.0 == 3 and True == 1, as in Python
        (json_reply([[1], 3]), ["d1"], "1 ids not among"),  # an unhashable item is dropped, not a crash
        (json_reply(4), ["d2", "d4", "d1", "d5", "d3"], "single value"),
        (json_reply({"3": 1}), [], "not among"),  # a dict iterates its keys
        ("```json\n[1]\n``` and later ```json\n[2]\n```", ["d2", "d4", "d1", "d5", "d3"], "first-stage order"),
        ("```json\n[3, 1\n```", ["d2", "d4", "d1", "d5", "d3"], "no parsable"),
    ],
)
def test_untrusted_listwise_replies_are_read_as_the_benchmark_reads_them(
    toy: Dataset, first: Run, llm: FakeLLM, reply: str, expected: list[str], note: str
) -> None:
    llm.responder = lambda messages: reply
    report = BatchReport("listwise", "")
    run = listwise_rerank(first, toy, endpoint(llm), k=10, report_to=report)
    assert [doc for doc, _ in ranked(run, "q1")] == expected
    assert [score for _, score in ranked(run, "q1")] == sorted((s for _, s in ranked(run, "q1")), reverse=True)
    assert note in report.notes["q1"]
    if reply == json_reply([3, 1, 3]):
        assert ranked(run, "q1") == [("d2", 9.0), ("d1", 8.0)]


def test_every_input_of_a_reply_is_in_its_cache_key(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.responder = lambda messages: json_reply([1])
    one = Run("bm25", {"q1": first.rankings["q1"]})
    listwise_rerank(one, toy, endpoint(llm), k=5)
    reordered = Run("bm25", {"q1": list(reversed(first.rankings["q1"]))})
    changed_doc = Dataset("toy", {**DOCS, "d3": "Another text."}, dict(QUERIES), {}, "test")
    changed_query = Dataset("toy", dict(DOCS), {**QUERIES, "q1": "Another question?"}, {}, "test")
    counts = []
    for run, data, ep in [
        (reordered, toy, endpoint(llm)),  # the same documents in another order
        (one, changed_doc, endpoint(llm)),
        (one, changed_query, endpoint(llm)),
        (one, toy, Endpoint(llm.url, "other-model", api_key=KEY)),
        (one, toy, endpoint(llm, temperature=0.1)),
        (one, toy, endpoint(llm, api_key="sk-different")),  # the key is not part of it: a hit
    ]:
        before = len(llm.requests)
        listwise_rerank(run, data, ep, k=5)
        counts.append(len(llm.requests) - before)
    assert counts == [1, 1, 1, 1, 1, 0]


def test_cancel_and_resume_from_the_cache(toy: Dataset, llm: FakeLLM) -> None:
    big = Dataset("toy", dict(DOCS), {f"q{i}": f"question {i}" for i in range(6)}, {}, "test")
    base = Run("bm25", {qid: [("d1", 2.0), ("d2", 1.0)] for qid in big.queries})
    llm.responder = lambda messages: json_reply([2, 1])
    with pytest.raises(RerankIncomplete) as stopped:
        listwise_rerank(base, big, endpoint(llm), should_stop=lambda: len(llm.requests) >= 2)
    report = stopped.value.report
    assert report.stopped and report.sent == 2 and len(report.remaining) == 4 and "resume" in str(stopped.value)
    # a crash: the server rejects the key on the next request (the batch stops), then comes back
    llm.script = [(401, {}, {"error": {"message": "bad key"}})]
    with pytest.raises(RerankIncomplete) as crashed:
        listwise_rerank(base, big, endpoint(llm), **fast())
    assert "401" in (crashed.value.report.error or "") and crashed.value.report.from_cache == 2
    done = BatchReport("listwise", "")
    run = listwise_rerank(base, big, endpoint(llm), workers=3, report_to=done)
    assert done.from_cache == 2 and done.sent == 4 and len(llm.requests) == 2 + 1 + 4
    assert all(run.top(qid) == [("d2", 10.0), ("d1", 9.0)] for qid in big.queries)


def test_rate_limits_are_waited_out_as_the_server_asks(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.responder = lambda messages: json_reply([1])
    sleeps: list[float] = []
    llm.script = [(429, {"Retry-After": "2"}, {"error": {"message": "slow down", "code": "rate_limit_exceeded"}})]
    run = listwise_rerank(first, toy, endpoint(llm), retry=RetryPolicy(base_delay=0.25, sleep=sleeps.append))
    assert sleeps == [2.0] and len(llm.requests) == 3 and ranked(run, "q1") == [("d2", 10.0)]
    llm.script = [(429, {"Retry-After": "120"}, {"error": {"message": "slow down"}})] * 10
    with pytest.raises(RerankIncomplete) as limited:
        listwise_rerank(
            first, toy, Endpoint(llm.url, "m2", api_key=KEY), retry=RetryPolicy(2, max_delay=5, sleep=sleeps.append)
        )
    assert "rate-limiting (429) after 3 attempts" in str(limited.value) and sleeps[1:] == [5, 5]


def test_a_silent_server_times_out_with_a_clear_message(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.script = [("slow", 0.6)] * 3
    with pytest.raises(RerankIncomplete) as slow:
        listwise_rerank(first, toy, endpoint(llm, timeout=0.15), **fast())
    assert "no reply within 0.15 s" in str(slow.value) and len(llm.requests) == 3


def test_a_reply_echoing_the_key_is_never_kept(toy: Dataset, first: Run, llm: FakeLLM, _isolated_cache: Path) -> None:
    llm.responder = lambda messages: f"Your key is {KEY}. Answer: relevant\n```json\n[1]\n```"
    listwise_rerank(first, toy, endpoint(llm))
    _, explanations = pointwise_rerank(first, toy, endpoint(llm), k=2)
    assert "***" in explanations["q1"]["d2"].reasoning and KEY not in repr(explanations)
    files = [p for p in _isolated_cache.rglob("*") if p.is_file()]
    assert files and not [p for p in files if KEY.encode() in p.read_bytes()]


def test_a_request_failing_on_its_own_can_keep_first_stage_order(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.responder = lambda messages: json_reply([3])
    too_long = (400, {}, {"error": {"message": "context length exceeded"}})
    llm.script = [too_long]
    with pytest.raises(RerankIncomplete) as failed:
        listwise_rerank(first, toy, endpoint(llm), **fast())
    assert "1 queries failed" in str(failed.value) and "context length exceeded" in str(failed.value)
    llm.script = [too_long]
    report = BatchReport("listwise", "")
    run = listwise_rerank(first, toy, Endpoint(llm.url, "m2", api_key=KEY), keep_failed=True, report_to=report)
    failed_q = next(iter(report.failed))
    assert [d for d, _ in run.top(failed_q)] == ["d2", "d4", "d1", "d5", "d3"] and "failed" in report.notes[failed_q]
    assert len({tuple(run.top(q)) for q in run.rankings}) == 2  # the other query was reranked ([3] → d1)
    llm.script = [too_long]
    one = Run("bm25", {"q1": first.rankings["q1"][:2]})
    _, explanations = pointwise_rerank(one, toy, endpoint(llm), k=2, keep_failed=True)
    assert sorted(e.source for e in explanations["q1"].values()) == ["failed", "unparsed"]


# --------------------------------------------------------------------------- sliding window


@pytest.mark.parametrize("rerank", [listwise_rerank, pointwise_rerank])
def test_a_misspelt_option_is_refused_before_anything_is_sent(
    rerank: Any, toy: Dataset, first: Run, llm: FakeLLM
) -> None:
    """The options both rerankers share are checked by name, as written-out keywords would be."""
    with pytest.raises(TypeError, match="max_token"):
        rerank(first, toy, endpoint(llm), 3, max_token=5)
    assert llm.requests == []


def test_window_spans_follow_rankgpt_from_the_bottom_up() -> None:
    assert Window().spans(100) == [(80 - 10 * i, 100 - 10 * i) for i in range(9)]
    assert Window(20, 10).spans(25) == [(5, 25), (0, 15)]  # clamped to the top (RankGPT's loop would stop)
    assert Window(4, 2).spans(3) == [(0, 3)] and Window().spans(0) == []
    with pytest.raises(lr.LLMRerankError):
        Window(5, 6)


def test_sliding_window_brings_the_best_up_and_keeps_every_document(llm: FakeLLM) -> None:
    corpus = {f"d{i:02d}": f"passage with merit {i}" for i in range(30)}
    data = Dataset("toy", corpus, {"q": "which passage has the most merit?"}, {}, "test")
    base = Run("bm25", {"q": [(doc, float(-i)) for i, doc in enumerate(corpus)]})  # worst merit first

    def best_first(messages: list[dict[str, str]]) -> str:
        shown = passages(messages[1]["content"])
        order = sorted(shown, key=lambda n: -int(shown[n].split()[-1]))
        return json_reply(order[:10])

    llm.responder = best_first
    run = listwise_rerank(base, data, endpoint(llm), k=30, window=Window(10, 5))
    assert len(llm.requests) == len(Window(10, 5).spans(30)) == 5
    assert [doc for doc, _ in run.top("q", 5)] == ["d29", "d28", "d27", "d26", "d25"]
    assert len(run.top("q")) == 30 and run.top("q")[0][1] == 30.0 and run.top("q")[-1][1] == 1.0
    assert run.name.endswith("+window10-5") and "not the benchmark's setting" in lr.listwise_label("m", 30, Window())
    assert all(len(passages(r["body"]["messages"][1]["content"])) <= 10 for r in llm.requests)


# --------------------------------------------------------------------------- point-wise


def logprob_tokens(content: str) -> list[dict[str, Any]]:
    """A fake server's ``logprobs.content``: whitespace tokens; at the answer word, P(relevant) is 0.7
    against 0.2 for "not" when the judge said relevant, and 0.1 against 0.85 when it said not."""
    out = []
    for piece in re.findall(r"\s*\S+", content):
        entry: dict[str, Any] = {"token": piece, "logprob": -0.05, "top_logprobs": []}
        if piece.strip() in ("relevant", "not") and "Answer:" in content[: content.index(piece)]:
            yes, no = (0.7, 0.2) if piece.strip() == "relevant" else (0.1, 0.85)
            entry["logprob"] = math.log(yes if piece.strip() == "relevant" else no)
            entry["top_logprobs"] = [
                {"token": " relevant", "logprob": math.log(yes)},
                {"token": " not", "logprob": math.log(no)},
                {"token": " The", "logprob": math.log(0.01)},
            ]
        out.append(entry)
    return out


def judge(messages: list[dict[str, str]]) -> str:
    document = messages[1]["content"].split("Document:\n")[1]
    verdict = "relevant" if "troponin" in document.lower() or "ketoacidosis" in document.lower() else "not relevant"
    return f"The query needs a cause.\nThe document says: {document.split(chr(10))[0][:30]}\nAnswer: {verdict}"


def test_pointwise_scores_are_probabilities_from_logprobs(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.responder = judge
    llm.logprobs = logprob_tokens
    run, explanations = pointwise_rerank(first, toy, endpoint(llm), k=5, workers=4)
    body = llm.requests[0]["body"]
    assert (body["logprobs"], body["top_logprobs"], body["temperature"]) == (True, 5, 0.0)
    top = run.top("q1")
    assert [doc for doc, _ in top[:3]] == ["d1", "d5", "d3"]  # the relevant ones, in first-stage order (a tie)
    assert [score for _, score in top] == pytest.approx([0.7 / 0.9] * 3 + [0.1 / 0.95] * 2)
    assert [doc for doc, _ in top[3:]] == ["d2", "d4"]
    ex = explanations["q1"]["d1"]
    assert ex.source == "logprobs" and ex.answer == "relevant" and ex.reasoning.startswith("The query needs a cause.")
    assert "Answer:" not in ex.reasoning and explanations["q1"]["d2"].answer == "not relevant"
    assert run.name == "bm25>llm-pointwise:fake-model@5" and len(llm.requests) == 10


def test_pointwise_without_logprobs_falls_back_to_the_answer(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.responder = judge  # the server ignores the logprobs request (sends none)
    report = BatchReport("pointwise", "")
    run, explanations = pointwise_rerank(first, toy, endpoint(llm), k=5, report_to=report)
    assert [score for _, score in run.top("q1")] == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert {e.source for e in explanations["q1"].values()} == {"answer"} and not report.unparsable
    assert "no log-probabilities" in lr.SCORE_SOURCES["answer"]


def test_a_server_refusing_logprobs_is_asked_without_them(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.responder = judge
    llm.refuse_logprobs = True
    one = Run("bm25", {"q1": first.rankings["q1"][:2]})
    run, explanations = pointwise_rerank(one, toy, endpoint(llm), k=2)
    assert [("logprobs" in r["body"]) for r in llm.requests] == [True, False, False]  # asked once, then not
    assert {e.source for e in explanations["q1"].values()} == {"answer"} and len(run.top("q1")) == 2


def test_pointwise_reply_without_an_answer_is_labelled(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.responder = lambda messages: "I cannot decide."
    one = Run("bm25", {"q1": first.rankings["q1"][:1]})
    _, explanations = pointwise_rerank(one, toy, endpoint(llm), k=1)
    assert explanations["q1"]["d2"] == lr.PointwiseVerdict("I cannot decide.", None, 0.5, "unparsed")


# --------------------------------------------------------------------------- estimate and endpoint policy


def test_estimate_counts_requests_tokens_and_what_is_cached(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    ep = endpoint(llm)
    before = estimate(first, toy, ep, "listwise", k=5, seconds_per_request=10, workers=2)
    messages = listwise_messages(QUERIES["q1"], [DOCS[d] for d, _ in first.top("q1", 5)])
    assert (before.requests, before.cached, before.official_requests, before.queries) == (2, 0, 2, 2)
    assert before.max_prompt_tokens == sum(lr.count_tokens(m["content"]) + 4 for m in messages)
    assert before.seconds == 10 and before.max_completion_tokens == 2 * 10240 and not llm.requests
    assert "2 requests to send" in before.summary() and "one per query" in before.summary()
    llm.responder = lambda m: json_reply([1, 2])
    listwise_rerank(Run("bm25", {"q1": first.rankings["q1"]}), toy, ep, k=5)
    after = estimate(first, toy, ep, "listwise", k=5)
    assert (after.cached, after.to_send) == (1, 1) and after.cost(1.0, 0.0) == pytest.approx(after.prompt_tokens / 2e6)
    point = estimate(first, toy, ep, "pointwise", k=3)
    assert (point.requests, point.official_requests, point.max_completion_tokens) == (6, 2, 6 * 1024)
    corpus = {f"d{i:02d}": f"passage {i}" for i in range(30)}
    data = Dataset("toy", corpus, {"q": "query"}, {}, "test")
    base = Run("bm25", {"q": [(doc, float(-i)) for i, doc in enumerate(corpus)]})
    windowed = estimate(base, data, ep, "listwise", k=30, window=Window(10, 5))
    assert windowed.requests == 5 and "not the benchmark's setting" in windowed.summary()
    llm.responder = lambda m: json_reply([1])
    listwise_rerank(base, data, ep, k=30, window=Window(10, 5))
    assert estimate(base, data, ep, "listwise", k=30, window=Window(10, 5)).cached == 5  # replayed from the cache


@pytest.mark.parametrize("method", ["listwise", "pointwise"])
def test_a_resumed_job_with_its_own_reply_bound_starts_its_eta_from_what_it_cached(
    method: str, toy: Dataset, first: Run, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ETA before the first reply is the estimate of this very job: with its reply bound (in every
    reply's cache key), so a resumed job counts the replies it cached and prices the rest at its bound."""
    llm.responder = lambda m: json_reply([1, 2]) if method == "listwise" else "Fits.\nAnswer: relevant"
    rerank = listwise_rerank if method == "listwise" else pointwise_rerank
    rerank(Run("bm25", {"q1": first.rankings["q1"]}), toy, endpoint(llm), 3, max_tokens=64)
    used: list[lr.RerankEstimate] = []
    real = lr.estimate
    monkeypatch.setattr(lr, "estimate", lambda *a, **kw: used.append(real(*a, **kw)) or used[-1])
    rerank(first, toy, endpoint(llm), 3, max_tokens=64)
    per_query = 1 if method == "listwise" else 3
    assert [(e.cached, e.to_send, e.max_completion_tokens) for e in used] == [(per_query, per_query, per_query * 64)]


def test_reranking_goes_only_to_the_operators_endpoints() -> None:
    operator = OperatorLLM(endpoints=("http://127.0.0.1:8000/v1",), api_key=KEY)
    refused = reranker_endpoint("https://visitor.example/v1", "", "m", operator)
    assert refused.endpoint is None and "operator configured" in (refused.note or "")
    own_key = reranker_endpoint("https://visitor.example/v1", "sk-visitor", "m", operator)
    assert own_key.endpoint is None  # a visitor's server is not used even with the visitor's own key
    ours = reranker_endpoint("HTTP://127.0.0.1:8000/v1/", "", "m", operator)
    assert ours.endpoint is not None and ours.endpoint.api_key == KEY and ours.credential_source == OPERATOR_KEY
    default = reranker_endpoint("", "sk-visitor", "m", operator)
    assert default.endpoint.api_key == "sk-visitor" and default.credential_source == VISITOR_KEY
    assert reranker_endpoint("http://user:pw@127.0.0.1:8000/v1", "", "m", operator).note.startswith("Base URL not used")


def test_the_operators_key_reaches_only_the_operators_server(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    with FakeLLM() as visitor:
        operator = OperatorLLM(endpoints=(llm.url,), api_key=KEY)
        assert reranker_endpoint(visitor.url, "", "m", operator).endpoint is None
        resolved = reranker_endpoint(llm.url, "", "m", operator)
        llm.responder = lambda messages: json_reply([1])
        listwise_rerank(first, toy, resolved.endpoint)
        assert [r["auth"] for r in llm.requests] == [f"Bearer {KEY}"] * 2 and not visitor.requests


# --------------------------------------------------------------------------- the offline small model


@needs_offline_model
def test_end_to_end_with_the_offline_small_model(toy: Dataset, first: Run) -> None:
    """Two queries, two documents, a few tokens per reply: the pipeline, not the model's judgement."""
    local = LocalEndpoint(max_tokens=4)
    small = Run("bm25", {qid: first.rankings[qid][:2] for qid in ("q1", "q2")})
    run, explanations = pointwise_rerank(small, toy, local, k=2)
    assert {doc for doc, _ in run.top("q1")} == {"d2", "d4"} and set(explanations) == {"q1", "q2"}
    assert all(e.source in ("answer", "unparsed") and e.reasoning for e in explanations["q1"].values())
    listed = listwise_rerank(small, toy, local, k=2)
    assert set(dict(listed.top("q1"))) <= {"d2", "d4"} and set(listed.rankings) == {"q1", "q2"}
    report = BatchReport("listwise", "")
    assert listwise_rerank(small, toy, local, k=2, report_to=report).rankings == listed.rankings
    assert report.sent == 0 and report.from_cache == 2


def test_queries_and_documents_the_dataset_lacks_are_said_so(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.responder = lambda messages: json_reply([1, 2])
    imported = Run("imported", {"q1": [("d1", 2.0), ("zz", 1.5), ("d2", 1.0)], "qX": [("d3", 1.0)]})
    report = BatchReport("listwise", "")
    run = listwise_rerank(imported, toy, endpoint(llm), k=3, report_to=report)
    assert run.top("q1") == [("d1", 3.0), ("d2", 2.0)] and run.top("qX") == [("d3", 1.0)]
    assert "1 documents the corpus lacks" in report.notes["q1"] and "not reranked" in report.notes["qX"]
    assert "[3]" not in llm.requests[0]["body"]["messages"][1]["content"]  # only what the corpus knows is shown
    points, explanations = pointwise_rerank(imported, toy, endpoint(llm), k=3)
    assert points.top("qX") == [("d3", 1.0)] and set(explanations) == {"q1"}


def test_a_window_job_cancelled_midway_resumes_where_it_stopped(llm: FakeLLM) -> None:
    corpus = {f"d{i:02d}": f"passage {i}" for i in range(30)}
    data = Dataset("toy", corpus, {"q": "query"}, {}, "test")
    base = Run("bm25", {"q": [(doc, float(-i)) for i, doc in enumerate(corpus)]})
    llm.responder = lambda messages: json_reply([2, 1])
    with pytest.raises(RerankIncomplete) as stopped:
        listwise_rerank(
            base, data, endpoint(llm), k=30, window=Window(10, 5), should_stop=lambda: len(llm.requests) >= 3
        )
    assert stopped.value.report.stopped and len(llm.requests) == 3  # three of the five windows were asked
    report = BatchReport("listwise", "")
    done = listwise_rerank(base, data, endpoint(llm), k=30, window=Window(10, 5), report_to=report)
    assert (report.from_cache, report.sent, len(llm.requests)) == (3, 2, 5) and len(done.top("q")) == 30
