"""BM25: ``bm25`` (the benchmark's analyzer and weighting), ``bm25s``, ``bm25-okapi``; ``+METHOD:LLM``
retrieves with a precomputed rewrite combined with the query by the benchmark's rules."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

from r2med_core.cache import cached, entry_path
from r2med_core.data import Dataset
from r2med_core.kinds.base import (
    RUN_FORMAT_VERSION,
    Parse,
    Rewrite,
    SystemKind,
    SystemSpec,
    done,
    kept_loaded,
    register,
    retrieved_queries,
    rewritten_texts,
    scaled,
    split_rewrite,
)
from r2med_core.llm.rewrite import bm25_query
from r2med_core.progress import Progress
from r2med_core.retrieval.bm25 import BM25Retriever
from r2med_core.retrieval.tokenize import ANALYZER_VERSION
from r2med_core.runs import Ranking, Run

BM25_ENGINES: dict[str, str] = {"bm25": "official", "bm25s": "bm25s", "bm25-okapi": "okapi"}
BM25_LABELS: dict[str, str] = {
    "bm25": "BM25 (R2MED official)",
    "bm25s": "BM25 (bm25s default tokenizer)",
    "bm25-okapi": "BM25 Okapi (rank_bm25)",
}
_DIFFERENCES = {
    "bm25s": "bm25s's own tokenizer and query weighting, not the benchmark's Lucene analyzer and gensim weighting",
    "bm25-okapi": "rank_bm25's BM25Okapi, not the benchmark's BM25 (Lucene analyzer, gensim LuceneBM25Model)",
}

BM25_DOCS_PER_S = 3000.0  # tokenising + indexing (official analyzer)
OKAPI_PAIRS_PER_S = 2.0e6  # rank_bm25 scores every document for every query in Python


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


def bm25_queries(dataset: Dataset, rewrite: Rewrite | None) -> dict[str, str]:
    """Query strings for BM25, for the queries ``retrieved_queries`` names (official combination rules)."""
    queries = retrieved_queries(dataset, rewrite)
    if rewrite is None:
        return queries
    hy_docs = rewritten_texts(dataset, rewrite)
    return {qid: bm25_query(rewrite[0], rewrite[1], text, hy_docs[qid]) for qid, text in queries.items()}


def search_bm25(retriever: BM25Retriever, texts: list[str], k: int, query_length: str = "vocabulary") -> list[Ranking]:
    """The engine's rankings, except that a query with no term in the corpus retrieves nothing: the
    engine pads with zero-score documents in corpus order (as the official run does), which on a
    small corpus would "find" everything. ``query_length``: see ``BM25Retriever.search``."""
    rankings = retriever.search(texts, k, query_length=query_length)
    return [ranking if ranking and ranking[0][1] > 0 else [] for ranking in rankings]


@register
class BM25Kind(SystemKind):
    name = "bm25"
    grammar = "bm25, bm25s or bm25-okapi (BM25), optionally followed by +METHOD:LLM (e.g. bm25+hyde:gpt4)"
    priority = 90
    typed_text = True
    cache_kinds = ("bm25",)  # its index (``bm25_retriever``)
    holds_gil = True  # the Lucene analyzer and bm25s's tokenizer are Python
    #: What ``|q|`` counts in the official engine's query weight (``retrieval.bm25.QUERY_LENGTHS``).
    query_length: ClassVar[str] = "vocabulary"

    def parse(self, text: str, parse: Parse) -> SystemSpec | None:
        core, rewrite = split_rewrite(text)
        return SystemSpec(self.name, core, rewrite) if core in BM25_ENGINES else None

    def index_alias(self, spec: SystemSpec) -> str:
        """The ``BM25_ENGINES`` alias whose cached index it searches."""
        return spec.name

    def format(self, spec: SystemSpec) -> str:
        return spec.name

    def label(self, spec: SystemSpec) -> str:
        return BM25_LABELS[spec.name]

    def with_rewrite(self, spec: SystemSpec, rewrite: Rewrite | None) -> SystemSpec:
        return SystemSpec(self.name, spec.name, rewrite)

    def compute(self, dataset: Dataset, spec: SystemSpec, k: int, progress: Progress | None) -> Run:
        started = time.perf_counter()
        qids = list(retrieved_queries(dataset, spec.rewrite))
        retriever = bm25_retriever(dataset, self.index_alias(spec), scaled(progress, 0.0, 0.8))
        texts = bm25_queries(dataset, spec.rewrite)
        rankings = search_bm25(retriever, [texts[q] for q in qids], k, self.query_length)
        done(progress, spec)
        return Run(str(spec), dict(zip(qids, rankings)), time.perf_counter() - started)

    def search(
        self, dataset: Dataset, spec: SystemSpec, text: str, k: int, hy_doc: str | None, progress: Progress | None
    ) -> Ranking:
        retriever = kept_loaded(dataset, spec, lambda: bm25_retriever(dataset, self.index_alias(spec), progress))
        query = bm25_query(*spec.rewrite, text, hy_doc or "") if spec.rewrite else text
        return retriever.search([query], k, query_length=self.query_length)[0]

    def published_kind(self, spec: SystemSpec) -> str | None:
        return "bm25"

    def differences(self, spec: SystemSpec, dataset_name: str | None) -> list[str]:
        return [_DIFFERENCES[spec.name]] if spec.name in _DIFFERENCES else []

    def estimate_seconds(self, dataset: Dataset, spec: SystemSpec, k: int) -> float:
        n_docs, n_queries = len(dataset.corpus), len(dataset.queries)
        if spec.name == "bm25-okapi":
            return n_docs / BM25_DOCS_PER_S + n_docs * n_queries / OKAPI_PAIRS_PER_S
        indexed = (entry_path("bm25", bm25_index_key(dataset, self.index_alias(spec))) / "manifest.json").is_file()
        return (0.0 if indexed else n_docs / BM25_DOCS_PER_S) + 0.2
