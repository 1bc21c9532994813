"""Pooling and holes: which top-ranked documents nobody judged, and what judging them changes.

R2MED's judgements come from its construction, not from pooling the systems evaluated here, so a new
system's top 10 can rest on *holes* (documents without any judgement) that the metrics count as not
relevant. As in TREC, ``pool`` takes the union of the top ``depth`` of chosen systems and keeps the
unjudged documents, remembering which systems retrieved each. ``judging.JudgingQueue`` holds the pools
sent for judging; annotators label them blind (query and document only) through the ordinary failure
labels, so a "relevant but unjudged" label becomes a grade-1 judgement once a reviewer accepts it.
``compare_with_additions`` then shows each system's metric and rank without and with the accepted
additions next to Judged@k (ir_measures), so a user sees which scores rest on holes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import ir_measures
import pandas as pd

from .adjudication import history, qrels_changes
from .annotations import Annotation, AnnotationStore, Qrels, extended_qrels
from .data import DataError, Dataset, Problem
from .evaluation import evaluate
from .runs import Run

#: The pool depth TREC-style pooling uses most, and the cutoff Judged@k is shown at.
DEFAULT_DEPTH = 10
#: The label an annotator gives a pooled document that does not answer the query.
NOT_RELEVANT = "not_relevant"


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
    are never evaluated. Documents already judged through accepted additions should be in ``qrels``."""
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


def judged_not_relevant(labels: Iterable[Annotation], dataset: str, task: str) -> Qrels:
    """ "Judged not relevant" labels (and list judging's "Grade 0") of one task that no reviewer
    rejected, as grade-0 judgements.

    A grade 0 changes no pytrec_eval measure (they count only grades above 0), so these need no review to
    be used: they only tell Judged@k that someone looked, and keep the documents out of later pools."""
    negatives: Qrels = {}
    for label in labels:
        if (
            label.dataset == dataset
            and label.task == task
            and label.failure_type in (NOT_RELEVANT, "grade_0")
            and label.doc_id is not None
            and label.status != "rejected"
        ):
            negatives.setdefault(label.query_id, {})[label.doc_id] = 0
    return negatives


def with_decisions(additions: Qrels, negatives: Qrels, decided: Iterable[tuple[str, str, int]]) -> tuple[Qrels, Qrels]:
    """The new judgements once reviewers adjudicated: each ``(query_id, doc_id, grade)`` decision on an
    unjudged pair (``adjudication.qrels_changes`` of kind "addition") replaces whatever the labels said
    about it — grade > 0 as an addition, grade 0 as judged not relevant. Inputs are not changed."""
    additions = {q: dict(g) for q, g in additions.items()}
    negatives = {q: dict(g) for q, g in negatives.items()}
    for query_id, doc_id, grade in decided:
        for judgements in (additions, negatives):
            judgements.get(query_id, {}).pop(doc_id, None)
        (additions if grade > 0 else negatives).setdefault(query_id, {})[doc_id] = grade
    return {q: g for q, g in additions.items() if g}, {q: g for q, g in negatives.items() if g}


def with_judgements(qrels: Qrels, additions: Qrels, negatives: Qrels) -> Qrels:
    """The qrels a new pool is taken against: the original ones plus the new judgements (``new_judgements``),
    so documents someone judged since are not pooled again."""
    return extended_qrels(extended_qrels(qrels, negatives), additions)


def new_judgements(store: AnnotationStore, dataset: Dataset) -> tuple[Qrels, Qrels]:
    """One task's new judgements from the store: the accepted additions (grade > 0) and the documents
    judged not relevant (grade 0), with reviewers' adjudicated grades on unjudged pairs replacing the
    labels (``with_decisions``). What "with" means in ``compare_with_additions`` and in later pools."""
    labels = store.list(dataset=dataset.source, task=dataset.name)
    additions = store.qrels_additions(dataset.source, dataset.name)
    decisions = history(store, dataset=dataset.source, task=dataset.name)
    decided = [(c.query_id, c.doc_id, c.grade) for c in qrels_changes(decisions, dataset.qrels) if c.kind == "addition"]
    return with_decisions(additions, judged_not_relevant(labels, dataset.source, dataset.name), decided)


def compare_with_additions(
    runs: Mapping[str, Run],
    qrels: Qrels,
    additions: Qrels,
    *,
    negatives: Qrels | None = None,
    metric: str = "ndcg_at_10",
    k: int = DEFAULT_DEPTH,
    dataset_name: str = "",
) -> pd.DataFrame:
    """Each system's ``metric`` and rank without and with the accepted additions, and Judged@k both ways.

    Metrics come from ``evaluation.evaluate`` (pytrec_eval) against the original and the extended qrels
    (``negatives``, grade-0 judgements from ``judged_not_relevant``, count as judged for Judged@k and
    change no metric); rank 1 is the best, tied systems share the best rank. ``rank_change`` > 0 means
    the system moved up.
    """
    # Only on queries judged already: a query judged all-0 would join the means with a score of 0.
    negatives = {qid: grades for qid, grades in (negatives or {}).items() if qrels.get(qid) or additions.get(qid)}
    extended = extended_qrels(extended_qrels(qrels, negatives), additions)
    rows = []
    for name, run in runs.items():
        without = evaluate(run, qrels, dataset_name=dataset_name).means[metric]
        with_ = evaluate(run, extended, dataset_name=dataset_name).means[metric]
        rows.append(
            {
                "system": name,
                "without": without,
                "with": with_,
                "change": with_ - without,
                "judged_without": judged_at_k(run, qrels, k)[0],
                "judged_with": judged_at_k(run, extended, k)[0],
            }
        )
    frame = pd.DataFrame(rows, columns=["system", "without", "with", "change", "judged_without", "judged_with"])
    frame.insert(3, "rank_without", frame["without"].rank(ascending=False, method="min").astype(int))
    frame.insert(4, "rank_with", frame["with"].rank(ascending=False, method="min").astype(int))
    frame.insert(5, "rank_change", frame["rank_without"] - frame["rank_with"])
    return frame
