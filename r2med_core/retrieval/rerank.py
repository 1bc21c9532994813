"""Cross-encoder reranking of a first-stage run's top k, as the benchmark's reranker evaluation does.

R2MED reranks the top 10 or top 100 of a first-stage run with bge-reranker, monoBERT and RankLLaMA.
A cross-encoder reads (query, document) together, so it can credit a document that shares no words
with the query; it is also slow, which is why only the top k are scored and the scores are cached
on disk (keyed by model revision, k, corpus and the exact pairs) so a second rerank computes nothing.

How the new run is built, as the benchmark does: the top k are sorted by cross-encoder score (ties
keep first-stage order) and the reranked run holds **only those k documents** — so for k = 10 every
metric @25..@100 equals its @10 value, as in the published files. ``keep_tail=True`` keeps the rest
of the first-stage list below them (a useful view, not the benchmark's number: its name and label
say so); their first-stage scores are shifted by one constant so that the best of them is 1.0 below
the lowest reranked score, and a TREC round trip keeps the order.

Scores, as R2MED computes them: a one-logit cross-encoder's raw logit; monoBERT's raw logit of the
"relevant" class (``logits[:, 1]``, no softmax); RankLLaMA's single output logit. Inputs are the
original query text (no instruction, no rewrite) and the document text, truncated longest-first to
512 tokens (RankLLaMA: "query: …" / "document: …", 1024).
"""

from __future__ import annotations

import json
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from r2med_core.cache import cached, fingerprint
from r2med_core.data import Dataset
from r2med_core.hub import check_model_reachable
from r2med_core.progress import Progress, notify
from r2med_core.retrieval.dense import model_revision
from r2med_core.runs import Ranking, Run

#: The rerankers the R2MED paper evaluates. bge-reranker and monoBERT load as sentence-transformers
#: CrossEncoders (monoBERT is a two-label classifier scored by its raw "relevant" logit); rankllama is
#: a LoRA adapter merged onto Llama-2-7b (see ``RANKLLAMA_BASE``), which needs ``peft``.
RERANKER_PRESETS: dict[str, str] = {
    "bge-reranker": "BAAI/bge-reranker-v2-m3",
    "monobert": "castorini/monobert-large-msmarco",
    "rankllama": "castorini/rankllama-v1-7b-lora-passage",
}
RANKLLAMA_BASE = "meta-llama/Llama-2-7b-hf"
RANKLLAMA_MAX_LENGTH = 1024
#: The benchmark's input length for the cross-encoders.
MAX_LENGTH = 512

#: Bump when scoring changes what a cached entry would contain.
RERANK_FORMAT_VERSION = 2


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


class RankLlamaScorer:
    """RankLLaMA scoring: ``"query: {q}"`` / ``"document: {d}"`` as a pair, the single output logit.

    ``predict`` mirrors CrossEncoder's, so ``score_pairs`` treats both alike.
    """

    def __init__(self, model: Any, tokenizer: Any, max_length: int = RANKLLAMA_MAX_LENGTH) -> None:
        self.model, self.tokenizer, self.max_length = model, tokenizer, max_length
        if tokenizer.pad_token is None:  # Llama has no pad token; the classifier finds the last real token
            tokenizer.pad_token = tokenizer.unk_token or tokenizer.eos_token
        model.config.pad_token_id = tokenizer.pad_token_id

    def inputs(self, pairs: list[tuple[str, str]]) -> Any:
        return self.tokenizer(
            [f"query: {q}" for q, _ in pairs],
            [f"document: {d}" for _, d in pairs],
            max_length=self.max_length,
            truncation="longest_first",
            padding=True,
            return_tensors="pt",
        )

    def predict(self, pairs: list[tuple[str, str]], batch_size: int = 8, **_: Any) -> np.ndarray:
        import torch

        out: list[np.ndarray] = []
        device = next(self.model.parameters()).device
        with torch.no_grad():
            for start in range(0, len(pairs), batch_size):
                batch = self.inputs(pairs[start : start + batch_size]).to(device)
                logits = self.model(**batch).logits
                out.append(logits[:, 0].float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros(0)


def _merged_rankllama(adapter: str, base: str, dtype: Any, *, local_only: bool) -> tuple[Any, Any]:
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=local_only)
    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=1, torch_dtype=dtype, local_files_only=local_only
    )
    return PeftModel.from_pretrained(model, adapter, local_files_only=local_only).merge_and_unload(), tokenizer


