"""What the query explorer shows, computed without any UI: tables of queries, gold documents,
retrieved documents, the effect of a rewrite per gold document, and safe term highlighting.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import pandas as pd
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from r2med_core.data import Dataset
from r2med_core.evaluation import PairedTest, Results, metric_label, metric_meaning
from r2med_core.judging.annotations import grade_words
from r2med_core.retrieval.tokenize import lucene_tokenize
from r2med_core.runs import Run

_WORD = re.compile(r"\w+(?:[.'’]\w+)*")

#: Words never highlighted: scikit-learn's English stop words (a wider list than Lucene's 33), minus a few
#: that carry clinical meaning, plus the filler of case reports ("A 67-year-old man presents with …").
_KEEP = frozenset(
    "system serious side back front bottom top full empty thick thin fire cry fill move well first third "
    "less more up down".split()
)
_FILLER = frozenset(
    "patient patients year years old month months week weeks day days presents presented presenting "
    "present following likely history shows showed reports reported complains noted diagnosis question "
    "answer case man woman boy girl "
    # function verbs scikit-learn's list lacks: "did not respond", "started adding" share no meaning
    "did does doing done started starting began begun became got gets went came".split()
)
FILLER_WORDS: frozenset[str] = (ENGLISH_STOP_WORDS - _KEEP) | _FILLER


@lru_cache(maxsize=200_000)
def _stems(word: str) -> frozenset[str]:
    return frozenset(lucene_tokenize(word))


@lru_cache(maxsize=200_000)
def _content_stems(word: str) -> frozenset[str]:
    """The stems of a word worth highlighting (none for a stop or filler word, or a bare number)."""
    lowered = word.lower()
    if lowered.isdigit() or lowered in FILLER_WORDS or any(p in FILLER_WORDS for p in re.split(r"[.'’]", lowered)):
        return frozenset()
    return _stems(word)


@lru_cache(maxsize=4096)  # the explorer asks again for the same documents on every rerun
def query_terms(text: str) -> frozenset[str]:
    """The analysed terms (stemmed) of the words worth highlighting: stop and filler words left out."""
    found: set[str] = set()
    for match in _WORD.finditer(text):
        found |= _content_stems(match.group())
    return frozenset(found)


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
        out.append(f"<mark>{word}</mark>" if _content_stems(match.group()) & terms else word)
        position = match.end()
    out.append(html.escape(text[position:]))
    return "".join(out).replace("\n", "<br>")


def overlap(text: str, terms: frozenset[str]) -> list[str]:
    """The words of ``text`` it shares with the query, as written there (not stems), first use of each
    word, sorted case-insensitively."""
    seen: dict[str, str] = {}
    for match in _WORD.finditer(text):
        word = match.group()
        if word.lower() not in seen and _content_stems(word) & terms:
            seen[word.lower()] = word
    return sorted(seen.values(), key=str.lower)


def preview(text: str, width: int = 140) -> str:
    """A one-line preview of a document under its id."""
    return shorten(text, width) if text else "(not in the corpus)"


#: The metrics the explorer shows for one query.
QUERY_METRICS: tuple[str, ...] = ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr")

#: One-line explanations of the words the explorer uses, for tooltips and the glossary.
GLOSSARY: dict[str, str] = {
    "gold": "A document the benchmark's judges marked relevant to the query (its qrels).",
    "grade": "How relevant the judges found a gold document: 1 relevant, 2 (if used) highly relevant.",
    "HyDE": "Hypothetical Document Embeddings: an LLM first writes an answer-like passage, and the system "
    "searches with that passage instead of (or with) the query.",
    **{metric_label(m): metric_meaning(m).capitalize() + "." for m in QUERY_METRICS},
    "rank": "Position of a document in the ranking shown (1 = top); 'not in top 100' when not retrieved.",
}


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
        rows.append(
            {
                "query_id": qid,
                "query": " ".join(text.split())[:160],
                "ndcg_at_10": float(results.per_query["ndcg_at_10"].get(qid, 0.0)),
                "recall_at_100": float(results.per_query["recall_at_100"].get(qid, 0.0)),
                "gold": len(gold),
                "gold_missed": missed,
                "best_gold_rank": min((r for r in ranks if r is not None), default=None),
            }
        )
    return pd.DataFrame(rows, columns=QUERY_TABLE_COLUMNS)


def mask_blind(table: pd.DataFrame, blind_ids: Iterable[str]) -> pd.DataFrame:
    """The query table as someone labelling blind may see it: for the queries they have not labelled yet
    only the id and text; every other cell (scores, gold counts, ranks, and any column added later) is
    left empty, so the table cannot tell them which queries fail. Score filters then skip those rows."""
    hidden = table["query_id"].isin(set(blind_ids))
    if not hidden.any():
        return table
    out = table.copy()
    for column in out.columns:
        if column in ("query_id", "query"):
            continue
        numeric = pd.api.types.is_numeric_dtype(out[column])
        out[column] = out[column].astype("float64" if numeric else "object")
        out.loc[hidden, column] = float("nan") if numeric else None
    return out


def step(ids: list[str], current: str, offset: int) -> str | None:
    """The query ``offset`` places from ``current`` in ``ids`` (wrapping); when ``current`` is not in
    ``ids`` (the filters hide it), Next opens the first and Previous the last. None when ``ids`` is empty."""
    if not ids:
        return None
    if current not in ids:
        return ids[0] if offset > 0 else ids[-1]
    return ids[(ids.index(current) + offset) % len(ids)]


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
            "preview": preview(dataset.corpus.get(doc, ""), 90),
        }
        for rank, (doc, score) in enumerate(run.top(query_id, k), start=1)
    ]
    return pd.DataFrame(rows, columns=["rank", "document", "score", "gold", "preview"])


def side_by_side(dataset: Dataset, runs: dict[str, Run], query_id: str, k: int = 10) -> pd.DataFrame:
    """Two or more systems' top k for one query next to each other, one row per rank: each system's
    document with ✓ when it is gold (and its grade), so where each one finds or misses them reads across."""
    gold = dataset.positives(query_id)
    rows = []
    for rank in range(1, k + 1):
        row: dict[str, object] = {"rank": rank}
        for label, run in runs.items():
            top = run.top(query_id, k)
            doc = top[rank - 1][0] if rank <= len(top) else ""
            row[label] = f"✓ {doc} (grade {gold[doc]})" if doc in gold else doc
        rows.append(row)
    return pd.DataFrame(rows, columns=["rank", *runs])


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
        {"llm": llm, "metric": metric_label(metric), "value": float(results.per_query[metric][query_id])}
        for llm, results in sources.items()
        if query_id in results.per_query.index
        for metric in metrics
    ]
    return pd.DataFrame(rows, columns=["llm", "metric", "value"])


def verdict(test: PairedTest, metric_name: str, alpha: float = 0.05) -> str:
    """A plain sentence for one paired comparison, on the randomization test's p-value (Holm-corrected
    when several systems are compared with the baseline)."""
    holm = test.randomization_pvalue_holm is not None
    p = test.randomization_pvalue_holm if holm else test.randomization_pvalue
    where = " after Holm" if holm else ""
    if p is not None and p < alpha and test.delta != 0:
        direction = "better" if test.delta > 0 else "worse"
        return f"significantly {direction} on {metric_name} (Δ {test.delta:+.3f}, p = {p:.3g}{where})"
    return f"no significant difference on {metric_name} (Δ {test.delta:+.3f}, p = {p:.3g}{where})"


def axis_range(values: pd.Series | list[float], pad: float = 0.05) -> list[float]:
    """A plot axis that fits the data with a margin (never a fixed 0–1 that squeezes small scores)."""
    series = pd.Series(values, dtype=float).dropna()
    if series.empty:
        return [0.0, 1.0]
    low, high = float(series.min()), float(series.max())
    margin = max((high - low) * pad, 0.01)
    return [low - margin, high + margin]


# --------------------------------------------------------------------------- why a wrong document won


@dataclass(frozen=True)
class Contrast:
    """The top wrong document against the best-placed missed gold document of one query, told by the
    words each shares with the query and, for the gold one, with the reference answer: why the wrong
    one won, without an LLM.

    ``winner``: the highest-ranked document that is not gold; ``loser``: the best-ranked gold document
    outside the top ``depth`` (rank None: not retrieved at all). Words are as written in each document.
    """

    query_id: str
    winner: str
    winner_rank: int
    winner_words: tuple[str, ...]
    loser: str
    loser_rank: int | None
    loser_words: tuple[str, ...]
    #: Words the gold document shares with the reference answer but not with the query: the bridge a
    #: reasoning step would have to build (empty without a reference answer).
    bridge_words: tuple[str, ...]
    has_answer: bool

    def sentences(self, depth: int = 10) -> list[str]:
        """What a reader should take from the contrast, in words."""
        where = f"rank {self.loser_rank}" if self.loser_rank is not None else "not in the top 100"
        out = [
            f"The top wrong document, {self.winner} (rank {self.winner_rank}), shares "
            f"{len(self.winner_words)} words with the question; the gold document {self.loser} ({where}) "
            f"shares {len(self.loser_words)}."
        ]
        if self.bridge_words:
            words = _listed(list(self.bridge_words))
            out.append(
                f"The gold document shares {len(self.bridge_words)} words with the reference answer that the "
                f"question lacks ({words}): the link runs through the answer, which the question never states."
            )
        elif self.has_answer:
            out.append("The gold document shares no further words with the reference answer either.")
        return out


def _listed(words: list[str], most: int = 8) -> str:
    return ", ".join(words[:most]) + ("…" if len(words) > most else "")


def relevance_from_data(dataset: Dataset, query_id: str, doc_id: str) -> list[str]:
    """Why a gold document is relevant, told from the data alone (no LLM): the query's reference answer
    and the words linking the document to it and to the question. Works offline on any task; the words
    are evidence a reader weighs, not a model's reasoning."""
    question = query_terms(dataset.queries[query_id])
    text = dataset.corpus.get(doc_id, "")
    grade = dataset.qrels.get(query_id, {}).get(doc_id)
    out = [f"The benchmark's judges gave it {grade_words(grade)}."] if grade else []
    answer = dataset.query_meta.get(query_id, {}).get("answer")
    if isinstance(answer, str) and answer.strip():
        out.append(f"The question's reference answer: “{shorten(answer, 220)}”")
        bridge = overlap(text, query_terms(answer) - question)
        if bridge:
            out.append(
                f"The document shares {len(bridge)} words with the answer that the question never uses "
                f"({_listed(bridge)}): the link runs through the answer."
            )
        else:
            out.append("The document shares no words with the answer beyond the question's.")
    else:
        out.append("This task gives no reference answer for the question.")
    shared = overlap(text, question)
    out.append(
        f"With the question itself it shares {len(shared)} words ({_listed(shared)})."
        if shared
        else "It shares no words with the question itself."
    )
    return out


