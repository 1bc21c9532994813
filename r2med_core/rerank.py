"""Cross-encoder reranking of a first-stage run's top k, as the benchmark's reranker evaluation does.

R2MED reranks the top 10 or top 100 of a first-stage run with bge-reranker, monoBERT and RankLLaMA.
A cross-encoder reads (query, document) together, so it can credit a document that shares no words
with the query; it is also slow, which is why only the top k are scored and the scores are cached
on disk (keyed by model revision, k, corpus and the exact pairs) so a second rerank computes nothing.

How the new run is built: the top k are sorted by cross-encoder score (ties keep first-stage order)
and carry that score; documents below k keep their first-stage order and scores, shifted by one
constant so that the best of them is 1.0 below the lowest reranked score — every score stays
distinct in the same places as before, and a TREC round trip keeps the order.
"""

from __future__ import annotations

import json
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .cache import cached, fingerprint
from .data import Dataset
from .hub import check_model_reachable
from .progress import Progress, report
from .retrieval.dense import model_revision
from .runs import Ranking, Run

#: Rerankers the R2MED paper evaluates that sentence-transformers' CrossEncoder loads directly.
#: monoBERT is a two-label BERT classifier: its score is log P(relevant), as pygaggle computes it.
RERANKER_PRESETS: dict[str, str] = {
    "bge-reranker": "BAAI/bge-reranker-v2-m3",
    "monobert": "castorini/monobert-large-msmarco",
}

#: Bump when scoring changes what a cached entry would contain.
RERANK_FORMAT_VERSION = 1


class RerankerUnavailable(RuntimeError):
    """The cross-encoder could not be loaded (not downloaded, offline, not a cross-encoder)."""


def resolve_reranker(model: str) -> str:
    """A preset name's hub id, or the model id / local path as given."""
    return RERANKER_PRESETS.get(model, model)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


@lru_cache(maxsize=2)
def load_cross_encoder(location: str, max_length: int | None = 512) -> Any:
    """Load a CrossEncoder once per process; ``RerankerUnavailable`` with a clear message otherwise.

    The local copy (Hugging Face cache or folder) is tried first, so a downloaded model loads without
    network; the hub is asked only when that fails and ``HF_HUB_OFFLINE`` is not set.
    """
    try:
        from sentence_transformers import CrossEncoder

        try:
            return CrossEncoder(location, device="cpu", max_length=max_length, local_files_only=True)
        except Exception:
            if _offline() or Path(location).expanduser().exists():
                raise
        check_model_reachable(location)  # fails at once offline, where loading would retry for a minute
        return CrossEncoder(location, device="cpu", max_length=max_length)
    except Exception as err:
        cause = " ".join(str(err).split())[:200]
        if Path(location).expanduser().exists():
            raise RerankerUnavailable(
                f"{location} is not a cross-encoder sentence-transformers can load ({type(err).__name__}: {cause})"
            ) from None
        raise RerankerUnavailable(
            f"could not load the reranker {location!r}: the model must be downloaded first — run once with "
            "network access (it is kept in the Hugging Face cache) or pass a local folder "
            f"({type(err).__name__}: {cause})"
        ) from None


def score_pairs(model: Any, pairs: list[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
    """One relevance score per pair: the raw logit, or log P(relevant) for two-label (monoBERT) models."""
    import torch

    if not pairs:
        return np.zeros(0, dtype=np.float64)
    raw = model.predict(
        pairs,
        batch_size=batch_size,
        activation_fn=torch.nn.Identity(),
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    values = np.asarray(raw, dtype=np.float64)
    if values.ndim == 1:
        return values
    if values.ndim == 2 and values.shape[1] == 1:
        return values[:, 0]
    if values.ndim == 2 and values.shape[1] == 2:
        return torch.log_softmax(torch.from_numpy(values), dim=1)[:, 1].numpy()
    raise RerankerUnavailable(
        f"the reranker returns {values.shape[-1]} scores per pair; expected 1 (a relevance score) or 2 (monoBERT)"
    )


def _pairs(run: Run, dataset: Dataset, k: int) -> dict[str, tuple[str, list[str]]]:
    """Per query: its text and the top-k document ids the corpus knows (others cannot be scored)."""
    out: dict[str, tuple[str, list[str]]] = {}
    for qid in run.rankings:
        if qid not in dataset.queries:
            continue
        docs = [doc for doc, _ in run.top(qid, k) if doc in dataset.corpus]
        if docs:
            out[qid] = (dataset.queries[qid], docs)
    return out


def _reorder(ranking: Ranking, k: int, scored: dict[str, float]) -> Ranking:
    head = [doc for doc, _ in ranking[:k] if doc in scored]
    order = sorted(range(len(head)), key=lambda i: -scored[head[i]])  # stable: ties keep first-stage order
    reranked = [(head[i], scored[head[i]]) for i in order]
    rest = [(doc, score) for doc, score in ranking[:k] if doc not in scored] + list(ranking[k:])
    if reranked and rest:
        shift = rest[0][1] - reranked[-1][1] + 1.0
        rest = [(doc, score - shift) for doc, score in rest]
    return reranked + rest


def rerank(
    run: Run,
    dataset: Dataset,
    model: str,
    k: int = 10,
    *,
    batch_size: int = 32,
    max_length: int | None = 512,
    progress: Progress | None = None,
) -> Run:
    """Rerank each query's top ``k`` with a cross-encoder (a preset name, hub id or local folder).

    Query text is the original query (not a rewrite). Documents the corpus lacks (an imported run)
    cannot be scored and go after the reranked ones. Raises ``RerankerUnavailable`` when the model
    cannot be loaded.
    """
    if k < 1:
        raise ValueError("k must be at least 1")
    location = resolve_reranker(model)
    pairs = _pairs(run, dataset, k)
    key = {
        "model": location,
        "revision": model_revision(location),
        "k": k,
        "max_length": max_length,
        "corpus": dataset.fingerprint,
        "pairs": fingerprint(pairs),
        "version": RERANK_FORMAT_VERSION,
    }

    def build(folder: Path) -> None:
        started = time.perf_counter()
        encoder = load_cross_encoder(location, max_length)
        scores: dict[str, list[float]] = {}
        total = sum(len(docs) for _, docs in pairs.values())
        done = 0
        for qid, (query, docs) in pairs.items():
            values = score_pairs(encoder, [(query, dataset.corpus[doc]) for doc in docs], batch_size)
            scores[qid] = [float(v) for v in values]
            done += len(docs)
            report(progress, done / max(total, 1), f"Reranking with {model}: {done}/{total} pairs")
        payload = {"scores": scores, "seconds": time.perf_counter() - started}
        (folder / "scores.json").write_text(json.dumps(payload), encoding="utf-8")

    def load(folder: Path) -> dict[str, Any]:
        payload = json.loads((folder / "scores.json").read_text(encoding="utf-8"))
        if set(payload["scores"]) != set(pairs):
            raise ValueError("cached scores do not match the run")
        return payload

    payload = cached("rerank", key, build, load)
    rankings: dict[str, Ranking] = {}
    for qid, ranking in run.rankings.items():
        if qid in pairs:
            scored = dict(zip(pairs[qid][1], payload["scores"][qid]))
            rankings[qid] = _reorder(ranking, k, scored)
        else:
            rankings[qid] = list(ranking)
    report(progress, 1.0, f"Reranking with {model}: done")
    return Run(f"{run.name}>rerank:{model}@{k}", rankings, run.seconds + float(payload["seconds"]))
