"""System names, the official rewrite combination rules, fusion and the run cache."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from r2med_core import systems
from r2med_core.data import load_demo, load_r2med_dir
from r2med_core.llm.rewrite import bm25_query, dense_query, extract_answer
from r2med_core.retrieval.fusion import reciprocal_rank_fusion
from r2med_core.systems import SpecError, bm25_retriever, parse_system, run_system


@pytest.mark.parametrize(
    "name",
    [
        "bm25",
        "bm25s",
        "bm25-okapi",
        "minilm",
        "dense:/models/enc",
        "bm25+hyde:gpt4",
        "rrf(bm25,minilm)",
        "rrf(bm25+hyde:gpt4,minilm+query2doc:qwen-7b)",
        "bge+lamer:gpt4",
    ],
)
def test_names_round_trip(name: str) -> None:
    assert str(parse_system(name)) == name


def test_parsing_normalises_and_labels() -> None:
    assert str(parse_system("dense:minilm")) == "minilm"
    assert parse_system("bm25+hyde:gpt4").label == "BM25 (R2MED official) + hyde (gpt4)"
    fusion = parse_system("rrf(bm25,minilm)").with_rewrite(("hyde", "x"))
    assert str(fusion) == "rrf(bm25+hyde:x,minilm+hyde:x)"
    assert str(fusion.base) == "rrf(bm25,minilm)"


@pytest.mark.parametrize(
    ("name", "message"),
    [("tfidf", "unknown system"), ("bm25+magic:gpt4", "METHOD:LLM"), ("rrf(bm25)", "at least two")],
)
def test_bad_names(name: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_system(name)


def test_combination_rules_follow_the_benchmark() -> None:
    assert bm25_query("hyde", "gpt4", "q", "doc") == "doc"
    assert bm25_query("search-o1", "qwen3-32b", "q", "thinking</think> answer") == "answer"
    assert bm25_query("query2doc", "gpt4", "ab", "doc") == "abab doc"
    assert bm25_query("lamer", "gpt4", "q", "doc") == "q doc"
    assert bm25_query("query2doc", "r1-qwen-32b", "q", "x</think>final") == "final"
    assert dense_query("query2doc", "gpt4", "q", "doc").texts == ("q[SEP]doc",)
    assert dense_query("hyde", "gpt4", "q", "doc").texts == ("q", "doc")
    assert extract_answer("a Final Response: b", "huatuo-o1-70b") == ": b"  # whitespace stripped only
    assert extract_answer("<think>x</think><answer> y </answer>", "qwen-7b-ins") == "y"
    assert extract_answer("no marker at all", "qwq-32b") == "no marker at all"


def test_bm25_hyde_run_is_bm25_on_the_hypothetical_document_alone() -> None:
    ds = load_demo("clinical-evidence")
    run = run_system(ds, "bm25+hyde:demo-writer")
    hy_docs = ds.rewrites["hyde", "demo-writer"]
    qids = list(ds.queries)
    expected = bm25_retriever(ds, "bm25").search([hy_docs[q] for q in qids], 100)
    assert [run.top(q) for q in qids] == expected


def test_fusion_system_equals_fusing_the_member_runs(tiny_r2med: Path) -> None:
    ds = load_r2med_dir(tiny_r2med)
    fused = run_system(ds, "rrf(bm25,bm25-okapi)")
    expected = reciprocal_rank_fusion([run_system(ds, "bm25"), run_system(ds, "bm25-okapi")], "x")
    assert fused.rankings == expected.rankings
    assert fused.name == "rrf(bm25,bm25-okapi)"


def test_runs_are_cached_and_keyed_by_the_data(tiny_r2med: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    computed: list[str] = []
    from r2med_core.kinds import base

    original = base._compute

    def spy(dataset, spec, k, progress):  # type: ignore[no-untyped-def]
        computed.append(str(spec))
        return original(dataset, spec, k, progress)

    monkeypatch.setattr(base, "_compute", spy)
    first = run_system(load_r2med_dir(tiny_r2med), "bm25")
    second = run_system(load_r2med_dir(tiny_r2med), "bm25")
    assert computed == ["bm25"] and second.rankings == first.rankings
    run_system(load_r2med_dir(tiny_r2med), "bm25", k=3)
    assert computed == ["bm25", "bm25"]  # a different k is a different run
    query_file = tiny_r2med / "query.jsonl"
    query_file.write_text(query_file.read_text().replace("How is", "How exactly is"))
    run_system(load_r2med_dir(tiny_r2med), "bm25")
    assert computed == ["bm25", "bm25", "bm25"]  # an edited query is never served from the old run


def test_progress_is_reported(tiny_r2med: Path) -> None:
    seen: list[float] = []
    run_system(load_r2med_dir(tiny_r2med), "rrf(bm25,bm25s)", progress=lambda f, m: seen.append(f))
    assert seen and seen[-1] == 1.0 and all(0.0 <= f <= 1.0 for f in seen)


def test_run_key_follows_the_instruction_the_model_runs_with(tiny_r2med: Path) -> None:
    """Another task fills an instruction model's prompt differently: its cached run must not be reused."""
    from dataclasses import replace

    biology = replace(load_r2med_dir(tiny_r2med), name="Biology")
    exam = replace(biology, name="MedQA-Diag")
    e5 = parse_system("e5")  # its query prompt holds {instruction}
    assert systems._run_key(biology, e5, 100) != systems._run_key(exam, e5, 100)
    minilm = parse_system("minilm")  # no prompt: the task changes nothing
    assert systems._run_key(biology, minilm, 100) == systems._run_key(exam, minilm, 100)


