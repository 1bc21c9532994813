"""The InsertRank-style reranker (``BM25SYSTEM>insertrank:MODEL@K``, issue 26 item 5): its name and
label, and a run computed on the demo against a local OpenAI-compatible server, each prompt showing
the passages' BM25 scores, behind the same click, cache and metering as ``llmrerank:list``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from r2med_core import load_demo
from r2med_core.analysis.fidelity import fidelity
from r2med_core.kinds.llm_rerank import operator_endpoint
from r2med_core.llm import llm_rerank as lr
from r2med_core.llm.batch import BatchReport
from r2med_core.server.access import system_refusal
from r2med_core.settings import load_settings
from r2med_core.systems import SpecError, cost_notes, is_computed, needs_click, parse_system, run_key, run_system

from .test_generation import KEY, FakeLLM
from .test_llm_rerank_kind import LIST, TASK, llm, reverse_ids  # noqa: F401 (llm: the operator's local server)

INSERT = "bm25>insertrank:fake-model@3"


def shown_scores(messages: list[dict[str, str]]) -> list[tuple[int, str]]:
    """The passage numbers and the BM25 scores a prompt shows under them."""
    return [(int(n), s) for n, s in re.findall(r"^\[(\d+)\]\. .*\nBM25 score: (\S+)$", messages[-1]["content"], re.M)]


def test_names_round_trip_and_only_a_bm25_first_stage_is_accepted() -> None:
    for name in [INSERT, "bm25q+hyde:demo-writer>insertrank:m@10", "bm25>insertrank:m@10>rerank:bge-reranker@5"]:
        assert str(parse_system(name)) == name
    spec = parse_system("bm25s>insertrank:qwen2.5:7b@5")
    assert (spec.kind, spec.name, spec.param("k"), str(spec.members[0])) == ("insertrank", "qwen2.5:7b", 5, "bm25s")
    with pytest.raises(SpecError, match="first stage must be a BM25 system"):
        parse_system("minilm>insertrank:m@10")
    with pytest.raises(SpecError, match="BM25SYSTEM>insertrank:MODEL@K"):
        parse_system("bm25>insertrank:m@0")
    with pytest.raises(SpecError, match="not a path"):
        parse_system("bm25>insertrank:~/m@3")


def test_the_label_names_the_source_and_says_it_is_not_the_benchmarks_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = parse_system(INSERT)
    assert "InsertRank-style" in spec.label and "arXiv 2506.14086" in spec.label
    assert "not the benchmark's setting" in spec.label and "BM25 score" in spec.label
    assert not fidelity(INSERT).is_benchmark and fidelity(LIST).is_benchmark
    assert spec.models() == (("llm", "fake-model"),)
    assert system_refusal(INSERT, load_settings(), offered=["bm25"]) is None
    monkeypatch.setenv("R2MED_DEMO_MODE", "1")
    assert system_refusal(INSERT, load_settings(), offered=["bm25"]) == "this read-only demo runs no LLM"


def test_its_cache_keys_are_not_the_list_wise_rerankers(llm: FakeLLM) -> None:  # noqa: F811
    dataset = load_demo(TASK)
    insert, listed = run_key(dataset, parse_system(INSERT), 100), run_key(dataset, parse_system(LIST), 100)
    assert insert["prompt"] == lr.INSERTRANK_VERSION != listed["prompt"] and insert["base"] == listed["base"]
    assert insert["endpoint"] == listed["endpoint"] and KEY not in json.dumps(insert)
    messages = lr.listwise_messages("q", ["a passage"])
    endpoint = operator_endpoint("fake-model")
    assert lr.reply_key("insertrank", endpoint, messages, False) != lr.reply_key("listwise", endpoint, messages, False)


def test_it_reranks_the_bm25_top_k_of_the_demo_showing_each_score_after_a_click(llm: FakeLLM) -> None:  # noqa: F811
    llm.responder = reverse_ids
    dataset = load_demo(TASK)
    first = run_system(dataset, "bm25")
    assert needs_click(dataset, INSERT)
    notes = " ".join(cost_notes(dataset, INSERT))
    assert f"{len(dataset.queries)} requests to send (0 of {len(dataset.queries)} cached)" in notes
    assert "InsertRank-style prompt" in notes and "endpoint at 127.0.0.1" in notes
    assert llm.requests == []  # estimating sent nothing

    run = run_system(dataset, INSERT)
    assert len(llm.requests) == len(dataset.queries)
    assert all(r["auth"] == f"Bearer {KEY}" and r["body"]["model"] == "fake-model" for r in llm.requests)
    prompts = {r["body"]["messages"][-1]["content"]: r["body"]["messages"] for r in llm.requests}
    for qid, query in dataset.queries.items():
        top3 = first.top(qid, 3)
        [messages] = [m for text, m in prompts.items() if query.replace("\n", "  ") in text]
        assert shown_scores(messages) == [(i, f"{score:.2f}") for i, (_, score) in enumerate(top3, start=1)]
        assert run.top(qid) == [(doc, float(3 - i)) for i, (doc, _) in enumerate(top3[::-1])]
    assert "BM25 score from a lexical retrieval system" in next(iter(prompts))
    assert run.name == INSERT and is_computed(dataset, INSERT) and not needs_click(dataset, INSERT)
    (use,) = run.usage  # metered as the list-wise reranker's runs are
    assert use["model"] == "fake-model" and use["prompt"] > 0 and use["completion"] > 0

    # The replies are cached: the same job again asks nothing, and the list-wise prompt is a new request.
    report = BatchReport("insertrank", "")
    lr.listwise_rerank(first, dataset, operator_endpoint("fake-model"), 3, show_scores=True, report_to=report)
    assert (report.sent, report.from_cache) == (0, len(dataset.queries))
    run_system(dataset, LIST)
    assert len(llm.requests) == 2 * len(dataset.queries)
    assert all(shown_scores(r["body"]["messages"]) == [] for r in llm.requests[len(dataset.queries) :])


def test_eval_runs_it_on_the_demo(
    llm: FakeLLM,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from r2med_core.cli import main

    llm.responder = reverse_ids
    code = main(["eval", "--retriever", INSERT, "--demo", TASK, "--output-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "InsertRank-style" in out and "not the benchmark's setting" in out and KEY not in out + err
    assert len(llm.requests) == len(load_demo(TASK).queries)
