"""Systems: one small spec names a retrieval system, and ``run_system`` turns it into a Run.

The spec's canonical string (``bm25``, ``bm25s``, ``bm25-okapi``, ``minilm``, ``dense:<model>``,
``rrf(bm25,minilm)``, any of them with ``+hyde:<llm>``) is the one name used by the CLI, the URL,
run files and every cache key — so the same system is never computed twice under two names.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .cache import cached, fingerprint
from .data import Dataset
from .progress import Progress, report
from .retrieval.bm25 import BM25Retriever
from .retrieval.dense import GENERIC_INSTRUCTION, PRESETS, DenseModel, DenseRetriever, resolve_model
from .retrieval.fusion import reciprocal_rank_fusion
from .retrieval.tokenize import ANALYZER_VERSION
from .rewrite import bm25_query, dense_query
from .runs import Ranking, Run
from .tasks import FAMILY_INSTRUCTIONS, REWRITE_METHODS

#: Bump when retrieval code changes what a cached run would contain.
RUN_FORMAT_VERSION = 1

BM25_ENGINES: dict[str, str] = {"bm25": "official", "bm25s": "bm25s", "bm25-okapi": "okapi"}
BM25_LABELS: dict[str, str] = {
    "bm25": "BM25 (R2MED official)",
    "bm25s": "BM25 (bm25s default tokenizer)",
    "bm25-okapi": "BM25 Okapi (rank_bm25)",
}


class SpecError(ValueError):
    """A system name that cannot be parsed; the message says what is accepted."""


@dataclass(frozen=True)
class SystemSpec:
    """A retrieval system: ``kind`` is "bm25", "dense" or "fusion"."""

    kind: str
    name: str = ""  # bm25 engine alias (bm25|bm25s|bm25-okapi) or dense preset / model id
    rewrite: tuple[str, str] | None = None  # (method, llm) of a precomputed rewrite
    members: tuple[SystemSpec, ...] = ()

    def __str__(self) -> str:
        if self.kind == "fusion":
            base = "rrf(" + ",".join(str(m) for m in self.members) + ")"
        elif self.kind == "dense":
            base = self.name if self.name in PRESETS else f"dense:{self.name}"
        else:
            base = self.name
        return base + (f"+{self.rewrite[0]}:{self.rewrite[1]}" if self.rewrite else "")

    @property
    def label(self) -> str:
        """A human name for charts and tables."""
        if self.kind == "fusion":
            base = "RRF(" + " + ".join(m.label for m in self.members) + ")"
        elif self.kind == "dense":
            base = PRESETS[self.name].label if self.name in PRESETS else self.name
        else:
            base = BM25_LABELS[self.name]
        return base + (f" + {self.rewrite[0]} ({self.rewrite[1]})" if self.rewrite else "")

    def with_rewrite(self, rewrite: tuple[str, str] | None) -> SystemSpec:
        """The same system with a (different) rewrite; fusion passes it to every member."""
        if self.kind == "fusion":
            return SystemSpec("fusion", members=tuple(m.with_rewrite(rewrite) for m in self.members))
        return SystemSpec(self.kind, self.name, rewrite, ())

    @property
    def base(self) -> SystemSpec:
        return self.with_rewrite(None)


def rewritten_name(system: str, rewrite: str) -> str:
    """The canonical name of ``system`` run on the ``"METHOD:LLM"`` rewrite (``""``: the system itself)."""
    if not rewrite:
        return str(parse_system(system))
    method, _, llm = rewrite.partition(":")
    return str(parse_system(system).with_rewrite((method, llm)))


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += (char == "(") - (char == ")")
        current += char
    parts.append(current)
    return [p.strip() for p in parts]


def parse_system(text: str) -> SystemSpec:
    """Parse a system name; raises ``SpecError`` with the accepted forms."""
    text = text.strip()
    if text.startswith("rrf(") and text.endswith(")"):
        members = tuple(parse_system(part) for part in _split_top_level(text[4:-1]))
        if len(members) < 2:
            raise SpecError("rrf(...) needs at least two systems, e.g. rrf(bm25,minilm)")
        return SystemSpec("fusion", members=members)
    rewrite = None
    if "+" in text:
        text, _, suffix = text.rpartition("+")
        method, _, llm = suffix.partition(":")
        if method not in REWRITE_METHODS or not llm:
            raise SpecError(f"rewrite {suffix!r} must be METHOD:LLM with METHOD one of {', '.join(REWRITE_METHODS)}")
        rewrite = (method, llm)
    if text in BM25_ENGINES:
        return SystemSpec("bm25", text, rewrite)
    if text.startswith("dense:") and len(text) > 6:
        return SystemSpec("dense", text[6:], rewrite)
    if text in PRESETS:
        return SystemSpec("dense", text, rewrite)
    raise SpecError(
        f"unknown system {text!r}: use bm25, bm25s, bm25-okapi, a dense preset "
        f"({', '.join(PRESETS)}), dense:<model id or path>, or rrf(A,B,...), optionally followed by "
        "+METHOD:LLM (e.g. bm25+hyde:gpt4)"
    )


# --------------------------------------------------------------------------- retrievers


def bm25_index_key(dataset: Dataset, alias: str) -> dict[str, Any]:
    """The disk-cache key of a corpus's BM25 index (so callers can ask whether it is built)."""
    return {
        "corpus": dataset.fingerprint,
        "params": BM25Retriever(engine=BM25_ENGINES[alias]).params,
        "analyzer": ANALYZER_VERSION,
        "version": RUN_FORMAT_VERSION,
    }


