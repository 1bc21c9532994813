"""Pooling and holes: which top-ranked documents nobody judged, and what judging them changes.

R2MED's judgements come from its construction, not from pooling the systems evaluated here, so a new
system's top 10 can rest on *holes* (documents without any judgement) that the metrics count as not
relevant. As in TREC, ``pool`` takes the union of the top ``depth`` of chosen systems and keeps the
unjudged documents, remembering which systems retrieved each. ``judging.JudgingQueue`` holds the pools
sent for judging; annotators grade them blind (query and document only), and their grades count as
``team`` says. ``scores_with_team`` scores each system with the original and the team's qrels, and
``compare_with_team`` shows each system's metric and rank without and with the
team's judgements (``team.team_qrels``) next to Judged@k (ir_measures), so a user sees which scores rest
on holes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import ir_measures
import pandas as pd

from r2med_core.data import DataError, Problem
from r2med_core.evaluation import MAIN_METRICS, evaluate, metric_label, metric_meaning
from r2med_core.judging.annotations import Qrels
from r2med_core.runs import Run

#: The pool depth TREC-style pooling uses most, and the cutoff Judged@k is shown at.
DEFAULT_DEPTH = 10
#: Judged@k in words, for pages (the precise name stays first, for researchers).
JUDGED_WORDS = f"Judged@{DEFAULT_DEPTH} — the share of a system's top {DEFAULT_DEPTH} that has a judgement"


# --------------------------------------------------------------------------- pooling


@dataclass(frozen=True)
class PooledDoc:
    """One unjudged document of a query's pool, with the systems that ranked it within the depth."""

    query_id: str
    doc_id: str
    systems: tuple[str, ...]


@dataclass(frozen=True)
class Pool:
    """The unjudged documents of the top ``depth`` of ``systems``, per judged query.

    ``docs[query_id]`` lists each document once, in the order of its best rank in any system (ties in
    the order the systems were given), with every system that contributed it.
    """

    depth: int
    systems: tuple[str, ...]
    docs: dict[str, tuple[PooledDoc, ...]]

    def __len__(self) -> int:
        return sum(len(docs) for docs in self.docs.values())

    def items(self) -> list[PooledDoc]:
        """Every pooled (query, document), query by query."""
        return [doc for docs in self.docs.values() for doc in docs]

    def contributed(self) -> dict[str, int]:
        """Pooled documents per system (a document retrieved by two systems counts for both)."""
        counts = dict.fromkeys(self.systems, 0)
        for doc in self.items():
            for system in doc.systems:
                counts[system] += 1
        return counts

    def unique(self) -> dict[str, int]:
        """Pooled documents only this system retrieved within the depth."""
        counts = dict.fromkeys(self.systems, 0)
        for doc in self.items():
            if len(doc.systems) == 1:
                counts[doc.systems[0]] += 1
        return counts


def pool(runs: Mapping[str, Run], qrels: Mapping[str, Mapping[str, int]], depth: int = DEFAULT_DEPTH) -> Pool:
    """Pool the top ``depth`` of each run (keyed by system name) and keep the documents ``qrels`` does not
    judge at all (any grade, 0 included, counts as judged). Only judged queries are pooled: the others
    are never evaluated. Pass the team's qrels (``team``) so documents the team judged are not pooled again."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"pool depth must be a positive integer, got {depth!r}")
    systems = tuple(runs)
    docs: dict[str, tuple[PooledDoc, ...]] = {}
    for query_id in sorted(qid for qid, grades in qrels.items() if grades):
        judged = qrels[query_id]
        found: dict[str, tuple[int, list[str]]] = {}  # doc -> (best rank, contributing systems)
        for system in systems:
            for rank, (doc_id, _) in enumerate(runs[system].top(query_id, depth), start=1):
                if doc_id in judged:
                    continue
                best, contributors = found.setdefault(doc_id, (rank, []))
                if system not in contributors:
                    contributors.append(system)
                found[doc_id] = (min(best, rank), contributors)
        ordered = sorted(found.items(), key=lambda item: item[1][0])  # stable: first system wins ties
        if ordered:
            docs[query_id] = tuple(PooledDoc(query_id, doc, tuple(c)) for doc, (_, c) in ordered)
    return Pool(depth=depth, systems=systems, docs=docs)


POOL_CSV_HEADER = ("query_id", "doc_id", "systems")


def pool_csv(pooled: Pool) -> str:
    """The pool as CSV, one (query, document) per row in the pool's order; ``systems`` lists the systems
    that ranked the document within the depth, space-separated."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(POOL_CSV_HEADER)
    for doc in pooled.items():
        writer.writerow([doc.query_id, doc.doc_id, " ".join(doc.systems)])
    return buffer.getvalue()


def pool_text(pooled: Pool) -> str:
    """The pool TREC-like: ``qid 0 docid`` per line, the qrels columns without the grade a judge adds.
    Ids a TREC line cannot hold (empty, or with whitespace) raise DataError: the file would not read back."""
    bad = [d for d in pooled.items() if not all(i and not any(c.isspace() for c in i) for i in (d.query_id, d.doc_id))]
    if bad:
        raise DataError(
            [Problem("pool", None, f"query {d.query_id!r}, document {d.doc_id!r}: an id a TREC line cannot hold")
             for d in bad[:20]]
        )
    return "".join(f"{d.query_id} 0 {d.doc_id}\n" for d in pooled.items())


# --------------------------------------------------------------------------- holes and metrics


