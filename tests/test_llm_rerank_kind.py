"""The LLM reranker as a system kind (``SYSTEM>llmrerank:list|point:MODEL@K``): its name, label and
cache key, a run computed through it against a real local OpenAI-compatible server, and the app:
a link never starts it (estimate and Compute first), and the point-wise reasoning shows, escaped."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from r2med_app.views.markup import md
from r2med_core import load_demo
from r2med_core.analysis.fidelity import fidelity
from r2med_core.compute.jobs import REGISTRY, run_job_key
from r2med_core.data import load_r2med_dir
from r2med_core.kinds import llm_rerank as kind
from r2med_core.reporting.provenance import system_models
from r2med_core.server.access import system_refusal
from r2med_core.settings import load_settings
from r2med_core.systems import (
    SpecError,
    cost_notes,
    estimate_seconds,
    is_computed,
    needs_click,
    parse_system,
    run_key,
    run_system,
    system_explanations,
)

from .test_app import APP
from .test_generation import KEY, FakeLLM

TASK = "clinical-evidence"
LIST = "bm25>llmrerank:list:fake-model@3"
POINT = "bm25>llmrerank:point:fake-model@3"
EVIL = "<img src=x onerror=alert(1)> **the case is ketoacidosis** [click](javascript:alert(1))"


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLM]:
    """A local server configured as the operator's endpoint, with the operator's key."""
    with FakeLLM() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        kind.use_operator(None)  # read the environment (an app test may have set the server's before)
        yield server
        kind.use_operator(None)


def reverse_ids(messages: list[dict[str, str]]) -> str:
    """A list-wise reply naming the shown passages in reverse order."""
    shown = [int(n) for n in re.findall(r"^\[(\d+)\]\. ", messages[-1]["content"], re.MULTILINE)]
    return "Reasoning about each passage.\n```json\n" + json.dumps(shown[::-1]) + "\n```"


def judge(messages: list[dict[str, str]]) -> str:
    document = messages[1]["content"].split("Document:\n")[1]
    verdict = "relevant" if "insulin" in document.lower() else "not relevant"
    return f"{EVIL}\nAnswer: {verdict}"


# --------------------------------------------------------------------------- the name


@pytest.mark.parametrize(
    "name",
    [
        LIST,
        POINT,
        "bm25>llmrerank:list:gpt-4o@10+window4-2",
        "bm25+hyde:gpt4>llmrerank:point:qwen2.5:7b@5",
        "rrf(bm25,bm25s)>llmrerank:list:m@10",
        "bm25>rerank:bge-reranker@10>llmrerank:list:m@5",
        "bm25>llmrerank:list:m@10>rerank:bge-reranker@5",
    ],
)
def test_names_round_trip(name: str) -> None:
    assert str(parse_system(name)) == name


def test_the_name_parses_into_base_model_depth_and_mode_and_bad_forms_say_what_is_accepted() -> None:
    spec = parse_system("bm25+hyde:gpt4>llmrerank:point:qwen2.5:7b@5")
    assert (spec.kind, spec.name, spec.param("k"), spec.param("mode")) == ("llmrerank", "qwen2.5:7b", 5, "point")
    assert str(spec.members[0]) == "bm25+hyde:gpt4"
    assert str(parse_system(LIST).with_rewrite(("hyde", "gpt4"))) == "bm25+hyde:gpt4>llmrerank:list:fake-model@3"
    outer = parse_system("bm25>llmrerank:list:m@10>rerank:bge-reranker@5")
    assert outer.kind == "rerank" and outer.members[0].kind == "llmrerank"
    for bad in [
        "bm25>llmrerank:rank:m@10",
        "bm25>llmrerank:list:m@0",
        "bm25>llmrerank:list:m@010",
        "bm25>llmrerank:list:@10",
        "bm25>llmrerank:list:m",
    ]:
        with pytest.raises(SpecError, match="SYSTEM>llmrerank:list:MODEL@K"):
            parse_system(bad)
    for path in ["bm25>llmrerank:list:.@10", "bm25>llmrerank:list:/etc@10", "bm25>llmrerank:point:~/m@3"]:
        with pytest.raises(SpecError, match="not a path"):
            parse_system(path)
    with pytest.raises(SpecError, match="only a list-wise reranking takes"):
        parse_system("bm25>llmrerank:point:m@10+window4-2")
    with pytest.raises(SpecError, match="sliding window needs"):
        parse_system("bm25>llmrerank:list:m@10+window1-1")


def test_labels_and_fidelity_say_what_is_and_is_not_the_benchmarks_setting() -> None:
    listed = parse_system(LIST)
    assert "list-wise by fake-model" in listed.label and "the benchmark's RerankerGPT prompt" in listed.label
    assert "not the benchmark" not in listed.label and kind.LLMRerankKind().differences(listed, None) == []
    window = parse_system("bm25>llmrerank:list:m@10+window4-2")
    assert "sliding windows of 4, step 2" in window.label and "not the benchmark's setting" in window.label
    point = parse_system(POINT)
    assert "point-wise" in point.label and "not the benchmark's" in point.label
    assert fidelity(LIST).is_benchmark
    assert not fidelity(POINT).is_benchmark and not fidelity(window).is_benchmark
    assert point.models() == (("llm", "fake-model"),) and "fake-model" in system_models(POINT)[0]


def test_a_link_may_name_an_llm_reranking_of_an_offered_system_but_not_in_the_demo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert system_refusal(LIST, load_settings(), offered=["bm25"]) is None
    monkeypatch.setenv("R2MED_DEMO_MODE", "1")
    assert system_refusal(LIST, load_settings(), offered=["bm25"]) == "this read-only demo runs no LLM"


def test_the_cache_key_holds_endpoint_prompt_and_first_stage_never_the_key(
    llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = load_demo(TASK)
    key = run_key(dataset, parse_system(LIST), 100)
    assert key["endpoint"]["base_url"] == llm.url and key["endpoint"]["model"] == "fake-model"
    assert key["base"] == run_key(dataset, parse_system("bm25"), 100)
    assert KEY not in json.dumps(key)
    assert run_key(dataset, parse_system(POINT), 100)["prompt"] != key["prompt"]
    assert run_key(dataset, parse_system("bm25s>llmrerank:list:fake-model@3"), 100)["base"] != key["base"]
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # another operator endpoint
    assert run_key(dataset, parse_system(LIST), 100) != key


# --------------------------------------------------------------------------- computing through the kind


def test_rerankers_send_as_many_requests_at_once_as_the_operator_setting_says(
    llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One setting for every LLM feature: ``R2MED_LLM_CONCURRENCY`` (default 1, right for
    llama-cpp-python's server, which serialises) — the rerankers sent 4 at once whatever it said."""
    import threading

    lock, second = threading.Lock(), threading.Event()
    in_flight, most = [0], [0]

    def counting(messages: list[dict[str, str]]) -> str:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
            if in_flight[0] >= 2:
                second.set()
        second.wait(timeout=0.5 if setting == 1 else 20)  # for a second request, if one comes
        with lock:
            in_flight[0] -= 1
        return reverse_ids(messages)

    llm.responder = counting
    dataset = load_demo(TASK)
    setting = 1
    run_system(dataset, LIST)  # the default: one at a time
    assert most[0] == 1 and len(llm.requests) == len(dataset.queries)
    setting = 3
    monkeypatch.setenv("R2MED_LLM_CONCURRENCY", "3")
    most[0] = 0
    run_system(dataset, "bm25>llmrerank:list:fake-model@2")
    assert 2 <= most[0] <= 3