def bm25_retriever(dataset: Dataset, alias: str, progress: Progress | None = None) -> BM25Retriever:
    """The BM25 index of a corpus, from the disk cache when it was built before."""
    retriever = BM25Retriever(engine=BM25_ENGINES[alias])
    key = bm25_index_key(dataset, alias)

    def build(folder: Path) -> None:
        retriever.index(list(dataset.corpus), list(dataset.corpus.values()), progress)
        retriever.save(folder)

    return cached("bm25", key, build, BM25Retriever.load)


def _dense_model(dataset: Dataset, model_name: str) -> DenseModel:
    """The model as it runs on this dataset: prompts filled with the task family's instruction."""
    instruction = FAMILY_INSTRUCTIONS[dataset.family] if dataset.family else GENERIC_INSTRUCTION
    return resolve_model(model_name).with_instruction(instruction)


def dense_retriever(dataset: Dataset, model_name: str, progress: Progress | None = None) -> DenseRetriever:
    """A dense retriever with its corpus index loaded (encoded once, then cached on disk)."""
    retriever = DenseRetriever(_dense_model(dataset, model_name))
    retriever.index_corpus(list(dataset.corpus), list(dataset.corpus.values()), dataset.fingerprint, progress)
    return retriever


# --------------------------------------------------------------------------- queries


def rewritten_texts(dataset: Dataset, rewrite: tuple[str, str]) -> dict[str, str]:
    """The precomputed hypothetical documents of a rewrite; a clear error if the dataset lacks it."""
    if rewrite not in dataset.rewrites:
        available = ", ".join(f"{m}:{llm}" for m, llm in dataset.rewrite_options()) or "none"
        raise SpecError(f"{dataset.name} has no precomputed {rewrite[0]}:{rewrite[1]} rewrite (available: {available})")
    return dataset.rewrites[rewrite]


def retrieved_queries(dataset: Dataset, rewrite: tuple[str, str] | None) -> dict[str, str]:
    """The queries a system retrieves for, with the query text it uses.

    Without a rewrite: every query, as in the query file. With one, as the benchmark: only the
    queries the rewrite file holds (the others are not retrieved, so not evaluated), with the
    file's own ``text`` field as the query text.
    """
    if rewrite is None:
        return dict(dataset.queries)
    hy_docs = rewritten_texts(dataset, rewrite)
    texts = dataset.rewrite_queries.get(rewrite, {})
    return {qid: texts.get(qid, text) for qid, text in dataset.queries.items() if qid in hy_docs}