def judged_at_k(
    run: Run, qrels: Mapping[str, Mapping[str, int]], k: int = DEFAULT_DEPTH
) -> tuple[float, dict[str, float]]:
    """ir_measures' Judged@k: the share of a run's top k that has a judgement, mean and per query, over
    the queries both the run and ``qrels`` hold (as the metrics are averaged)."""
    measure = ir_measures.Judged @ k
    judged_qrels = {qid: dict(grades) for qid, grades in qrels.items() if grades}
    scores = {qid: ranking for qid, ranking in run.truncated(k).as_score_dict().items() if ranking}
    if not judged_qrels or not scores:
        return 0.0, {}
    per_query = {m.query_id: float(m.value) for m in ir_measures.iter_calc([measure], judged_qrels, scores)}
    mean = sum(per_query.values()) / len(per_query) if per_query else 0.0
    return mean, per_query


#: The two judgements a re-evaluation scores with, as its table names them.
ORIGINAL, TEAM = "original qrels", "team qrels"


def scores_with_team(
    runs: Mapping[str, Run],
    qrels: Qrels,
    team: Qrels,
    *,
    metrics: Sequence[str] = MAIN_METRICS,
    dataset_name: str = "",
) -> pd.DataFrame:
    """Each system's mean ``metrics`` with the original ``qrels`` and with the team's (``team.team_qrels``):
    one row per system and judgements (``qrels``: :data:`ORIGINAL` then :data:`TEAM`), one column per
    metric. The one re-evaluation: the Annotations and Adjudication pages show it, and
    :func:`compare_with_team` (the Metrics page, the command line) ranks systems from it."""
    rows = []
    for name, run in runs.items():
        for which, judgements in ((ORIGINAL, qrels), (TEAM, team)):
            means = evaluate(run, judgements, dataset_name=dataset_name).means
            rows.append({"system": name, "qrels": which} | {metric: means[metric] for metric in metrics})
    return pd.DataFrame(rows, columns=["system", "qrels", *metrics])


def compare_with_team(
    runs: Mapping[str, Run],
    qrels: Qrels,
    team: Qrels,
    *,
    metric: str = "ndcg_at_10",
    k: int = DEFAULT_DEPTH,
    dataset_name: str = "",
) -> pd.DataFrame:
    """Each system's ``metric`` and rank without and with the team's judgements, and Judged@k both ways.

    Metrics come from :func:`scores_with_team` (pytrec_eval) against the original ``qrels`` and the team's
    (``team.team_qrels``: grade-0 judgements count as judged for Judged@k and change no metric); rank 1
    is the best, tied systems share the best rank. ``rank_change`` > 0 means the system moved up.
    """
    scores = scores_with_team(runs, qrels, team, metrics=(metric,), dataset_name=dataset_name)
    without = scores[scores["qrels"] == ORIGINAL].set_index("system")[metric]
    with_ = scores[scores["qrels"] == TEAM].set_index("system")[metric]
    rows = [
        {
            "system": name,
            "without": without[name],
            "with": with_[name],
            "change": with_[name] - without[name],
            "judged_without": judged_at_k(run, qrels, k)[0],
            "judged_with": judged_at_k(run, team, k)[0],
        }
        for name, run in runs.items()
    ]
    frame = pd.DataFrame(rows, columns=["system", "without", "with", "change", "judged_without", "judged_with"])
    frame.insert(3, "rank_without", frame["without"].rank(ascending=False, method="min").astype(int))
    frame.insert(4, "rank_with", frame["with"].rank(ascending=False, method="min").astype(int))
    frame.insert(5, "rank_change", frame["rank_without"] - frame["rank_with"])
    return frame


def pooling_by_measure(
    table: pd.DataFrame, pooled: Pool, labels: Mapping[str, str], metric: str = "ndcg_at_10", k: int = DEFAULT_DEPTH
) -> pd.DataFrame:
    """The Metrics page's "Pooling and holes" table: one row per measure (its name and, in words, what it
    says), one column per system, as the official metrics table above it (``reporting.tables.means_by_metric``).

    ``table`` is :func:`compare_with_team`'s (``metric``, Judged@``k``) and ``pooled`` the pool of the same
    systems. A column per system fits a narrow window, where a column per measure was cut at the edge.
    """
    systems = list(table["system"])
    contributed, unique = pooled.contributed(), pooled.unique()
    shares = {key: [f"{v:.4f}" for v in table[key]] for key in ("without", "with", "judged_without", "judged_with")}
    team = "the same, counting the team's judgements too"
    measure = metric_label(metric)
    rows = {
        f"{measure} without": (f"{metric_meaning(metric)}, on the benchmark's judgements", shares["without"]),
        f"{measure} with": (team, shares["with"]),
        "rank": (
            "among the systems here, without → with the team's judgements (1 is the best)",
            [f"{a} → {b}" for a, b in zip(table["rank_without"], table["rank_with"])],
        ),
        f"Judged@{k}": (
            f"the share of its top {k} that has a judgement: if low, its score rests on holes",
            shares["judged_without"],
        ),
        f"Judged@{k} with": (team, shares["judged_with"]),
        f"pooled @{pooled.depth}": (
            f"unjudged documents of its top {pooled.depth} in the pool",
            [str(contributed[name]) for name in systems],
        ),
        "only it": ("pooled documents no other system here retrieved", [str(unique[name]) for name in systems]),
    }
    columns = [labels.get(name, name) for name in systems]
    shown = [{"measure": row, "what it says": said, **dict(zip(columns, cells))} for row, (said, cells) in rows.items()]
    return pd.DataFrame(shown).set_index("measure")
