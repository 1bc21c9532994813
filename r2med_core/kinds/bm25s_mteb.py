"""``bm25s-mteb``: BM25 as MTEB's baseline ``mteb/baseline-bm25s`` (revision 0_3_0, mteb 2.18.1) runs it, so
the gap between MTEB's BM25 numbers on R2MED and the paper's can be reproduced on any loaded task and
browsed query by query in Compare and the explorer (which queries the Lucene pipeline wins, and why).

What MTEB's code does for an English task (``mteb/models/model_implementations/bm25.py``: ``BM25Search``
and ``BM25Tokenizer``), done here by calling bm25s the same way — never re-implemented:

* documents: ``"\\n".join([title, text])`` (R2MED's corpus has no titles: ``"\\n" + text``), tokenized by
  ``bm25s.tokenize`` with bm25s's English stop words (passed as a list) and PyStemmer's
  ``Stemmer.Stemmer("english")``;
* the index: ``bm25s.BM25()`` with its defaults (k1 1.5, b 0.75, method "lucene");
* queries: the same ``bm25s.tokenize`` call, then ``BM25.retrieve(tokens, k)``: a document's score sums
  its weights once per query token; documents that score 0 still fill the list, as in MTEB's run.

The benchmark's BM25 (``bm25``) uses Lucene's analyzer (Porter), k1 0.9, b 0.4 and gensim's query
weighting; this is not the benchmark's setting, and is labelled so. ``bm25s`` (another kind) keeps the
benchmark's k1/b with bm25s's tokens; this one is MTEB's whole pipeline.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r2med_core.cache import cached, entry_path
from r2med_core.data import Dataset
from r2med_core.kinds.base import (
    RUN_FORMAT_VERSION,
    Parse,
    SystemKind,
    SystemSpec,
    done,
    kept_loaded,
    register,
    retrieved_queries,
)
from r2med_core.progress import Progress, notify
from r2med_core.runs import Ranking, Run

if TYPE_CHECKING:
    import bm25s

NAME = "bm25s-mteb"
LABEL = "BM25 as MTEB's baseline-bm25s runs it (bm25s defaults; not the benchmark's setting)"
DIFFERENCE = (
    "bm25s as MTEB's baseline calls it (k1 1.5, b 0.75, bm25s's tokens with Snowball stemming and its English "
    "stop words, summed token weights), not the benchmark's Lucene analyzer, k1 0.9, b 0.4 and gensim weighting"
)
#: What MTEB's baseline is, for provenance and the index's cache key.
MTEB_BASELINE = {"model": "mteb/baseline-bm25s", "revision": "0_3_0", "mteb_version": "2.18.1"}
DOCS_PER_S = 5000.0  # bm25s tokenizing + indexing
_DOC_IDS = "doc_ids.json"


def _tokenize(texts: list[str]) -> Any:
    """``bm25s.tokenize`` exactly as MTEB's ``BM25Tokenizer`` calls it for English."""
    import bm25s
    import Stemmer
    from bm25s.tokenization import STOPWORDS_EN

    return bm25s.tokenize(texts, stopwords=list(STOPWORDS_EN), stemmer=Stemmer.Stemmer("english"), show_progress=False)


class MtebBM25:
    """A bm25s index of one corpus, built and searched as MTEB's baseline does."""

    def __init__(self, retriever: bm25s.BM25, doc_ids: list[str]) -> None:
        self.retriever = retriever
        self.doc_ids = doc_ids

    @classmethod
    def build(cls, doc_ids: list[str], texts: list[str], progress: Progress | None = None) -> MtebBM25:
        import bm25s

        notify(progress, 0.0, "Tokenizing (bm25s, as MTEB's baseline)")
        tokens = _tokenize(["\n".join(["", text]) for text in texts])
        notify(progress, 0.7, "Indexing (bm25s.BM25() defaults)")
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        return cls(retriever, doc_ids)

    def save(self, folder: Path) -> None:
        self.retriever.save(str(folder))
        (folder / _DOC_IDS).write_text(json.dumps(self.doc_ids, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> MtebBM25:
        import bm25s

        doc_ids = json.loads((folder / _DOC_IDS).read_text(encoding="utf-8"))
        if not isinstance(doc_ids, list) or not all(isinstance(d, str) for d in doc_ids):
            raise ValueError(f"{_DOC_IDS} is not a list of ids")
        return cls(bm25s.BM25.load(str(folder)), doc_ids)

    def search(self, texts: list[str], k: int) -> list[Ranking]:
        """The top ``k`` per text, as ``BM25.retrieve`` returns them (zero scores included)."""
        if not texts or not self.doc_ids:
            return [[] for _ in texts]
        documents, scores = self.retriever.retrieve(_tokenize(texts), k=min(k, len(self.doc_ids)), show_progress=False)
        return [
            [(self.doc_ids[int(i)], float(s)) for i, s in zip(row, values, strict=True)]
            for row, values in zip(documents, scores, strict=True)
        ]


def _index_key(dataset: Dataset) -> dict[str, Any]:
    import bm25s

    return {"corpus": dataset.fingerprint, "engine": NAME, "bm25s": bm25s.__version__, "version": RUN_FORMAT_VERSION}


def mteb_bm25(dataset: Dataset, progress: Progress | None = None) -> MtebBM25:
    """The corpus's index, from the disk cache when it was built before."""

    def build(folder: Path) -> None:
        MtebBM25.build(list(dataset.corpus), list(dataset.corpus.values()), progress).save(folder)

    return cached("bm25", _index_key(dataset), build, MtebBM25.load)


@register
class BM25sMtebKind(SystemKind):
    name = NAME
    grammar = "bm25s-mteb (BM25 as MTEB's baseline-bm25s runs it)"
    priority = 90
    typed_text = True
    cache_kinds = ("bm25",)
    holds_gil = True  # bm25s's tokenizer is Python

    def parse(self, text: str, parse: Parse) -> SystemSpec | None:
        return SystemSpec(self.name, NAME) if text == NAME else None

    def format(self, spec: SystemSpec) -> str:
        return NAME

    def label(self, spec: SystemSpec) -> str:
        return LABEL

    def key_parts(self, dataset: Dataset, spec: SystemSpec, k: int) -> dict[str, Any]:
        return _index_key(dataset)

    def compute(self, dataset: Dataset, spec: SystemSpec, k: int, progress: Progress | None) -> Run:
        started = time.perf_counter()
        queries = retrieved_queries(dataset, None)
        index = mteb_bm25(dataset, progress)
        qids = list(queries)
        rankings = index.search([queries[q] for q in qids], k)
        done(progress, spec)
        return Run(str(spec), dict(zip(qids, rankings, strict=True)), time.perf_counter() - started)

    def search(
        self, dataset: Dataset, spec: SystemSpec, text: str, k: int, hy_doc: str | None, progress: Progress | None
    ) -> Ranking:
        index = kept_loaded(dataset, spec, lambda: mteb_bm25(dataset, progress))
        return index.search([text], k)[0]

    def published_kind(self, spec: SystemSpec) -> str | None:
        return "bm25"

    def differences(self, spec: SystemSpec, dataset_name: str | None) -> list[str]:
        return [DIFFERENCE]

    def estimate_seconds(self, dataset: Dataset, spec: SystemSpec, k: int) -> float:
        built = (entry_path("bm25", _index_key(dataset)) / "manifest.json").is_file()
        return (0.0 if built else len(dataset.corpus) / DOCS_PER_S) + 0.2