def queries_left_out(dataset: Dataset, rewrite: tuple[str, str] | None) -> int:
    """How many queries a rewrite leaves out (absent from its file: not retrieved, as in the benchmark)."""
    if rewrite is None or rewrite not in dataset.rewrites:
        return 0
    return len(dataset.queries) - len(retrieved_queries(dataset, rewrite))


def bm25_queries(dataset: Dataset, rewrite: tuple[str, str] | None) -> dict[str, str]:
    """Query strings for BM25, for the queries ``retrieved_queries`` names (official combination rules)."""
    queries = retrieved_queries(dataset, rewrite)
    if rewrite is None:
        return queries
    hy_docs = rewritten_texts(dataset, rewrite)
    return {qid: bm25_query(rewrite[0], rewrite[1], text, hy_docs[qid]) for qid, text in queries.items()}


def dense_query_vectors(
    retriever: DenseRetriever, dataset: Dataset, rewrite: tuple[str, str] | None, progress: Progress | None = None
) -> np.ndarray:
    """Query embeddings; with a rewrite, query2doc encodes one joined text, others average two."""
    qids = list(dataset.queries)
    if rewrite is None:
        return retriever.encode([dataset.queries[q] for q in qids], "query", progress)
    hy_docs = rewritten_texts(dataset, rewrite)
    plans = [
        dense_query(rewrite[0], rewrite[1], dataset.queries[q], hy_docs[q]).texts
        if q in hy_docs
        else (dataset.queries[q],)
        for q in qids
    ]
    flat = [text for plan in plans for text in plan]
    vectors = retriever.encode(flat, "query", progress)
    out, position = [], 0
    for plan in plans:
        out.append(vectors[position : position + len(plan)].mean(axis=0))
        position += len(plan)
    return np.vstack(out).astype(np.float32)


# --------------------------------------------------------------------------- running


def _run_key(dataset: Dataset, spec: SystemSpec, k: int) -> dict[str, Any]:
    key: dict[str, Any] = {
        "system": str(spec),
        "k": k,
        "corpus": dataset.fingerprint,
        "queries": fingerprint(dataset.queries),
        "version": RUN_FORMAT_VERSION,
        "analyzer": ANALYZER_VERSION,
    }
    if spec.rewrite:
        key["rewrite"] = fingerprint(
            dataset.rewrites.get(spec.rewrite, {}), dataset.rewrite_queries.get(spec.rewrite, {})
        )
    if spec.kind == "dense":
        # The model exactly as it runs (instruction filled in), so a changed prompt never reuses a run.
        key["model"] = DenseRetriever(_dense_model(dataset, spec.name)).cache_key(dataset.fingerprint)
    if spec.kind == "fusion":
        key["members"] = [_run_key(dataset, m, k) for m in spec.members]
    return key


def _compute(dataset: Dataset, spec: SystemSpec, k: int, progress: Progress | None) -> Run:
    started = time.perf_counter()
    if spec.kind == "fusion":
        runs = []
        for i, member in enumerate(spec.members):
            step = _scaled(progress, i / len(spec.members), (i + 1) / len(spec.members))
            runs.append(run_system(dataset, member, k=max(k, 100), progress=step))
        fused = reciprocal_rank_fusion(runs, str(spec), depth=k)
        return Run(fused.name, fused.rankings, time.perf_counter() - started)
    queries = retrieved_queries(dataset, spec.rewrite)
    qids = list(queries)
    if spec.kind == "bm25":
        retriever = bm25_retriever(dataset, spec.name, _scaled(progress, 0.0, 0.8))
        texts = bm25_queries(dataset, spec.rewrite)
        rankings = retriever.search([texts[q] for q in qids], k)
    else:
        dense = dense_retriever(dataset, spec.name, _scaled(progress, 0.0, 0.9))
        # with a rewrite, only the queries it holds, with its query text (the benchmark's rule)
        retrieved = replace(dataset, queries=queries) if spec.rewrite else dataset
        vectors = dense_query_vectors(dense, retrieved, spec.rewrite, _scaled(progress, 0.9, 1.0))
        rankings = dense.search_vectors(vectors, k)
    report(progress, 1.0, f"{spec.label}: done")
    return Run(str(spec), dict(zip(qids, rankings)), time.perf_counter() - started)