@lru_cache(maxsize=1)
def load_rankllama(adapter: str = RERANKER_PRESETS["rankllama"], base: str = RANKLLAMA_BASE) -> RankLlamaScorer:
    """Llama-2-7b with the castorini RankLLaMA LoRA merged in; ``RerankerUnavailable`` with what to do otherwise."""
    import importlib.util

    if importlib.util.find_spec("peft") is None:
        raise RerankerUnavailable(
            "the rankllama reranker needs the peft package (pip install peft) to merge the "
            f"{adapter} LoRA onto {base}; a GPU is advised (7B parameters)"
        )
    try:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.float16 if device == "cuda" else torch.float32
        try:  # the local copy first; the hub only when that fails and we are online
            model, tokenizer = _merged_rankllama(adapter, base, dtype, local_only=True)
        except Exception:
            if _offline():
                raise
            check_model_reachable(base)  # fails at once offline, where loading would retry for a minute
            check_model_reachable(adapter)
            model, tokenizer = _merged_rankllama(adapter, base, dtype, local_only=False)
        model.to(device).eval()
    except Exception as err:
        cause = " ".join(str(err).split())[:200]
        raise RerankerUnavailable(
            f"could not load the rankllama reranker ({adapter} on {base}): both must be downloaded first "
            "(Llama-2 is gated: accept its licence on the Hugging Face hub and log in), and a GPU is advised "
            f"for a 7B model ({type(err).__name__}: {cause})"
        ) from None
    return RankLlamaScorer(model, tokenizer)


def load_reranker(model: str, max_length: int | None = MAX_LENGTH) -> Any:
    """The scorer for a preset name, hub id or folder (``RerankerUnavailable`` with a clear message)."""
    if model == "rankllama":
        return load_rankllama()
    return load_cross_encoder(resolve_reranker(model), max_length)


def score_pairs(model: Any, pairs: list[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
    """One relevance score per pair: the raw logit; for two-label (monoBERT) models the raw logit of the
    "relevant" class, ``logits[:, 1]``, as the benchmark scores it (no softmax)."""
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
        return values[:, 1]
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


def _reorder(ranking: Ranking, k: int, scored: dict[str, float], keep_tail: bool) -> Ranking:
    head = [doc for doc, _ in ranking[:k] if doc in scored]
    order = sorted(range(len(head)), key=lambda i: -scored[head[i]])  # stable: ties keep first-stage order
    reranked = [(head[i], scored[head[i]]) for i in order]
    rest = [(doc, score) for doc, score in ranking[:k] if doc not in scored]  # unscorable: not in the corpus
    if keep_tail:
        rest += list(ranking[k:])
    if reranked and rest:
        shift = rest[0][1] - reranked[-1][1] + 1.0
        rest = [(doc, score - shift) for doc, score in rest]
    return reranked + rest


def reranked_name(run_name: str, model: str, k: int, keep_tail: bool = False) -> str:
    """The reranked run's name; ``+tail`` marks the view that keeps the first-stage list below k."""
    return f"{run_name}>rerank:{model}@{k}" + ("+tail" if keep_tail else "")


def rerank_label(model: str, k: int, keep_tail: bool = False) -> str:
    """How a reranking is described to users; the tail view says it is not the benchmark's number."""
    label = f"reranked by {model} (top {k})"
    return label + (" + first-stage tail (not the benchmark's)" if keep_tail else "")


def rerank_key(
    run: Run, dataset: Dataset, model: str, k: int = 10, max_length: int | None = MAX_LENGTH
) -> dict[str, Any]:
    """The disk-cache key of a reranking (so a caller can ask whether it is computed already)."""
    location = resolve_reranker(model)
    return {
        "model": location,
        "revision": model_revision(location),
        "k": k,
        "max_length": RANKLLAMA_MAX_LENGTH if model == "rankllama" else max_length,
        "corpus": dataset.fingerprint,
        "pairs": fingerprint(_pairs(run, dataset, k)),
        "version": RERANK_FORMAT_VERSION,
    }


def rerank(
    run: Run,
    dataset: Dataset,
    model: str,
    k: int = 10,
    *,
    batch_size: int = 32,
    max_length: int | None = MAX_LENGTH,
    keep_tail: bool = False,
    progress: Progress | None = None,
) -> Run:
    """Rerank each query's top ``k`` with a cross-encoder (a preset name, hub id or local folder).

    The new run holds only the k reranked documents, as the benchmark's; ``keep_tail`` keeps the
    first-stage documents below them (named ``…+tail``; not the benchmark's number). Query text is
    the original query (not a rewrite). Documents the corpus lacks (an imported run) cannot be
    scored and go after the reranked ones. Raises ``RerankerUnavailable`` when the model cannot be
    loaded.
    """
    if k < 1:
        raise ValueError("k must be at least 1")
    pairs = _pairs(run, dataset, k)
    key = rerank_key(run, dataset, model, k, max_length)  # raises RerankerUnavailable first

    def build(folder: Path) -> None:
        started = time.perf_counter()
        encoder = load_reranker(model, max_length)
        scores: dict[str, list[float]] = {}
        total = sum(len(docs) for _, docs in pairs.values())
        done = 0
        for qid, (query, docs) in pairs.items():
            values = score_pairs(encoder, [(query, dataset.corpus[doc]) for doc in docs], batch_size)
            scores[qid] = [float(v) for v in values]
            done += len(docs)
            notify(progress, done / max(total, 1), f"Reranking with {model}: {done}/{total} pairs")
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
            rankings[qid] = _reorder(ranking, k, scored, keep_tail)
        else:
            rankings[qid] = list(ranking) if keep_tail else list(ranking[:k])
    notify(progress, 1.0, f"Reranking with {model}: done")
    name = reranked_name(run.name, model, k, keep_tail)
    return Run(name, rankings, run.seconds + float(payload["seconds"]), run.usage)  # keeps the first stage's tokens
