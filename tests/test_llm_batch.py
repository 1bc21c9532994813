"""The one batch runner, report, retry policy and reply cache behind rewriting, LLM reranking and the
LLM judge: every caller stops, counts and retries the same way, and paid replies are never lost."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from r2med_core.cache import ReplyCache, fingerprint
from r2med_core.data import Dataset
from r2med_core.judging import llm_judge
from r2med_core.judging.llm_judge import Pair, explain_relevance, judge_pairs
from r2med_core.llm import generation
from r2med_core.llm.batch import BatchReport, RetryPolicy
from r2med_core.llm.client import Endpoint
from r2med_core.llm.generation import generate_rewrites
from r2med_core.llm.llm_rerank import RerankIncomplete, listwise_rerank, pointwise_rerank
from r2med_core.llm.prompts import OFFICIAL_PROMPTS, official_system
from r2med_core.runs import Run

from .test_generation import KEY, FakeLLM

pytest.importorskip("tiktoken")

DOCS = {f"d{i}": f"Passage {i} about condition {i} and its treatment." for i in range(1, 6)}
QUERIES = {f"q{i}": f"Which treatment helps with condition {i}?" for i in range(1, 6)}
ORDER = [(doc, float(6 - i)) for i, doc in enumerate(DOCS, start=1)]


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


def endpoint(llm: FakeLLM) -> Endpoint:
    return Endpoint(llm.url, "fake-model", api_key=KEY)


def quick(**overrides: Any) -> RetryPolicy:
    return RetryPolicy(**{"base_delay": 0.001, "max_delay": 0.01, **overrides})


def pairs(k: int = 5) -> list[Pair]:
    return [Pair("q1", doc) for doc in list(DOCS)[:k]]


# Each caller run the same way: ``(report, units asked for)``; a reranking that does not finish
# raises ``RerankIncomplete``, whose report is the same kind of report.
def _judge(toy: Dataset, first: Run, llm: FakeLLM, **options: Any) -> BatchReport:
    return judge_pairs(toy, pairs(), endpoint(llm), **options)


def _rewrite(toy: Dataset, first: Run, llm: FakeLLM, **options: Any) -> BatchReport:
    return generate_rewrites(toy, "hyde", endpoint(llm), record=False, **options)


def _reranked(rerank: Callable[..., Any], run: Run, toy: Dataset, llm: FakeLLM, **options: Any) -> BatchReport:
    report = BatchReport("", "")
    try:
        rerank(run, toy, endpoint(llm), k=5, report_to=report, **options)
    except RerankIncomplete as stopped:
        assert stopped.report is report
    return report


def _listwise(toy: Dataset, first: Run, llm: FakeLLM, **options: Any) -> BatchReport:
    return _reranked(listwise_rerank, first, toy, llm, **options)


def _pointwise(toy: Dataset, first: Run, llm: FakeLLM, **options: Any) -> BatchReport:
    return _reranked(pointwise_rerank, Run("bm25", {"q1": list(ORDER)}), toy, llm, **options)


CALLERS: dict[str, tuple[Callable[..., BatchReport], str]] = {
    "judge": (_judge, "pairs"),
    "rewrite": (_rewrite, "queries"),
    "listwise": (_listwise, "queries"),
    "pointwise": (_pointwise, "documents"),
}
REPLYING = ["judge", "listwise", "pointwise"]  # the callers that parse a reply (a rewrite is any text)


@pytest.mark.parametrize("caller", REPLYING)
def test_unusable_replies_never_stop_a_batch_and_are_counted(
    caller: str, toy: Dataset, first: Run, llm: FakeLLM
) -> None:
    """The one rule: five unusable replies in a row (more than the three failures that stop a batch)
    do not stop it — the judge used to stop after three, the rerankers never did."""
    llm.responder = lambda messages: "I would rather not say."
    run, _ = CALLERS[caller]
    report = run(toy, first, llm, retry=quick(max_consecutive_failures=3))
    assert not report.stopped and report.error is None and not report.remaining
    assert len(report.unparsable) == 5 and len(llm.requests) == 5 and report.sent == 5
    assert "5 unparsable" in report.summary()
    if caller == "judge":  # no grade: the pair fails (not cached, so a rerun asks again)
        assert set(report.failed) == set(report.unparsable) and not report.results
    else:  # the method's fallback: first-stage order, a score of 0.5
        assert not report.failed and len(report.results) == 5 and report.complete


def test_a_reply_usable_or_not_ends_a_run_of_failures(toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.responder = lambda messages: "final score: 2"
    error = (500, {}, {"error": {"message": "overloaded"}})
    llm.script = [error, error, ("say", "no idea"), error, error]  # never three failures in a row
    report = judge_pairs(toy, pairs(), endpoint(llm), retry=quick(max_retries=0, max_consecutive_failures=3))
    assert not report.stopped and report.error is None and not report.remaining
    assert len(report.failed) == 5 and list(report.unparsable) == [("q1", "d3")]


@pytest.mark.parametrize("caller", list(CALLERS))
def test_failures_in_a_row_stop_every_batch_alike_and_the_rest_is_counted_not_tried(
    caller: str, toy: Dataset, first: Run, llm: FakeLLM
) -> None:
    llm.script = [(500, {}, {"error": {"message": "overloaded"}})] * 20
    run, noun = CALLERS[caller]
    report = run(toy, first, llm, retry=quick(max_retries=0, max_consecutive_failures=2))
    assert report.stopped and len(report.failed) == 2 and len(report.remaining) == 3 and len(llm.requests) == 2
    assert report.error is not None and report.error.startswith(f"2 {noun} in a row failed, stopping — last: ")
    assert "answered 500" in report.error and f"{len(report.remaining)} not tried" in report.summary()
    assert report.problem() == f"{report.error}; run again to resume (finished {noun} are cached)"


@pytest.mark.parametrize("caller", list(CALLERS))
def test_a_stop_request_ends_every_batch_alike(caller: str, toy: Dataset, first: Run, llm: FakeLLM) -> None:
    """Asked to stop before anything was sent: stopped, no error, everything left for the next run
    (the judge used to say so only through its error)."""
    run, noun = CALLERS[caller]
    report = run(toy, first, llm, should_stop=lambda: True)
    assert report.stopped and report.error is None and not report.failed and not llm.requests
    assert len(report.remaining) == 5 and not report.complete
    assert report.problem() == f"stopped with 5 {noun} left; run again to resume (finished {noun} are cached)"


@pytest.mark.parametrize("caller", ["judge", "rewrite", "listwise"])
def test_one_retry_policy_governs_every_callers_retries(caller: str, toy: Dataset, first: Run, llm: FakeLLM) -> None:
    llm.script = [(429, {"Retry-After": "120"}, {"error": {"message": "slow down"}})] * 10
    sleeps: list[float] = []
    run, _ = CALLERS[caller]
    report = run(toy, first, llm, retry=RetryPolicy(max_retries=2, max_delay=5, sleep=sleeps.append))
    assert sleeps == [5, 5] and len(llm.requests) == 3  # Retry-After capped by max_delay, two retries
    assert report.stopped and "rate-limiting (429) after 3 attempts" in (report.error or "")


def test_the_batch_ticker_counts_finished_and_failed_units_and_a_cancel_goes_on() -> None:
    """The progress line every LLM batch shows (judge, rewriting); a progress callback that raises (the
    app's Cancel) runs the caller's ``cancelled`` first and still stops the batch."""
    report = BatchReport("judge", "http://llm", noun="pairs")
    seen: list[tuple[float, str]] = []
    tell = report.ticker(lambda f, m: seen.append((f, m)), 4, "LLM judge · m", lambda: "; about 1 min left")
    tell()
    report.results["a"], report.failed["b"] = 2, "HTTP 500"
    tell()
    left = "; about 1 min left"
    assert seen == [(0.0, f"LLM judge · m: 0/4 pairs{left}"), (0.5, f"LLM judge · m: 2/4 pairs{left}")]
    BatchReport("x", "u").ticker(lambda f, m: seen.append((f, m)), 0, "hyde · w", lambda: "")()
    assert seen[-1] == (0.0, "hyde · w: 0/0 queries")

    def cancel(fraction: float, message: str) -> None:
        raise KeyboardInterrupt

    closed: list[bool] = []
    with pytest.raises(KeyboardInterrupt):
        report.ticker(cancel, 4, "hyde · w", lambda: "", cancelled=lambda: closed.append(True))()
    assert closed == [True]


def test_the_retry_policy_backs_off_exponentially_up_to_its_cap() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0)
    assert [policy.delay(attempt) for attempt in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert RetryPolicy() == RetryPolicy(max_retries=5, base_delay=1.0, max_delay=60.0, max_consecutive_failures=3)


# --------------------------------------------------------------------------- the reply cache


def _old_file(cache: Path, folder: str, key: str, payload: dict[str, Any]) -> Path:
    """A reply cached by an earlier version: its folder, its ``<kk>/<key>.json`` file."""
    path = cache / folder / key[:2] / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))
    return path


def test_replies_cached_by_earlier_versions_are_still_used(
    toy: Dataset, llm: FakeLLM, _isolated_cache: Path
) -> None:
    """Keys written out as the earlier code computed them, files as it wrote them: nothing is asked again."""
    ep, query, passage = endpoint(llm), toy.queries["q1"], toy.corpus["d1"]
    grade_key = fingerprint(
        "llm-judge", llm_judge.judge_endpoint(ep).identity(), llm_judge.JUDGE_PROMPT_VERSION, query, passage
    )
    _old_file(_isolated_cache, "llm_judge/grades", grade_key, {"grade": 3, "reply": "final score: 3", "model": "m"})
    explain_key = fingerprint(
        "llm-explain", llm_judge.explain_endpoint(ep).identity(), llm_judge.EXPLAIN_PROMPT_VERSION, query, passage
    )
    _old_file(_isolated_cache, "llm_judge/explain", explain_key, {"text": "It treats condition 1.", "model": "m"})
    prompt = (generation.PROMPT_VERSION, OFFICIAL_PROMPTS.identity(), "toy", None)
    rewrite_key = fingerprint("generation", ep.identity(), "hyde", *prompt, query, [], official_system("fake-model"))
    paid = {"hy_doc": "A paid passage.", "usage": {"prompt": 40, "completion": 9}}
    _old_file(_isolated_cache, "generations/replies", rewrite_key, paid)

    graded = judge_pairs(toy, [Pair("q1", "d1")], ep)
    explained = explain_relevance(ep, query, passage)
    rewritten = generate_rewrites(toy, "hyde", ep, query_ids=["q1"], record=False)
    assert not llm.requests
    assert graded.results == {("q1", "d1"): 3} and graded.from_cache == 1
    assert explained.from_cache and explained.text == "It treats condition 1."
    assert rewritten.results == {"q1": "A paid passage."} and rewritten.spent.completion_tokens == 9


def _damage(path: Path, how: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "fifo":
        os.mkfifo(path)  # a reader that opened it plainly would wait for a writer for ever
    elif how == "folder":
        path.mkdir()
    elif how == "symlink":
        target = path.parent / "elsewhere.json"
        target.write_text(json.dumps({"grade": 3}))
        path.symlink_to(target)
    else:
        path.write_bytes({"garbage": b"\x00\xff{not json", "list": b"[1, 2]", "wrong": b'{"grade": "3"}'}[how])


@pytest.mark.parametrize("how", ["garbage", "list", "wrong", "folder", "symlink", "fifo"])
def test_a_damaged_cache_entry_is_a_miss_never_a_crash_or_a_hang(how: str, toy: Dataset, llm: FakeLLM) -> None:
    llm.responder = lambda messages: "final score: 1"
    ep, unit = endpoint(llm), Pair("q1", "d1")
    key = llm_judge.grade_key(ep, toy.queries["q1"], toy.corpus["d1"])
    _damage(llm_judge.GRADE_REPLIES.path(key), how)
    found: list[BatchReport] = []
    worker = threading.Thread(target=lambda: found.append(judge_pairs(toy, [unit], ep)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert found, "judging hung on a damaged cache entry"
    assert found[0].results == {("q1", "d1"): 1} and found[0].complete and len(llm.requests) == 1


def test_an_oversized_entry_is_a_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = ReplyCache("replies", "test")
    key = cache.key("question")
    assert cache.put(key, {"text": "x" * 1000}) and cache.get(key) == {"text": "x" * 1000}
    monkeypatch.setattr("r2med_core.cache.REPLY_ENTRY_MAX_BYTES", 100)
    assert cache.get(key) is None
    with pytest.raises(ValueError):
        cache.path("../../etc/passwd")
