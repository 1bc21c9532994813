"""What the query explorer shows, computed without any UI: tables of queries, gold documents,
retrieved documents, the effect of a rewrite per gold document, and safe term highlighting.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

from .data import Dataset
from .evaluation import Results
from .report import metric_label
from .retrieval.tokenize import lucene_tokenize
from .runs import Run

_WORD = re.compile(r"\w+(?:[.'’]\w+)*")


@lru_cache(maxsize=200_000)
def _stems(word: str) -> frozenset[str]:
    return frozenset(lucene_tokenize(word))


@lru_cache(maxsize=4096)  # the explorer asks again for the same documents on every rerun
def query_terms(text: str) -> frozenset[str]:
    """The analysed terms (stop words removed, stemmed) a BM25 query would use."""
    return frozenset(lucene_tokenize(text))


def highlight(text: str, terms: frozenset[str]) -> str:
    """HTML of ``text`` with words whose stem is in ``terms`` wrapped in <mark>.

    Every piece of the text is escaped before any markup is added, so dataset or LLM text can never
    inject HTML or script.
    """
    out: list[str] = []
    position = 0
    for match in _WORD.finditer(text):
        out.append(html.escape(text[position : match.start()]))
        word = html.escape(match.group())
        out.append(f"<mark>{word}</mark>" if _stems(match.group()) & terms else word)
        position = match.end()
    out.append(html.escape(text[position:]))
    return "".join(out).replace("\n", "<br>")


def overlap(text: str, terms: frozenset[str]) -> list[str]:
    """The query terms a document shares with the query, sorted."""
    return sorted(query_terms(text) & terms)


QUERY_TABLE_COLUMNS = ["query_id", "query", "ndcg_at_10", "recall_at_100", "gold", "gold_missed", "best_gold_rank"]


def shorten(text: str, width: int) -> str:
    """One line of at most ``width`` characters, cut at a word boundary with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    return flat[: width - 1].rsplit(" ", 1)[0] + "…"


def shared_with_gold(dataset: Dataset, query_id: str, text: str | None = None) -> frozenset[str]:
    """Terms of ``text`` (the query by default) that occur in at least one gold document: the lexical
    bridge BM25 can use."""
    terms = query_terms(dataset.queries[query_id] if text is None else text)
    found: set[str] = set()
    for doc_id in dataset.positives(query_id):
        if doc_id in dataset.corpus:  # qrels may name documents the corpus lacks (kept, as the benchmark does)
            found |= terms & query_terms(dataset.corpus[doc_id])
    return frozenset(found)


def query_table(dataset: Dataset, results: Results, run: Run, depth: int = 100) -> pd.DataFrame:
    """One row per judged query: its metrics, how many gold documents it has and how many were missed."""
    rows = []
    for qid, text in dataset.queries.items():
        gold = dataset.positives(qid)
        if not gold:
            continue
        ranks = [run.rank_of(qid, doc) for doc in gold]
        missed = sum(1 for r in ranks if r is None or r > depth)
        metrics = results.per_query.loc[qid] if qid in results.per_query.index else None
        rows.append(
            {
                "query_id": qid,
                "query": " ".join(text.split())[:160],
                "ndcg_at_10": float(metrics["ndcg_at_10"]) if metrics is not None else 0.0,
                "recall_at_100": float(metrics["recall_at_100"]) if metrics is not None else 0.0,
                "gold": len(gold),
                "gold_missed": missed,
                "best_gold_rank": min((r for r in ranks if r is not None), default=None),
            }
        )
    return pd.DataFrame(rows, columns=QUERY_TABLE_COLUMNS)


def filter_queries(
    table: pd.DataFrame, *, failures_only: bool = False, missed_gold: bool = False, search: str = ""
) -> pd.DataFrame:
    """The explorer's filters: nDCG@10 = 0, a gold document outside the top 100, text search."""
    out = table
    if failures_only:
        out = out[out["ndcg_at_10"] == 0]
    if missed_gold:
        out = out[out["gold_missed"] > 0]
    if search.strip():
        needle = search.strip().lower()
        out = out[out["query"].str.lower().str.contains(needle, regex=False) | (out["query_id"].str.lower() == needle)]
    return out


