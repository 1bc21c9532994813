"""What reproduces what: the fidelity verdict of each kind of setting."""

from __future__ import annotations

from r2med_core.analysis.fidelity import fidelity
from r2med_core.llm.prompts import official_sampling
from r2med_core.systems import SystemSpec


def dense(name: str, rewrite: tuple[str, str] | None = None) -> SystemSpec:
    """A dense preset by the protocol's name (the preset table is the dense module's)."""
    return SystemSpec("dense", name, rewrite)


def test_the_benchmarks_settings_have_no_differences() -> None:
    for system in (
        "bm25",
        "bm25+hyde:gpt4",
        "bm25+query2doc:r1-qwen-32b",
        dense("bge"),
        dense("nv", ("lamer", "gpt4")),
    ):
        verdict = fidelity(system, dataset_name="Biology")
        assert verdict.is_benchmark and verdict.badge() == "" and verdict.explain() == "the benchmark's setting"
    assert fidelity("bm25", reranker="monobert").is_benchmark
    assert fidelity("bm25", reranker="rankllama").is_benchmark


def test_each_departure_is_named() -> None:
    cases = {
        "bm25s": "bm25s's own tokenizer",
        "bm25-okapi": "BM25Okapi",
        "minilm": "not a paper model",
        "dense:my/model": "not one of the benchmark's dense configurations",
        "rrf(bm25,minilm)": "reciprocal-rank fusion",
        "not a system!": "setting is not known",
    }
    for system, words in cases.items():
        verdict = fidelity(system, dataset_name="Biology")
        assert not verdict.is_benchmark and verdict.badge() == "≠ benchmark"
        assert any(words in d for d in verdict.differences), (system, verdict.differences)
    fused = fidelity("rrf(bm25s,minilm)").differences
    assert len(fused) == 3  # the fusion, and each member's own difference once
    tail = fidelity("bm25", reranker="monobert", keep_tail=True)
    assert tail.differences == ("the first-stage tail is kept below the reranked k (the benchmark's run holds only k)",)
    assert "is not one the benchmark evaluated" in fidelity("bm25", reranker="my/ce").differences[0]


def test_instruction_models_off_the_r2med_tasks_get_a_generic_instruction() -> None:
    assert fidelity(dense("e5"), dataset_name="Biology").is_benchmark
    generic = fidelity(dense("e5"), dataset_name="clinical-case")
    assert generic.differences == (
        "clinical-case is not an R2MED task: a generic query instruction replaces the per-task one",
    )
    assert fidelity(dense("bge"), dataset_name="clinical-case").is_benchmark  # one fixed instruction for every task
    assert fidelity("bm25", dataset_name="clinical-case").is_benchmark


def test_live_rewrites_are_judged_by_their_prompts_and_sampling() -> None:
    official = {
        "base_url": "http://x/v1",
        "model": "llama3",
        **official_sampling("llama3"),
        "max_tokens": 10240,
        "prompts": "official",
    }
    assert fidelity("bm25+hyde:llama3", dataset_name="Biology", live={("hyde", "llama3"): official}).is_benchmark
    gpt = {"base_url": "http://x/v1", "model": "gpt-4o", "temperature": 0.8, "top_p": 0.8, "prompts": "official"}
    assert fidelity("bm25+hyde:g", dataset_name="Biology", live={("hyde", "g"): gpt}).is_benchmark
    r1 = {**gpt, "model": "deepseek-ai/DeepSeek-R1", "max_tokens": None}  # an API model: no limit sent
    assert fidelity("bm25+hyde:r1", dataset_name="Biology", live={("hyde", "r1"): r1}).is_benchmark
    variants = {
        "R2MED Explorer's own prompts": {**official, "prompts": "explorer"},
        "not the benchmark's sampling": {**official, "temperature": 0.0, "seed": None},
        "cut at 512 tokens, not the benchmark's 10240": {**official, "max_tokens": 512},
        "without a token limit, not the benchmark's 10240": {**official, "max_tokens": None},
        "cut at 10240 tokens; the benchmark sent no limit": {**gpt, "max_tokens": 10240},
        "zero-shot": official,  # query2doc without examples
        "offline demo model": {"base_url": "local", "model": "x.gguf:1", "temperature": 0.0, "prompts": "official"},
    }
    for words, settings in variants.items():
        method = "query2doc" if words == "zero-shot" else "hyde"
        verdict = fidelity(f"bm25+{method}:l", dataset_name="Biology", live={(method, "l"): settings})
        assert any(words in d for d in verdict.differences), (words, verdict.differences)
    few_shot = {**official, "examples": "abc123"}
    assert fidelity("bm25+query2doc:l", dataset_name="Biology", live={("query2doc", "l"): few_shot}).is_benchmark
    other = fidelity("bm25+hyde:l", dataset_name="my-set", live={("hyde", "l"): official})
    assert any("same-family task" in d for d in other.differences)
    # a precomputed rewrite (no live settings) combines by the benchmark's rules
    assert fidelity("bm25+hyde:l", dataset_name="Biology", live={}).is_benchmark