def test_a_list_wise_run_is_computed_through_the_kind_and_only_after_a_click(llm: FakeLLM) -> None:
    llm.responder = reverse_ids
    dataset = load_demo(TASK)
    first = run_system(dataset, "bm25")
    assert needs_click(dataset, LIST)  # whatever the operator's compute threshold
    assert estimate_seconds(dataset, LIST) > 0
    notes = " ".join(cost_notes(dataset, LIST))
    assert f"{len(dataset.queries)} requests to send (0 of {len(dataset.queries)} cached)" in notes
    assert "endpoint at 127.0.0.1" in notes and "prompt tokens" in notes and KEY not in notes
    assert llm.requests == []  # estimating sent nothing

    run = run_system(dataset, LIST)
    assert len(llm.requests) == len(dataset.queries)
    assert llm.requests[0]["auth"] == f"Bearer {KEY}"  # the operator's key, to the operator's endpoint
    assert llm.requests[0]["body"]["model"] == "fake-model"
    for qid in dataset.queries:
        top3 = [doc for doc, _ in first.top(qid, 3)]
        assert run.top(qid) == [(doc, float(3 - i)) for i, doc in enumerate(top3[::-1])]
    assert run.name == LIST and is_computed(dataset, LIST) and not needs_click(dataset, LIST)
    assert cost_notes(dataset, LIST) == []
    (use,) = run.usage  # the tokens the server reported, kept with the run for its provenance
    assert use["model"] == "fake-model" and use["prompt"] > 0 and use["completion"] > 0
    again = run_system(dataset, LIST)
    assert len(llm.requests) == len(dataset.queries)  # the stored run, nothing sent again
    assert again.usage == run.usage  # and it still says what it cost to make


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ((401, {}, {"error": {"message": f"Incorrect API key {KEY}"}}), "rejected the API key (401 Unauthorized)"),
        ((500, {"Retry-After": "0"}, {"error": {"message": "boom"}}), "answered 500 (server error) 6 times"),
        (("raw", "application/json", b"{not json"), "malformed response"),
        (("say", "x" * ((1 << 20) + 100)), "sent a reply larger than 1 MB"),
    ],
)
def test_eval_says_an_llm_reranking_that_failed_as_generate_does(
    llm: FakeLLM, fault: tuple[object, ...], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29 item 10: the endpoint's faults are exit 3 and one ``error:`` line saying what went wrong
    (as ``generate`` gives), not the catch-all for bugs; nothing is written for an unfinished run."""
    from r2med_core.cli import main

    llm.script = [fault] * 200
    code = main(["eval", "--retriever", LIST, "--demo", TASK, "--output-dir", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 3, err
    assert err.strip().splitlines()[-1].startswith("error: ") and said in err and "unexpected" not in err
    assert "run again to resume" in err and KEY not in out + err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_point_wise_explanations_come_from_the_cache_only(llm: FakeLLM, tiny_r2med: Path) -> None:
    llm.responder = judge
    dataset = load_r2med_dir(tiny_r2med)
    qid = next(iter(dataset.queries))
    assert system_explanations(dataset, POINT, qid) is None  # not computed: nothing to show, nothing sent
    assert llm.requests == []
    run = run_system(dataset, POINT)
    sent = len(llm.requests)
    assert sent == sum(min(3, len(r)) for r in run_system(dataset, "bm25").rankings.values())
    found = system_explanations(dataset, POINT, qid)
    assert found is not None and found.by == "fake-model" and "not the benchmark's" in found.note
    assert set(found.texts) == {doc for doc, _ in run.top(qid)}
    assert set(found.texts.values()) == {EVIL}
    assert all("answer: " in line for line in found.details.values())
    assert len(llm.requests) == sent  # explaining sent nothing
    assert system_explanations(dataset, LIST, qid) is None  # list-wise replies hold no per-document reasons


def test_a_cancelled_job_resumes_from_the_cache(llm: FakeLLM) -> None:
    from r2med_core.compute.jobs import Cancelled

    llm.responder = reverse_ids
    dataset = load_demo(TASK)
    run_system(dataset, "bm25")
    calls = {"n": 0}

    def cancel_after_some(fraction: float, message: str) -> None:
        if "requests" in message:
            calls["n"] += 1
            if calls["n"] >= 2:
                raise Cancelled("test")

    llm.latency = 0.05
    with pytest.raises(Cancelled):
        run_system(dataset, LIST, progress=cancel_after_some)
    done = len(llm.requests)
    assert 0 < done < len(dataset.queries) and not is_computed(dataset, LIST)
    assert f"{len(dataset.queries) - done} requests to send ({done} of" in " ".join(cost_notes(dataset, LIST))
    run_system(dataset, LIST)
    assert len(llm.requests) == len(dataset.queries)  # only the rest was sent


# --------------------------------------------------------------------------- the app


def _fresh_app(page: str, **params: str | list[str]) -> AppTest:
    import streamlit as st

    st.cache_resource.clear()
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=300)
    for name, value in params.items():
        at.query_params[name] = value
    at.run()
    at.switch_page(f"views/pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_link_to_an_llm_reranking_shows_its_cost_and_asks_only_after_compute_then_explains(
    llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")  # even a server that computes anything by itself
    llm.responder = judge
    dataset = load_demo(TASK)
    qid = next(iter(dataset.qrels))
    at = _fresh_app("explorer", task=TASK, systems=["bm25", POINT], system=POINT, q=qid)
    assert llm.requests == []  # the link started nothing
    captions = " ".join(c.value for c in at.caption)
    assert "requests to send" in captions and "prompt tokens" in captions
    button = at.button(key=f"compute:{POINT}")
    assert button.label.startswith("Compute (≈")
    at.run()
    assert llm.requests == []

    button.click().run()
    job = REGISTRY.get(run_job_key(dataset, POINT))
    assert job is not None and job.wait(300) and job.state == "done", job.error
    assert len(llm.requests) == 3 * len(dataset.queries)
    assert all(r["auth"] == f"Bearer {KEY}" for r in llm.requests)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [m.value for m in at.markdown if "Why, says" in m.value]
    assert shown and all(md(EVIL) in value and "fake\\-model" in value for value in shown)
    assert md(EVIL).startswith(r"\<img")  # shown as written, never as markup
    assert "onerror" not in " ".join(str(h.proto.body) for h in at.get("html"))
    assert any("not the benchmark" in c.value for c in at.caption)
    assert KEY not in str(at.query_params)


def test_the_visitors_base_url_never_receives_a_reranking_and_cancel_resumes_from_the_cache(
    llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm.responder = reverse_ids
    llm.latency = 1.0  # long enough to press Cancel while it runs
    dataset = load_demo(TASK)
    with FakeLLM() as visitors:
        at = _fresh_app("explorer", task=TASK, systems=["bm25", LIST], system=LIST)
        at.text_input(key="w_llm_url").input(visitors.url).run()
        at.text_input(key="w_llm_model").input("visitor-model").run()
        at.button(key=f"compute:{LIST}").click().run()
        key = run_job_key(dataset, LIST)
        job = REGISTRY.get(key)
        assert job is not None
        if job.state == "running":
            assert at.get("progress")  # the job's progress, with Cancel
            at.button(key=f"cancel:{'|'.join(key)}").click().run()
        assert job.wait(300)
        assert visitors.requests == []  # the operator's endpoint only, whatever the visitor typed
    assert job.state == "cancelled", job.state
    sent = len(llm.requests)
    assert 0 < sent < len(dataset.queries)
    at.run()
    resume = at.button(key=f"compute:{LIST}")
    assert "resumes where it stopped" in resume.label
    assert md(f"{len(dataset.queries) - sent} requests to send ({sent} of") in " ".join(c.value for c in at.caption)
    llm.latency = 0.0
    resume.click().run()
    job = REGISTRY.get(key)
    assert job is not None and job.wait(300) and job.state == "done", job.error
    assert len(llm.requests) == len(dataset.queries)  # the cancelled job's replies were not asked again
    assert {r["body"]["model"] for r in llm.requests} == {"fake-model"}


def test_the_app_offers_llm_rerankings_of_a_system_by_name() -> None:
    from r2med_core.systems import llm_reranker_choices, parse_system

    offered = llm_reranker_choices("bm25", "smollm2-135m", 10)
    assert list(offered) == [
        "bm25>llmrerank:list:smollm2-135m@10",
        "bm25>llmrerank:point:smollm2-135m@10",
        "bm25>insertrank:smollm2-135m@10",
    ]
    assert all(str(parse_system(name)) == name for name in offered)
    assert "benchmark's RerankerGPT" in offered["bm25>llmrerank:list:smollm2-135m@10"]
    assert not any(">insertrank:" in name for name in llm_reranker_choices("minilm", "m", 10))  # BM25 scores only
    assert llm_reranker_choices("bm25", "/etc/passwd") == {} and llm_reranker_choices("bm25", "two words") == {}


def test_the_operators_reply_bound_reaches_the_reranking_key_and_its_label(monkeypatch) -> None:
    from r2med_core.systems import parse_system

    spec = parse_system("bm25>llmrerank:list:some-model@10")
    assert not any("bounded" in d for d in spec.system_kind.differences(spec, "toy"))
    monkeypatch.setenv("R2MED_LLM_RERANK_MAX_TOKENS", "64")
    said = [d for d in spec.system_kind.differences(spec, "toy") if "bounded at 64" in d]
    assert said and "sends no bound" in said[0]
    monkeypatch.setenv("R2MED_LLM_RERANK_MAX_TOKENS", "6.5")
    with pytest.raises(ValueError, match="R2MED_LLM_RERANK_MAX_TOKENS must be a whole number"):
        spec.system_kind.differences(spec, "toy")