@dataclass(frozen=True)
class GoldRow:
    doc_id: str
    grade: int
    rank: int | None
    rank_with_rewrite: int | None = None
    rank_reranked: int | None = None

    @property
    def rewrite_effect(self) -> str:
        """How the rewrite moved this gold document: rescued, lost, up, down or unchanged."""
        before, after = self.rank, self.rank_with_rewrite
        if before is None and after is None:
            return "missed by both"
        if before is None:
            return "rescued"
        if after is None:
            return "lost"
        if after < before:
            return f"up {before - after}"
        if after > before:
            return f"down {after - before}"
        return "unchanged"


def gold_rows(
    dataset: Dataset, run: Run, query_id: str, rewritten: Run | None = None, reranked: Run | None = None
) -> list[GoldRow]:
    """The query's gold documents with their rank in ``run``, in the rewritten run and after reranking."""
    return [
        GoldRow(
            doc,
            grade,
            run.rank_of(query_id, doc),
            rewritten.rank_of(query_id, doc) if rewritten else None,
            reranked.rank_of(query_id, doc) if reranked else None,
        )
        for doc, grade in dataset.positives(query_id).items()
    ]


def gold_frame(rows: list[GoldRow], with_rewrite: bool, with_rerank: bool = False) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "document": [r.doc_id for r in rows],
            "grade": [r.grade for r in rows],
            "rank": [rank_text(r.rank) for r in rows],
        }
    )
    if with_rewrite:
        frame["with rewrite"] = [rank_text(r.rank_with_rewrite) for r in rows]
        frame["effect"] = [r.rewrite_effect for r in rows]
    if with_rerank:
        frame["after rerank"] = [rank_text(r.rank_reranked) for r in rows]
    return frame


def rank_text(rank: int | None, depth: int = 100) -> str:
    """A rank as shown to users: the number, or "not in top 100"."""
    return str(rank) if rank is not None and rank <= depth else f"not in top {depth}"


def retrieved_frame(dataset: Dataset, run: Run, query_id: str, k: int = 10) -> pd.DataFrame:
    """The top-k of a run for one query, with gold marks and grades."""
    gold = dataset.positives(query_id)
    rows = [
        {
            "rank": rank,
            "document": doc,
            "score": round(score, 3),
            "gold": f"✓ grade {gold[doc]}" if doc in gold else "",
        }
        for rank, (doc, score) in enumerate(run.top(query_id, k), start=1)
    ]
    return pd.DataFrame(rows, columns=["rank", "document", "score", "gold"])


def per_query_delta(a: Results, b: Results, metric: str = "ndcg_at_10") -> pd.DataFrame:
    """Per-query metric of two systems and the difference B − A, largest gains first."""
    joined = pd.concat(
        [a.per_query[metric].rename("a"), b.per_query[metric].rename("b")], axis=1, join="inner"
    ).dropna()
    joined["delta"] = joined["b"] - joined["a"]
    joined.index.name = "query_id"
    return joined.sort_values("delta", ascending=False)


def rewrite_outcomes(delta: pd.DataFrame) -> dict[str, int]:
    """How many queries a rewrite helped, hurt or left unchanged (from ``per_query_delta``)."""
    return {
        "helped": int((delta["delta"] > 0).sum()),
        "hurt": int((delta["delta"] < 0).sum()),
        "unchanged": int((delta["delta"] == 0).sum()),
    }


def llm_spread(
    by_llm: dict[str, Results],
    query_id: str,
    without: Results | None = None,
    metrics: tuple[str, ...] = ("ndcg_at_10", "recall_at_100"),
) -> pd.DataFrame:
    """One query's scores under each LLM's rewrite (and without any): rows of (llm, metric, value)."""
    sources = ({"no rewrite": without} if without is not None else {}) | by_llm
    rows = [
        {"llm": llm, "metric": metric_label(metric), "value": float(results.per_query.loc[query_id, metric])}
        for llm, results in sources.items()
        if query_id in results.per_query.index
        for metric in metrics
    ]
    return pd.DataFrame(rows, columns=["llm", "metric", "value"])
