"""Dense retrieval with the offline MiniLM: rankings, the embedding cache, stale and damaged entries."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from r2med_core.cache import entry_path
from r2med_core.data import load_r2med_dir
from r2med_core.retrieval.dense import PRESETS, DenseRetriever, resolve_model
from r2med_core.systems import dense_retriever, run_system

from .conftest import TINY_CORPUS, write_jsonl


@pytest.fixture
def encode_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Record every (side, number of texts) DenseRetriever encodes, without changing the result."""
    calls: list[tuple[str, int]] = []
    original = DenseRetriever.encode

    def spy(self, texts, which="query", progress=None):  # type: ignore[no-untyped-def]
        calls.append((which, len(texts)))
        return original(self, texts, which, progress)

    monkeypatch.setattr(DenseRetriever, "encode", spy)
    return calls


def test_offline_minilm_ranks_the_matching_document_first(tiny_r2med: Path) -> None:
    ds = load_r2med_dir(tiny_r2med)
    retriever = dense_retriever(ds, "minilm")
    [ranking] = retriever.search(["What is asthma, the airway disease with wheezing?"], k=3)
    assert ranking[0][0] == "asthma_0"
    assert len(ranking) == 3 and ranking[0][1] >= ranking[1][1] >= ranking[2][1]
    vectors = retriever.encode(["a", "b"])
    assert vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_second_use_does_not_reencode_the_corpus(tiny_r2med: Path, encode_calls: list) -> None:
    ds = load_r2med_dir(tiny_r2med)
    first = run_system(ds, "minilm")
    assert ("doc", len(TINY_CORPUS)) in encode_calls
    encode_calls.clear()
    dense_retriever(load_r2med_dir(tiny_r2med), "minilm")  # a fresh load of the same data
    assert encode_calls == []
    again = run_system(load_r2med_dir(tiny_r2med), "minilm")
    assert again.rankings == first.rankings
    assert encode_calls == []  # the run itself is cached too


def test_changed_document_text_invalidates_the_cache(tiny_r2med: Path, encode_calls: list) -> None:
    dense_retriever(load_r2med_dir(tiny_r2med), "minilm")
    changed = [dict(d) for d in TINY_CORPUS]
    changed[2]["text"] = "Asthma exacerbations are treated with inhaled bronchodilators."
    write_jsonl(tiny_r2med / "corpus.jsonl", changed)
    encode_calls.clear()
    retriever = dense_retriever(load_r2med_dir(tiny_r2med), "minilm")
    assert encode_calls == [("doc", len(TINY_CORPUS))]
    reconstructed = retriever.index.reconstruct(2)
    expected = retriever.encode([changed[2]["text"]], "doc")[0]
    assert np.allclose(reconstructed, expected, atol=1e-5)


def test_truncated_cache_file_is_detected_and_rebuilt(tiny_r2med: Path, encode_calls: list) -> None:
    ds = load_r2med_dir(tiny_r2med)
    retriever = dense_retriever(ds, "minilm")
    folder = entry_path("dense", retriever.cache_key(ds.fingerprint))
    index_file = folder / "index.faiss"
    index_file.write_bytes(index_file.read_bytes()[:100])
    encode_calls.clear()
    rebuilt = dense_retriever(ds, "minilm")
    assert encode_calls == [("doc", len(TINY_CORPUS))]
    assert rebuilt.index.ntotal == len(TINY_CORPUS)
    assert index_file.stat().st_size > 100


def test_prompts_are_part_of_the_cache_key() -> None:
    plain = DenseRetriever(PRESETS["minilm"]).cache_key("abc")
    prompted = DenseRetriever(PRESETS["minilm"].with_instruction("x")).cache_key("abc")
    assert plain == prompted  # MiniLM has no prompt: the instruction does not apply
    bge = PRESETS["bge-large"]
    assert DenseRetriever(bge).cache_key("abc") != DenseRetriever(replace(bge, query_prompt="other: ")).cache_key("abc")
    assert DenseRetriever(bge).cache_key("abc") != DenseRetriever(replace(bge, max_length=128)).cache_key("abc")
    assert resolve_model("some/model-id").query_model == "some/model-id"


def test_dense_hyde_is_the_mean_of_query_and_hypothetical_document(tiny_r2med: Path) -> None:
    """Fidelity with the benchmark: dense HyDE searches with mean(emb(query), emb(hy_doc))."""
    ds = load_r2med_dir(tiny_r2med)
    run = run_system(ds, "minilm+hyde:toy-llm")
    retriever = dense_retriever(ds, "minilm")
    q, hy = ds.queries["q1"], ds.rewrites["hyde", "toy-llm"]["q1"]
    mean = retriever.encode([q, hy]).mean(axis=0, keepdims=True)
    [expected] = retriever.search_vectors(mean, k=100)
    assert [d for d, _ in run.top("q1")] == [d for d, _ in expected]
    assert [s for _, s in run.top("q1")] == pytest.approx([s for _, s in expected], abs=1e-5)
    # q3 has no hypothetical document: as in the benchmark, it is not retrieved with the rewrite.
    assert "q3" not in run.rankings and "q3" in run_system(ds, "minilm").rankings
