"""Failure diagnosis per query: *why* a system missed, told apart with the answer oracle.

A diagnostic, not a benchmark setting or metric: it reads a system's run next to the answer
oracle's (``oracle:<retriever>``, retrieval with the reference answer, see ``kinds/oracle.py``) and
the LLM judge's stored proposals, and sorts the system's failures into classes a person can act on.

*Failed* means: a judged query (one with at least one gold document, grade > 0) with no gold
document in the system's top ``depth`` (10) documents, i.e. nDCG@10 = 0, the explorer's
"nDCG@10 = 0" filter. Each failed query gets one class, the first that applies:

1. **possibly unjudged**: the system's top ``depth`` holds a document the LLM judge proposed
   relevant (a ``relevant_unjudged`` label by "proposed by <model>" in the annotation store, not
   rejected by a reviewer). The failure may be missing judgements, not missed retrieval, so it is
   set aside first. Stored proposals only: nothing here calls an LLM.
2. **no reference answer**: the query has no answer, so the oracle cannot say more.
3. **reasoning gap**: the oracle puts a gold document in its top ``depth``: the retriever can
   find the gold documents once handed the answer; what is missing is the reasoning from query
   to answer (what a rewrite or a reasoning model could supply).
4. **representation gap**: even the oracle misses: the retriever does not link the answer to the
   gold documents either, so better reasoning alone would not help this retriever.

Queries that did not fail are ``NOT_FAILED``; queries without gold documents are left out (they
cannot fail or succeed), as in the explorer's table.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import pandas as pd

from r2med_core.analysis.explore import query_table
from r2med_core.data import Dataset
from r2med_core.evaluation import evaluate
from r2med_core.judging.annotations import (
    PROPOSER_PREFIX as PROPOSER_PREFIX,  # re-exported: the proposals' annotator prefix
)
from r2med_core.judging.annotations import AnnotationStore
from r2med_core.judging.visibility import Sight
from r2med_core.kinds.oracle import reference_answers
from r2med_core.progress import Progress
from r2med_core.runs import Run
from r2med_core.systems import run_system

#: How deep a gold document must be for a query not to have failed (the benchmark's headline nDCG@10).
DEPTH = 10
#: The oracle used unless the user chooses another: BM25 on the answer, quick on any task.
DEFAULT_ORACLE = "oracle:bm25"

POSSIBLY_UNJUDGED = "possibly unjudged"
NO_REFERENCE = "no reference answer"
REASONING_GAP = "reasoning gap"
REPRESENTATION_GAP = "representation gap"
NOT_FAILED = "not failed"
#: The failure classes, in the order they are tried (and shown).
FAILURE_CLASSES: tuple[str, ...] = (POSSIBLY_UNJUDGED, NO_REFERENCE, REASONING_GAP, REPRESENTATION_GAP)


CAPTION = (
    "A diagnostic, not a benchmark metric: each failed query (no gold document in the top {depth}) is "
    "classed with the answer oracle ({oracle}). Reasoning gap: the "
    "oracle finds a gold document in its top {depth}; representation gap: even the oracle misses; possibly "
    "unjudged: the system's top {depth} holds a document the LLM judge proposed relevant (stored proposals "
    "not rejected); no reference answer: the query has none."
)


@dataclass(frozen=True)
class QueryDiagnosis:
    """One judged query's class, with the evidence for it."""

    query_id: str
    failure_class: str
    #: The best rank of a gold document in the system's run (None: not retrieved).
    best_gold_rank: int | None
    #: The best rank of a gold document in the oracle's run (None: not retrieved, or no oracle run).
    oracle_gold_rank: int | None
    #: Documents in the system's top ``depth`` the LLM judge proposed relevant.
    proposed_in_top: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.failure_class != NOT_FAILED


@dataclass(frozen=True)
class Diagnosis:
    """Every judged query of one system on one task, classed against one oracle."""

    task: str
    system: str
    oracle: str
    depth: int
    queries: tuple[QueryDiagnosis, ...]

    def class_of(self) -> dict[str, str]:
        """Query id → class (``NOT_FAILED`` for a query that did not fail)."""
        return {q.query_id: q.failure_class for q in self.queries}

    def counts(self) -> dict[str, int]:
        """How many failed queries fall in each class, every class listed (zeros included)."""
        out = dict.fromkeys(FAILURE_CLASSES, 0)
        for q in self.queries:
            if q.failed:
                out[q.failure_class] += 1
        return out

    @property
    def n_failed(self) -> int:
        return sum(q.failed for q in self.queries)

    def caption(self, oracle_label: str | None = None) -> str:
        """What the classes mean and which oracle made them (its label, else its name)."""
        return CAPTION.format(depth=self.depth, oracle=oracle_label or self.oracle)