def test_rewritten_name() -> None:
    from r2med_core.systems import rewritten_name

    assert rewritten_name("bm25", "hyde:gpt4") == "bm25+hyde:gpt4"
    assert rewritten_name("rrf(bm25,minilm)", "lamer:qwen-7b") == "rrf(bm25+lamer:qwen-7b,minilm+lamer:qwen-7b)"
    assert rewritten_name("dense:minilm", "") == "minilm"


def _official_split(model: str, text: str) -> str:
    """The benchmark's ``split_response_for_r1`` (base.py, first commit), transcribed."""
    if model in ["r1-llama-8b", "r1-qwen-32b", "r1-llama-70b", "qwq-32b", "qwen3-32b", "qwen3-8b"]:
        try:
            _, response = text.split("</think>", 1)
            response = response.strip()
        except ValueError:
            response = text
    elif model in ["huatuo-o1-8b", "huatuo-o1-70b"]:
        found = re.search(r"Final Response\s*(.*)", text, re.DOTALL)
        response = found.group(1).strip() if found else text
    elif model in ["sky-32b"]:
        found = re.search(r"<\|begin_of_solution\|>\s*([\s\S]*?)\s*<\|end_of_solution\|>", text)
        response = found.group(1).strip() if found else text
    elif model in ["qwen-7b-ins", "qwen-3b-ins"]:
        answers = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
        response = answers[0].strip() if answers else text
    else:
        response = text
    return response


REPLIES = [
    " plain reply, no marker \n",
    "steps</think>\n the answer </think> more ",
    "Thinking ... ## Final Response\n\n## Diagnosis: gout\n",
    "Final Response:\n# Heading\nbody ",
    "ends with Final Response",
    "<|begin_of_thought|>t<|end_of_thought|><|begin_of_solution|>\n the passage \n<|end_of_solution|>",
    "<|begin_of_thought|>t<|end_of_thought|><|begin_of_solution|> cut off before the end marker",
    "a <|end_of_solution|> without a beginning",
    "<think>x</think><answer> y </answer><answer>z</answer>",
    "<answer>unclosed",
]


@pytest.mark.parametrize("llm", ["qwq-32b", "qwen3-8b", "huatuo-o1-8b", "huatuo-o1-70b", "sky-32b", "qwen-3b-ins"])
def test_answers_are_extracted_as_the_benchmark_extracts_them(llm: str) -> None:
    for reply in REPLIES:
        assert extract_answer(reply, llm) == _official_split(llm, reply), reply


def test_reasoning_models_are_cut_to_their_answer() -> None:
    assert extract_answer("steps</think> the answer ", "r1-llama-8b") == "the answer"
    assert extract_answer("hmm</think>x", "qwen3-8b") == "x"
    assert extract_answer("thinking. ## Final Response\n\nthe case", "huatuo-o1-8b") == "the case"
    sky = "<|begin_of_thought|>long thought<|end_of_thought|><|begin_of_solution|> the passage <|end_of_solution|>"
    assert extract_answer(sky, "sky-32b") == "the passage"
    assert bm25_query("hyde", "sky-32b", "q", sky) == "the passage"
    assert extract_answer("no markers here", "sky-32b") == "no markers here"
    assert dense_query("query2doc", "sky-32b", "q", sky).texts == ("q", "the passage")


def test_a_rewrite_retrieves_only_its_queries_with_its_own_query_text(tiny_r2med: Path) -> None:
    """As the benchmark: queries missing from the rewrite file are not retrieved; the file's text is the query."""
    from r2med_core.systems import bm25_queries, queries_left_out

    from .conftest import write_jsonl

    write_jsonl(
        tiny_r2med / "query2doc" / "toy-llm" / "query_with_hydoc.jsonl",
        [{"id": "q2", "text": "troponin question as the rewrite file spells it", "hy_doc": "Myocardial infarction."}],
    )
    ds = load_r2med_dir(tiny_r2med)
    assert ds.rewrite_queries["query2doc", "toy-llm"] == {"q2": "troponin question as the rewrite file spells it"}
    assert queries_left_out(ds, ("query2doc", "toy-llm")) == 2 and queries_left_out(ds, ("hyde", "toy-llm")) == 1
    assert queries_left_out(ds, None) == 0
    texts = bm25_queries(ds, ("query2doc", "toy-llm"))
    file_text = "troponin question as the rewrite file spells it"
    assert texts == {"q2": file_text * 2 + " Myocardial infarction."}
    run = run_system(ds, "bm25+query2doc:toy-llm")
    assert set(run.rankings) == {"q2"}
    assert run.top("q2") == bm25_retriever(ds, "bm25").search([texts["q2"]], 100)[0]
    assert set(run_system(ds, "minilm+hyde:toy-llm").rankings) == {"q1", "q2"}  # dense: the same rule
    assert set(run_system(ds, "bm25").rankings) == {"q1", "q2", "q3"}


def test_runs_on_a_reasoning_models_rewrite_are_keyed_by_the_answer_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change to how answers are cut out (``ANSWER_RULES_VERSION``) must not reuse runs made the old way;
    runs on other rewrites are untouched by it."""
    from r2med_core.kinds import base

    ds = load_demo("clinical-evidence")
    reasoning, plain = parse_system("bm25+hyde:huatuo-o1-8b"), parse_system("bm25+hyde:gpt4")
    before = base.run_key(ds, reasoning, 100), base.run_key(ds, plain, 100)
    monkeypatch.setattr(base, "ANSWER_RULES_VERSION", base.ANSWER_RULES_VERSION + 1)
    assert base.run_key(ds, reasoning, 100) != before[0]
    assert base.run_key(ds, plain, 100) == before[1]