def contrast(dataset: Dataset, run: Run, query_id: str, depth: int = 10) -> Contrast | None:
    """The contrast for one query, or None when no gold document is outside the top ``depth`` or the
    run has no wrong document to set against it."""
    gold = dataset.positives(query_id)
    outside = [d for d in gold if (r := run.rank_of(query_id, d)) is None or r > depth]
    winner = next(((rank, doc) for rank, (doc, _) in enumerate(run.top(query_id), 1) if doc not in gold), None)
    if not outside or winner is None:
        return None
    loser = min(outside, key=lambda d: (run.rank_of(query_id, d) or 10_000, d))
    question = query_terms(dataset.queries[query_id])
    answer = dataset.query_meta.get(query_id, {}).get("answer")
    answered = isinstance(answer, str) and bool(answer.strip())
    answer_terms = query_terms(answer) - question if answered else frozenset()
    winner_text, loser_text = dataset.corpus.get(winner[1], ""), dataset.corpus.get(loser, "")
    return Contrast(
        query_id=query_id,
        winner=winner[1],
        winner_rank=winner[0],
        winner_words=tuple(overlap(winner_text, question)),
        loser=loser,
        loser_rank=run.rank_of(query_id, loser),
        loser_words=tuple(overlap(loser_text, question)),
        bridge_words=tuple(overlap(loser_text, answer_terms)),
        has_answer=answered,
    )