def _best_gold_rank(run: Run | None, query_id: str, gold: Collection[str]) -> int | None:
    if run is None:
        return None
    return min((r for doc in gold if (r := run.rank_of(query_id, doc)) is not None), default=None)


def diagnose(
    dataset: Dataset,
    run: Run,
    oracle_run: Run | None,
    *,
    oracle: str = DEFAULT_ORACLE,
    proposals: Mapping[str, Collection[str]] | None = None,
    depth: int = DEPTH,
) -> Diagnosis:
    """Class every judged query of ``run`` (see the module docstring for the rules and their order).

    ``oracle_run`` is the oracle's run on ``dataset`` (None when the dataset has no reference answers);
    ``proposals`` maps query ids to the documents the LLM judge proposed relevant (``judge_proposals``).
    """
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth!r}")
    answered = reference_answers(dataset)
    proposals = proposals or {}
    out = []
    for qid in dataset.queries:
        gold = dataset.positives(qid)
        if not gold:
            continue
        best = _best_gold_rank(run, qid, gold)
        oracle_best = _best_gold_rank(oracle_run, qid, gold) if qid in answered else None
        proposed = tuple(doc for doc, _ in run.top(qid, depth) if doc in proposals.get(qid, ()))
        if best is not None and best <= depth:
            found = NOT_FAILED
        elif proposed:
            found = POSSIBLY_UNJUDGED
        elif qid not in answered:
            found = NO_REFERENCE
        elif oracle_best is not None and oracle_best <= depth:
            found = REASONING_GAP
        else:
            found = REPRESENTATION_GAP
        out.append(QueryDiagnosis(qid, found, best, oracle_best, proposed))
    return Diagnosis(dataset.name, run.name, oracle, depth, tuple(out))


def oracle_run(dataset: Dataset, oracle: str = DEFAULT_ORACLE, progress: Progress | None = None) -> Run | None:
    """The oracle's run on ``dataset`` (cached as any system's), or None when the dataset has no
    reference answers: then the oracle cannot run and ``diagnose`` classes without it."""
    if not reference_answers(dataset):
        return None
    return run_system(dataset, oracle, progress=progress)


def judge_proposals(store: AnnotationStore, dataset: Dataset, sight: Sight | None = None) -> dict[str, frozenset[str]]:
    """The documents the LLM judge proposed relevant, per query, from the store's review queue:
    ``relevant_unjudged`` labels by "proposed by <model>" that no reviewer rejected. ``sight``: only
    the proposals that person may see (``visibility``); None: all of them (the command line)."""
    labels = store.list(dataset=dataset.source, task=dataset.name)
    found: dict[str, set[str]] = {}
    for label in labels if sight is None else sight.labels(labels):
        if label.failure_type == "relevant_unjudged" and label.doc_id and label.by_model and label.status != "rejected":
            found.setdefault(label.query_id, set()).add(label.doc_id)
    return {qid: frozenset(docs) for qid, docs in found.items()}


def counts_frame(diagnoses: Mapping[str, Diagnosis]) -> pd.DataFrame:
    """Long table (system label, class, queries) for a stacked bar per system, classes in order."""
    rows = [
        {"system": label, "class": name, "queries": n}
        for label, diagnosis in diagnoses.items()
        for name, n in diagnosis.counts().items()
    ]
    return pd.DataFrame(rows, columns=["system", "class", "queries"])


def with_failure_class(table: pd.DataFrame, diagnosis: Diagnosis, column: str = "failure_class") -> pd.DataFrame:
    """The explorer's query table with each query's class added (by ``query_id``)."""
    classes = diagnosis.class_of()
    out = table.copy()
    out[column] = [classes.get(qid, NOT_FAILED) for qid in out["query_id"]]
    return out


def classed_queries(dataset: Dataset, run: Run, diagnosis: Diagnosis) -> pd.DataFrame:
    """The explorer's query table of ``run`` with each query's class: the columns of its "Download
    these queries (CSV)", every judged query."""
    results = evaluate(run, dataset.qrels, dataset_name=dataset.name, seconds=run.seconds)
    return with_failure_class(query_table(dataset, results, run), diagnosis)


def filter_by_class(table: pd.DataFrame, classes: Collection[str], column: str = "failure_class") -> pd.DataFrame:
    """Only the rows in one of ``classes`` (all rows when none is chosen)."""
    if not classes:
        return table
    return table[table[column].isin(list(classes))]
