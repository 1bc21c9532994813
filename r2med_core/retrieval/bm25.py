"""BM25 retrieval: the R2MED benchmark's own scoring, plus two labelled alternatives.

``engine="official"`` ("BM25 (R2MED official)") reproduces the benchmark's pipeline — Lucene
English-analyzer tokens and gensim ``LuceneBM25Model`` weighting — so its runs match the paper's:

* documents: ``idf · tf / (tf + k1·(1 − b + b·dl/avgdl))`` with
  ``idf = ln(1 + (N − df + 0.5)/(df + 0.5))`` — exactly bm25s's ``method="lucene"`` matrix, which
  is reused rather than re-implemented;
* queries: each *distinct* term gets the same formula with the query as the document,
  ``idf · qtf / (qtf + k1·(1 − b + b·|q|/avgdl))`` (``|q|`` = query tokens in the vocabulary), and
  a document's score is the dot product with its weights — so every term contributes idf², and a
  repeated query term saturates instead of counting twice;
* ties keep corpus order.

``query_length="all"`` is **query-side BM25 (BM25Q) as Anserini computes it** (its
``QuerySideBm25QueryGenerator``, ``SearchCollection -bm25.querySide``; Ge et al., "Lighting the Way
for BRIGHT", arXiv 2509.02558): the same query weight, but ``|q|`` counts every analysed query token,
also those no document holds (Anserini's ``tokens.size()``), where gensim counts only tokens in the
vocabulary. Anserini's other departures are not reproduced: Lucene's one-byte (lossy) document-length
norms, and ``N`` and ``avgdl`` over documents with at least one token (here over every document; they
differ only when a corpus has empty documents).

``engine="bm25s"`` is plain bm25s (its own regex tokenizer + Snowball stemmer, summing document
weights once per query token): fast, but its rankings differ from the official ones.
``engine="okapi"`` is rank_bm25's ``BM25Okapi`` over the Lucene tokens: the engine our design card
names, far slower, kept for comparison.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from r2med_core.progress import Progress, notify
from r2med_core.retrieval.tokenize import TokenIds, lucene_tokenize, tokenize_many, tokenize_to_ids

if TYPE_CHECKING:
    from rank_bm25 import BM25Okapi
    from scipy import sparse  # imported where it is used: a warm run that loads a cached run never needs it

__all__ = ["ENGINES", "QUERY_LENGTHS", "BM25Retriever", "lucene_weights"]

#: engine name -> label shown to users.
ENGINES: dict[str, str] = {
    "official": "BM25 (R2MED official)",
    "bm25s": "BM25 (bm25s fast default; alternative, not the paper's)",
    "okapi": "BM25 (rank_bm25 Okapi; comparison, slow)",
}

#: What ``|q|`` counts in the official engine's query weight -> what that is (module docstring).
QUERY_LENGTHS: dict[str, str] = {
    "vocabulary": "query tokens the corpus vocabulary holds (gensim's LuceneBM25Model, the benchmark's)",
    "all": "every analysed query token (Anserini's query-side BM25, -bm25.querySide)",
}

_FORMAT_VERSION = 1
_META, _DOC_IDS, _VOCAB, _MATRIX = "meta.json", "doc_ids.json", "vocab.json", "matrix.npz"
#: okapi: the documents' tokens (never a pickle: loading a cache must not run code), rebuilt on load.
_TOKENS = "okapi_tokens.npz"


def _scaled(progress: Progress | None, start: float, end: float) -> Progress | None:
    """Map a sub-task's 0..1 progress onto ``start..end`` of the caller's bar."""
    if progress is None:
        return None
    return lambda fraction, message: progress(start + (end - start) * fraction, message)


def _search_threads(workers: int | None, n_docs: int, n_queries: int) -> int:
    """Threads for a search: one per core on big corpora (below, threads only add overhead)."""
    if workers is None:
        if n_docs < _PARALLEL_SEARCH_DOCS:
            return 1
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(int(workers), n_queries))


_PARALLEL_SEARCH_DOCS = 20_000


@contextmanager
def _mapper(threads: int) -> Iterator[Callable[..., Iterator]]:
    """An ordered ``map``: the builtin, or a thread pool's."""
    if threads <= 1:
        yield map
        return
    with ThreadPoolExecutor(max_workers=threads) as pool:
        yield pool.map


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` best scores, best first, ties in corpus order.

    Equivalent to a stable sort of the whole vector but O(n): the k-th best value is found among
    the documents at or above a threshold guessed from every 16th score (a few hundred of them;
    the whole vector only when the guess leaves fewer than ``k``), and only documents at or above
    it are sorted.
    """
    n = scores.size
    k = min(k, n)
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    candidates = np.arange(n)
    if k < n:
        if n >= 64 * k:
            sample = scores[::_SAMPLE_STRIDE]
            rank = min(sample.size, 2 * -(-k // _SAMPLE_STRIDE) + 8)
            guess = np.partition(sample, sample.size - rank)[sample.size - rank]
            above = np.flatnonzero(scores >= guess)
            if above.size >= k:  # then the k best are all among them
                candidates = above
        values = scores[candidates]
        kth_best = np.partition(values, values.size - k)[values.size - k]
        candidates = candidates[values >= kth_best]
    order = np.argsort(-scores[candidates], kind="stable")
    return candidates[order[:k]]


_SAMPLE_STRIDE = 16


def lucene_weights(tokens: TokenIds, k1: float, b: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """bm25s's ``method="lucene"`` document-weight matrix (CSC ``data, indices, indptr``).

    Bit for bit what ``bm25s.BM25(k1, b, method="lucene").build_index_from_ids`` returns (the
    tests compare them), computed with bm25s's own idf and tf functions but vectorised: term
    counts come from one scipy sum of duplicates instead of a ``Counter`` per document, so a
    357k-document corpus takes seconds and no per-document Python objects.
    """
    import bm25s
    from bm25s.scoring import _build_idf_array, _select_idf_scorer, _select_tfc_scorer
    from scipy import sparse

    model = bm25s.BM25(k1=k1, b=b, method="lucene")
    n_docs, n_terms = len(tokens), len(tokens.terms)
    lengths = tokens.lengths
    avg_doc_len = lengths.mean()  # a numpy float64, exactly as bm25s computes it
    ones = np.ones(len(tokens.ids), dtype=model.dtype)
    # copy=True: summing duplicates sorts the ids in place, and they are the caller's.
    counts = sparse.csr_matrix((ones, tokens.ids, tokens.offsets), shape=(n_docs, n_terms), copy=True)
    del ones
    counts.sum_duplicates()  # one entry per (document, term): its term frequency
    df = np.bincount(counts.indices, minlength=n_terms)
    idf = _build_idf_array(dict(enumerate(df.tolist())), n_docs, _select_idf_scorer(model.idf_method), model.dtype)
    score_tfc = _select_tfc_scorer(model.method)
    row_nnz = np.diff(counts.indptr)
    # Blocks of documents bound the float64 temporaries; the arithmetic is bm25s's per-document
    # expression with the document length (an int there) broadcast per entry.
    for first in range(0, n_docs, _WEIGHT_BLOCK):
        last = min(n_docs, first + _WEIGHT_BLOCK)
        lo, hi = counts.indptr[first], counts.indptr[last]
        doc_len = np.repeat(lengths[first:last], row_nnz[first:last])
        tfc = score_tfc(
            tf_array=counts.data[lo:hi].astype(np.float64), l_d=doc_len, l_avg=avg_doc_len, k1=model.k1, b=model.b
        )
        counts.data[lo:hi] = idf[counts.indices[lo:hi]] * tfc
    by_term = counts.tocsc()
    del counts
    return by_term.data, by_term.indices.astype(model.int_dtype, copy=False), by_term.indptr.astype(np.int64)


_WEIGHT_BLOCK = 50_000


class BM25Retriever:
    """A BM25 index over one corpus; see the module docstring for the three engines."""

    def __init__(self, engine: str = "official", k1: float = 0.9, b: float = 0.4) -> None:
        if engine not in ENGINES:
            raise ValueError(f"unknown BM25 engine {engine!r}; valid engines: {', '.join(ENGINES)}")
        self.engine = engine
        self.k1 = float(k1)
        self.b = float(b)
        self._doc_ids: list[str] = []
        self._indexed = False
        # official / bm25s: bm25s's CSC document-weight matrix (documents × terms) and vocabulary.
        self._data = np.empty(0, dtype=np.float32)
        self._indices = np.empty(0, dtype=np.int32)
        self._indptr = np.zeros(1, dtype=np.int64)
        self._vocab: dict[str, int] = {}
        self._avgdl = 0.0
        self._idf = np.empty(0, dtype=np.float64)
        self._by_term: sparse.csr_matrix | None = None  # terms × documents, float64, for search
        # okapi
        self._okapi: BM25Okapi | None = None
        self._okapi_tokens: list[list[str]] = []

    # --- description -------------------------------------------------------------------------

    @property
    def params(self) -> dict:
        """Everything that changes the scores (for cache keys)."""
        return {"engine": self.engine, "k1": self.k1, "b": self.b}

    @property
    def label(self) -> str:
        """Human-readable engine name, e.g. "BM25 (R2MED official)"."""
        return ENGINES[self.engine]

    def __repr__(self) -> str:
        return f"BM25Retriever(engine={self.engine!r}, k1={self.k1}, b={self.b}, docs={len(self._doc_ids)})"

    # --- indexing ----------------------------------------------------------------------------

    def index(
        self,
        doc_ids: Sequence[str],
        texts: Sequence[str],
        progress: Progress | None = None,
        workers: int | None = None,
    ) -> None:
        """Build the index; ``doc_ids[i]`` names ``texts[i]`` (corpus order breaks ties).

        ``workers`` > 1 processes tokenize the corpus for the official engine (default: this process,
        which costs the least CPU; see :func:`~r2med_core.retrieval.tokenize.tokenize_to_ids`); the
        index is the same either way.
        """
        if len(doc_ids) != len(texts):
            raise ValueError(f"{len(doc_ids)} doc ids but {len(texts)} texts")
        self._indexed = False  # stays False if building fails half-way
        self._doc_ids = [str(d) for d in doc_ids]
        if self.engine == "official":
            token_ids = tokenize_to_ids(texts, workers=workers, progress=_scaled(progress, 0.0, 0.8))
            self._build_matrix(token_ids, progress)
        elif self.engine == "bm25s":
            import bm25s
            import Stemmer

            notify(progress, 0.0, "Tokenizing (bm25s)")
            tokenized = bm25s.tokenize(
                list(texts), stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False
            )
            terms = [""] * len(tokenized.vocab)
            for term, term_id in tokenized.vocab.items():
                terms[term_id] = term
            self._build_matrix(TokenIds.from_lists(tokenized.ids, terms), progress)
        else:
            from rank_bm25 import BM25Okapi

            tokens = tokenize_many(texts, progress=_scaled(progress, 0.0, 0.7))
            notify(progress, 0.7, "Building rank_bm25 index")
            self._okapi_tokens = tokens  # what save() stores: the engine is rebuilt from it on load
            has_tokens = any(tokens)  # rank_bm25 divides by zero on an empty corpus
            self._okapi = BM25Okapi(tokens, k1=self.k1, b=self.b) if has_tokens else None
        self._indexed = True
        notify(progress, 1.0, f"Indexed {len(self._doc_ids):,} documents")

    def _build_matrix(self, tokens: TokenIds, progress: Progress | None) -> None:
        """The Lucene document weights of bm25s ``method="lucene"``, as its CSC arrays."""
        notify(progress, 0.8, "Computing BM25 document weights")
        self._vocab = {term: i for i, term in enumerate(tokens.terms)}
        if not tokens.terms:  # nothing to score (no documents, or only stop words)
            self._avgdl = 0.0
            self._set_matrix(np.empty(0, np.float32), np.empty(0, np.int32), np.zeros(1, np.int64))
            return
        self._avgdl = float(tokens.lengths.mean())
        self._set_matrix(*lucene_weights(tokens, self.k1, self.b))

    def _set_matrix(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray) -> None:
        self._data = np.ascontiguousarray(data, dtype=np.float32)
        self._indices = np.ascontiguousarray(indices)
        self._indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        self._by_term = None  # built on the first search
        n_docs = len(self._doc_ids)
        df = np.diff(self._indptr).astype(np.float64)  # bm25s stores only tf > 0, so nnz = df
        self._idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))

    # --- search ------------------------------------------------------------------------------

    def search(
        self,
        queries: Sequence[str],
        k: int = 100,
        progress: Progress | None = None,
        workers: int | None = None,
        *,
        query_length: str = "vocabulary",
    ) -> list[list[tuple[str, float]]]:
        """Top ``k`` ``(doc_id, score)`` per query, best first.

        Documents scoring 0 still fill the list (in corpus order), as in the official runs — also
        for a query with no tokens at all, so it scores 0 in the averages instead of dropping out.
        On a large corpus ``workers`` threads (default: one per core) score queries side by side;
        scipy and numpy do the work without the GIL, and the results do not depend on it.
        ``query_length`` (official engine only): what ``|q|`` counts in the query weight, one of
        ``QUERY_LENGTHS`` ("all" is Anserini's query-side BM25; see the module docstring).
        """
        if not self._indexed:
            raise RuntimeError("BM25Retriever.search() called before index() or load()")
        if query_length not in QUERY_LENGTHS:
            raise ValueError(f"unknown query_length {query_length!r}; valid: {', '.join(QUERY_LENGTHS)}")
        if query_length != "vocabulary" and self.engine != "official":
            raise ValueError(f"query_length={query_length!r} weights queries as the official engine does")
        queries = list(queries)
        query_tokens = self._analyze_queries(queries)
        total = len(queries)

        def ranked(tokens: list[str]) -> list[tuple[str, float]]:
            if self.engine == "okapi":
                scores = self._okapi_scores(tokens)
            else:
                scores = self._matrix_scores(tokens, query_length)
            return [(self._doc_ids[j], float(scores[j])) for j in _top_k(scores, k).tolist()]

        n_threads = 1
        if self.engine != "okapi":
            self._search_matrix()  # built once, before any thread needs it
            n_threads = _search_threads(workers, len(self._doc_ids), total)
        step = max(1, total // 100)
        results: list[list[tuple[str, float]]] = []
        with _mapper(n_threads) as mapper:
            for i, result in enumerate(mapper(ranked, query_tokens)):
                if i % step == 0:
                    notify(progress, i / max(total, 1), f"Searching {i:,}/{total:,}")
                results.append(result)
        notify(progress, 1.0, f"Searched {total:,} queries")
        return results

    def _analyze_queries(self, queries: list[str]) -> list[list[str]]:
        """Query terms, analysed exactly as the documents were."""
        if self.engine != "bm25s":
            return [lucene_tokenize(q) for q in queries]
        if not queries:
            return []
        import bm25s
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
        return bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)

    def _query_weights(self, tokens: list[str], query_length: str) -> tuple[np.ndarray, np.ndarray]:
        """The query's distinct in-vocabulary term ids (ascending) and their weights (float64)."""
        counts = Counter(self._vocab[t] for t in tokens if t in self._vocab)
        terms = np.fromiter(sorted(counts), dtype=np.int64, count=len(counts))
        qtf = np.array([counts[t] for t in terms.tolist()], dtype=np.float64)
        if self.engine != "official" or not counts:  # bm25s sums the document weight once per query token
            return terms, qtf
        # In-vocabulary query tokens, as gensim counts them; or every token, as Anserini's BM25Q does.
        q_len = qtf.sum() if query_length == "vocabulary" else float(len(tokens))
        norm = self.k1 * (1.0 - self.b + self.b * q_len / self._avgdl)
        return terms, self._idf[terms] * qtf / (qtf + norm)

    def _matrix_scores(self, tokens: list[str], query_length: str) -> np.ndarray:
        """Dot product of the query weight vector with the document matrix (float64).

        scipy gathers the query's term rows and multiplies them by the weights in C, term by term
        in ascending id order, so every document's sum is taken in the same order every time.
        """
        terms, weights = self._query_weights(tokens, query_length)
        if not len(terms):
            return np.zeros(len(self._doc_ids))
        return self._search_matrix()[terms].T @ weights

    def _search_matrix(self) -> sparse.csr_matrix:
        """The document weights as terms × documents, float64 (the products are float64 either
        way; stored so, scipy skips converting the gathered rows on every query)."""
        if self._by_term is None:
            from scipy import sparse

            self._by_term = sparse.csr_matrix(
                (self._data.astype(np.float64), self._indices, self._indptr),
                shape=(len(self._vocab), len(self._doc_ids)),
            )
        return self._by_term

    def _okapi_scores(self, tokens: list[str]) -> np.ndarray:
        if self._okapi is None:
            return np.zeros(len(self._doc_ids))
        return np.asarray(self._okapi.get_scores(tokens), dtype=np.float64)

    # --- persistence -------------------------------------------------------------------------

    def save(self, directory: pathlib.Path) -> None:
        """Write the index as plain files into ``directory`` (which must exist)."""
        if not self._indexed:
            raise RuntimeError("nothing to save: call index() first")
        directory = pathlib.Path(directory)
        meta = {
            "format": _FORMAT_VERSION,
            **self.params,
            "n_docs": len(self._doc_ids),
            "n_terms": len(self._vocab),
            "avgdl": self._avgdl,
        }
        (directory / _META).write_text(json.dumps(meta), encoding="utf-8")
        (directory / _DOC_IDS).write_text(json.dumps(self._doc_ids, ensure_ascii=False), encoding="utf-8")
        if self.engine == "okapi":
            self._save_okapi(directory)
            return
        terms = [""] * len(self._vocab)
        for term, term_id in self._vocab.items():
            terms[term_id] = term
        (directory / _VOCAB).write_text(json.dumps(terms, ensure_ascii=False), encoding="utf-8")
        with open(directory / _MATRIX, "wb") as fh:
            np.savez(fh, data=self._data, indices=self._indices, indptr=self._indptr)

    @classmethod
    def load(cls, directory: pathlib.Path) -> BM25Retriever:
        """Read an index written by :meth:`save`; raises on missing or inconsistent files."""
        directory = pathlib.Path(directory)
        meta = json.loads((directory / _META).read_text(encoding="utf-8"))
        if meta.get("format") != _FORMAT_VERSION:
            raise ValueError(f"unsupported BM25 index format {meta.get('format')!r}")
        self = cls(engine=meta["engine"], k1=meta["k1"], b=meta["b"])
        doc_ids = json.loads((directory / _DOC_IDS).read_text(encoding="utf-8"))
        if not isinstance(doc_ids, list) or len(doc_ids) != meta["n_docs"]:
            raise ValueError("doc_ids.json does not match meta.json")
        self._doc_ids = [str(d) for d in doc_ids]
        if self.engine == "okapi":
            self._load_okapi(directory)
            self._indexed = True
            return self
        terms = json.loads((directory / _VOCAB).read_text(encoding="utf-8"))
        vocab = {term: i for i, term in enumerate(terms)}
        if len(vocab) != meta["n_terms"] or len(terms) != meta["n_terms"]:
            raise ValueError("vocab.json does not match meta.json")
        with np.load(directory / _MATRIX, allow_pickle=False) as arrays:
            data, indices, indptr = arrays["data"], arrays["indices"], arrays["indptr"]
        n_docs = len(doc_ids)
        if (
            indptr.ndim != 1
            or len(indptr) != len(vocab) + 1
            or indptr[0] != 0
            or indptr[-1] != len(data)
            or len(indices) != len(data)
            or np.any(np.diff(indptr) < 0)
            or (len(indices) and (indices.min() < 0 or indices.max() >= n_docs))
            or not np.all(np.isfinite(data))
        ):
            raise ValueError("matrix.npz is inconsistent")
        self._vocab = vocab
        self._avgdl = float(meta["avgdl"])
        self._set_matrix(data, indices, indptr)
        self._indexed = True
        return self

    def _save_okapi(self, directory: pathlib.Path) -> None:
        """rank_bm25's engine as plain arrays: a vocabulary and each document's token ids."""
        corpus = self._okapi_tokens
        vocab: dict[str, int] = {}
        ids = [vocab.setdefault(token, len(vocab)) for tokens in corpus for token in tokens]
        offsets = np.cumsum([0, *map(len, corpus)], dtype=np.int64)
        (directory / _VOCAB).write_text(json.dumps(list(vocab), ensure_ascii=False), encoding="utf-8")
        with open(directory / _TOKENS, "wb") as fh:
            np.savez(fh, ids=np.asarray(ids, dtype=np.int64), offsets=offsets)

    def _load_okapi(self, directory: pathlib.Path) -> None:
        """Rebuild rank_bm25's engine from the saved tokens (cheap next to tokenizing the corpus)."""
        from rank_bm25 import BM25Okapi

        terms = json.loads((directory / _VOCAB).read_text(encoding="utf-8"))
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            raise ValueError("vocab.json is not a list of terms")
        with np.load(directory / _TOKENS, allow_pickle=False) as arrays:
            ids, offsets = arrays["ids"], arrays["offsets"]
        n_docs = len(self._doc_ids)
        if (
            ids.ndim != 1
            or offsets.ndim != 1
            or len(offsets) != n_docs + 1
            or (n_docs and (offsets[0] != 0 or offsets[-1] != len(ids) or np.any(np.diff(offsets) < 0)))
            or (len(ids) and (ids.min() < 0 or ids.max() >= len(terms)))
        ):
            raise ValueError(f"{_TOKENS} is inconsistent")
        words = np.asarray(terms, dtype=object)[ids] if len(ids) else np.empty(0, dtype=object)
        corpus = [words[offsets[i] : offsets[i + 1]].tolist() for i in range(n_docs)]
        self._okapi_tokens = corpus
        self._okapi = BM25Okapi(corpus, k1=self.k1, b=self.b) if any(corpus) else None