def _scaled(progress: Progress | None, low: float, high: float) -> Progress | None:
    """A callback mapping [0, 1] to [low, high] of the parent's bar."""
    if progress is None:
        return None
    return lambda fraction, message: progress(low + (high - low) * fraction, message)


def run_system(dataset: Dataset, spec: SystemSpec | str, k: int = 100, progress: Progress | None = None) -> Run:
    """Retrieve the top ``k`` for every query; cached on disk by dataset, system and k."""
    spec = parse_system(spec) if isinstance(spec, str) else spec

    if spec.rewrite:
        rewritten_texts(dataset, spec.rewrite)  # fail fast with a clear message
    result: dict[str, Run] = {}

    def build(folder: Path) -> None:
        run = _compute(dataset, spec, k, progress)
        payload = {"name": run.name, "seconds": run.seconds, "rankings": run.rankings}
        (folder / "run.json").write_text(json.dumps(payload), encoding="utf-8")
        result["run"] = run

    def load(folder: Path) -> Run:
        if "run" in result:
            return result["run"]
        payload = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        rankings = {qid: [(doc, float(score)) for doc, score in r] for qid, r in payload["rankings"].items()}
        return Run(payload["name"], rankings, payload["seconds"])

    return cached("runs", _run_key(dataset, spec, k), build, load)


# --------------------------------------------------------------------------- free-text queries

_LOADED: OrderedDict[tuple[str, str], Any] = OrderedDict()
_LOADED_MAX = 8


def _loaded_retriever(dataset: Dataset, spec: SystemSpec, progress: Progress | None) -> Any:
    """A retriever kept in memory for repeated free-text searches (its index comes from the disk cache)."""
    key = (dataset.fingerprint, str(spec.base))
    if key not in _LOADED:
        if spec.kind == "bm25":
            _LOADED[key] = bm25_retriever(dataset, spec.name, progress)
        else:
            _LOADED[key] = dense_retriever(dataset, spec.name, progress)
        while len(_LOADED) > _LOADED_MAX:
            _LOADED.popitem(last=False)
    _LOADED.move_to_end(key)
    return _LOADED[key]


def search_text(
    dataset: Dataset,
    spec: SystemSpec | str,
    text: str,
    k: int = 10,
    *,
    hy_doc: str | None = None,
    progress: Progress | None = None,
) -> Ranking:
    """Rank the corpus for a query typed by the user (the what-if page).

    A rewritten system (``+METHOD:LLM``) needs the hypothetical document for this text, generated
    live (``hy_doc``); it is combined with the query by the benchmark's rules, as for dataset queries.
    """
    spec = parse_system(spec) if isinstance(spec, str) else spec
    if spec.rewrite and hy_doc is None:
        raise SpecError(f"{spec.label} needs a hypothetical document for a typed query (a live LLM endpoint)")
    if spec.kind == "fusion":
        members = [
            Run(str(m), {"q": search_text(dataset, m, text, max(k, 100), hy_doc=hy_doc, progress=progress)})
            for m in spec.members
        ]
        return reciprocal_rank_fusion(members, str(spec), depth=k).top("q")
    retriever = _loaded_retriever(dataset, spec, progress)
    if spec.kind == "bm25":
        query = bm25_query(*spec.rewrite, text, hy_doc) if spec.rewrite else text
        return retriever.search([query], k)[0]
    texts = dense_query(*spec.rewrite, text, hy_doc).texts if spec.rewrite else (text,)
    vector = retriever.encode(list(texts), "query").mean(axis=0, keepdims=True)
    return retriever.search_vectors(vector, k)[0]
