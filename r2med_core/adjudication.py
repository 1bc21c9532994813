"""Adjudication: a reviewer settles a unit whose annotators disagree, without touching their labels.

A *decision* names the adjudicated failure type of a unit (a whole query, or a (query, document) pair)
and, for a document, optionally the judgement grade it deserves. Decisions live in their own table
(``adjudications``, schema 4), one row each: a later decision on a unit *supersedes* the current one
(``supersedes`` names it) and the history is kept, so who decided what, when and why can always be
read back. The labels are never changed by a decision.

Rules, checked in the decision's own locked transaction so two reviewers cannot race:

* nobody adjudicates a unit they labelled (``SelfAdjudication``), as nobody reviews their own label;
* a reviewer replaces only the decision they saw (``StaleDecision`` when another landed meanwhile).

Decisions with a grade become qrels *additions* (a pair the task never judged) and *corrections* (a
judged pair whose grade the reviewer changed), exported as TREC qrels text and CSV.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .annotation_backends import ADJUDICATION_COLUMNS
from .annotations import (
    Annotation,
    AnnotationStore,
    Qrels,
    _normalise_time,
    check_storable,
    check_whole_number,
    extended_qrels,
    get_failure_type,
    utc_now,
)
from .data import DataError, Dataset, Problem
from .evaluation import Results, evaluate
from .identity import PermissionDenied
from .runs import Run

Unit = tuple[str, str, str, str | None]  # (dataset, task, query_id, doc_id or None for the whole query)

_SELECT = f"SELECT {', '.join(ADJUDICATION_COLUMNS)} FROM adjudications"


class SelfAdjudication(PermissionDenied):
    """The reviewer labelled the unit: another reviewer decides it."""


class StaleDecision(ValueError):
    """Another decision on the unit was recorded after the one the reviewer saw."""


@dataclass(frozen=True, kw_only=True)
class Decision:
    """One reviewer's decision on one unit. Construction validates it, so a bad one never reaches the store.

    ``grade`` (documents only): the judgement the pair deserves, None to leave the judgements as they are;
    a ``relevant_unjudged`` decision needs a grade of 1 or more. ``label_ids``: the labels on the unit
    when it was decided (what the reviewer saw). ``supersedes``: the decision this one replaced.
    """

    id: int | None = None
    dataset: str
    task: str
    query_id: str
    doc_id: str | None = None
    failure_type: str
    grade: int | None = None
    reason: str = ""
    reviewer: str
    decided_at: str = field(default_factory=utc_now)
    supersedes: int | None = None
    label_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("dataset", "task", "query_id", "reviewer"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if not isinstance(self.reason, str):
            raise ValueError(f"reason must be a string, got {self.reason!r}")
        for name in ("dataset", "task", "query_id", "doc_id", "reason", "reviewer"):
            check_storable(name, getattr(self, name))
        if self.doc_id == "":
            object.__setattr__(self, "doc_id", None)
        if self.doc_id is not None and not isinstance(self.doc_id, str):
            raise ValueError(f"doc_id must be a string or None, got {self.doc_id!r}"[:200])
        get_failure_type(self.failure_type).check_scope(self.doc_id)
        check_whole_number("grade", self.grade, 0)
        if self.grade is not None and self.doc_id is None:
            raise ValueError("a grade judges a (query, document) pair: a decision on a whole query has none")
        if self.failure_type == "relevant_unjudged" and (self.grade is None or self.grade < 1):
            raise ValueError("a 'relevant but unjudged' decision needs the grade the document deserves (1 or more)")
        object.__setattr__(self, "decided_at", _normalise_time(self.decided_at, "decided_at"))
        object.__setattr__(self, "label_ids", tuple(int(i) for i in self.label_ids))

    @property
    def unit(self) -> Unit:
        return (self.dataset, self.task, self.query_id, self.doc_id)

    @classmethod
    def _from_row(cls, row: Sequence[Any]) -> Decision:
        """Rebuild a stored row without validation: a type registered by another session still reads."""
        obj = object.__new__(cls)
        for name, value in zip(ADJUDICATION_COLUMNS, row):
            if name == "label_ids":
                value = tuple(int(i) for i in str(value).split(",") if i.strip().isdigit())
            elif name in ("id", "grade", "supersedes") and value is not None:
                value = int(value)
            object.__setattr__(obj, name, value)
        return obj


def _unit_where() -> str:
    return "dataset = ? AND task = ? AND query_id = ? AND doc_id IS ?"


def decide(
    store: AnnotationStore,
    unit: Unit,
    failure_type: str,
    reviewer: str,
    *,
    grade: int | None = None,
    reason: str = "",
    replacing: int | None = None,
) -> Decision:
    """Record ``reviewer``'s decision on ``unit`` and return it with its id.

    ``replacing``: the id of the current decision the reviewer saw (None when the unit had none); when
    another decision landed since, StaleDecision is raised and nothing is written. SelfAdjudication when
    the reviewer labelled the unit (names compare case-insensitively); ValueError for a bad decision or
    a unit without labels. Labels and earlier decisions are never changed.
    """
    dataset, task, query_id, doc_id = unit
    decision = Decision(
        dataset=dataset,
        task=task,
        query_id=query_id,
        doc_id=doc_id,
        failure_type=failure_type,
        grade=grade,
        reason=reason.strip() if isinstance(reason, str) else reason,
        reviewer=reviewer.strip() if isinstance(reviewer, str) else reviewer,
    )
    key = (decision.dataset, decision.task, decision.query_id, decision.doc_id)
    with store._connection(write=True) as conn:
        labels = conn.execute(
            f"SELECT id, annotator FROM annotations WHERE {_unit_where()} ORDER BY id", key
        ).fetchall()
        if not labels:
            raise ValueError(f"no labels on {describe(key)}: only a labelled unit is adjudicated")
        check_not_own_unit(decision.reviewer, (annotator for _, annotator in labels), key)
        current = conn.execute(
            f"SELECT id, reviewer, decided_at FROM adjudications WHERE {_unit_where()} ORDER BY id DESC LIMIT 1", key
        ).fetchone()
        current_id = None if current is None else int(current[0])
        if current_id != replacing:
            seen = "no decision" if replacing is None else f"decision #{replacing}"
            now = "none" if current is None else f"#{current[0]} by {current[1]} at {current[2]}"
            raise StaleDecision(
                f"{describe(key)} changed while you decided: you saw {seen}, the current one is {now}; "
                "look at it and decide again (nothing was saved)"
            )
        ids = ",".join(str(int(i)) for i, _ in labels)
        values = (
            *key,
            decision.failure_type,
            decision.grade,
            decision.reason,
            decision.reviewer,
            decision.decided_at,
            current_id,
            ids,
        )
        new_id = conn.execute(
            "INSERT INTO adjudications (dataset, task, query_id, doc_id, failure_type, grade, reason, reviewer, "
            "decided_at, supersedes, label_ids) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            values,
        ).fetchone()[0]
    return Decision._from_row((int(new_id), *values))


def check_not_own_unit(reviewer: str, annotators: Iterable[str], unit: Unit) -> None:
    """SelfAdjudication when ``reviewer`` is among ``annotators``, who labelled ``unit`` (names compare
    case-insensitively, spaces around them ignored): nobody adjudicates a unit they labelled."""
    mine = reviewer.strip().lower()
    if any(str(annotator).strip().lower() == mine for annotator in annotators):
        raise SelfAdjudication(
            f"{reviewer} labelled {describe(unit)}: nobody adjudicates a unit they labelled; "
            "another reviewer decides it"
        )


def history(
    store: AnnotationStore, *, dataset: str | None = None, task: str | None = None, unit: Unit | None = None
) -> list[Decision]:
    """Every decision (superseded ones too), oldest first, optionally of one task or one unit."""
    if unit is not None:
        where, params = f" WHERE {_unit_where()}", list(unit)
    else:
        pairs = [(name, value) for name, value in (("dataset", dataset), ("task", task)) if value is not None]
        where = (" WHERE " + " AND ".join(f"{name} = ?" for name, _ in pairs)) if pairs else ""
        params = [value for _, value in pairs]
    with store._connection() as conn:
        rows = conn.execute(f"{_SELECT}{where} ORDER BY id", params).fetchall()
    return [Decision._from_row(row) for row in rows]


def current(decisions: Iterable[Decision]) -> dict[Unit, Decision]:
    """The standing decision per unit: the latest recorded (ids grow with time in both databases)."""
    out: dict[Unit, Decision] = {}
    for decision in sorted(decisions, key=lambda d: d.id or 0):
        out[decision.unit] = decision
    return out


def describe(unit: Unit) -> str:
    """A unit in words, for messages."""
    _, task, query_id, doc_id = unit
    return f"{task} · query {query_id} · " + (f"document {doc_id}" if doc_id is not None else "the whole query")


# --------------------------------------------------------------------------- the queue


def latest_labels(labels: Iterable[Annotation]) -> dict[Unit, dict[str, Annotation]]:
    """Each unit's label per annotator (an annotator's latest label on a unit stands for them)."""
    out: dict[Unit, dict[str, Annotation]] = {}
    for annotation in sorted(labels, key=lambda a: (a.created_at, a.id or 0)):
        key = (annotation.dataset, annotation.task, annotation.query_id, annotation.doc_id)
        out.setdefault(key, {})[annotation.annotator] = annotation
    return out


@dataclass(frozen=True)
class AdjudicationItem:
    """A unit whose annotators disagree, with its labels and its standing decision (None: undecided).

    ``reopened``: labels arrived after the decision (they were not among those the reviewer saw).
    ``suggestions``: a model's proposals on the unit, shown to the reviewer; they are not labels here,
    so they neither make a disagreement nor reopen a decision."""

    unit: Unit
    labels: tuple[Annotation, ...]
    decision: Decision | None
    suggestions: tuple[Annotation, ...] = ()

    @property
    def annotators(self) -> tuple[str, ...]:
        return tuple(a.annotator for a in self.labels)

    @property
    def reopened(self) -> bool:
        return self.decision is not None and any(a.id not in self.decision.label_ids for a in self.labels)

    @property
    def waiting(self) -> bool:
        """Needs a (new) decision: undecided, or reopened by later labels."""
        return self.decision is None or self.reopened


def adjudication_items(
    labels: Iterable[Annotation], decisions: Iterable[Decision], *, task: str | None = None
) -> list[AdjudicationItem]:
    """Every unit where two or more annotators chose different failure types (all people's labels count,
    blind or not: any disagreement needs settling), oldest first, with its standing decision and the
    model's proposals on it as suggestions (a model is not an annotator: ``Annotation.by_model``)."""
    labels = list(labels)
    standing = current(decisions)
    suggested = latest_labels(a for a in labels if a.by_model)
    items = []
    for unit, rated in latest_labels(a for a in labels if not a.by_model).items():
        if task is not None and unit[1] != task:
            continue
        if len(rated) < 2 or len({a.failure_type for a in rated.values()}) < 2:
            continue
        hints = tuple(suggested.get(unit, {}).values())
        items.append(AdjudicationItem(unit, tuple(rated.values()), standing.get(unit), hints))
    return sorted(items, key=lambda item: min(a.created_at for a in item.labels))


def adjudication_queue(
    labels: Iterable[Annotation], decisions: Iterable[Decision], *, task: str | None = None
) -> list[AdjudicationItem]:
    """The disagreements still waiting for a decision (undecided, or reopened by later labels)."""
    return [item for item in adjudication_items(labels, decisions, task=task) if item.waiting]


# --------------------------------------------------------------------------- qrels additions and corrections


@dataclass(frozen=True)
class QrelsChange:
    """What a decision's grade changes in a task's judgements.

    ``addition``: the pair was not judged; ``correction``: it was, with grade ``original``."""

    kind: Literal["addition", "correction"]
    query_id: str
    doc_id: str
    original: int | None
    grade: int
    decision: Decision


def qrels_changes(decisions: Iterable[Decision], qrels: Mapping[str, Mapping[str, int]]) -> list[QrelsChange]:
    """The standing decisions' grades that differ from ``qrels`` (one task's), in id order. A decision
    without a grade, or with the grade the pair already has, changes nothing and is left out."""
    changes = []
    for decision in sorted(current(decisions).values(), key=lambda d: (d.query_id, d.doc_id or "")):
        if decision.grade is None or decision.doc_id is None:
            continue
        original = qrels.get(decision.query_id, {}).get(decision.doc_id)
        if original == decision.grade:
            continue
        kind: Literal["addition", "correction"] = "addition" if original is None else "correction"
        changes.append(QrelsChange(kind, decision.query_id, decision.doc_id, original, decision.grade, decision))
    return changes


def adjudicated_qrels(qrels: Qrels, changes: Iterable[QrelsChange]) -> Qrels:
    """The judgements with the changes applied (a correction may lower a grade); ``qrels`` is not changed."""
    merged = {qid: dict(grades) for qid, grades in qrels.items()}
    for change in changes:
        merged.setdefault(change.query_id, {})[change.doc_id] = change.grade
    return merged


def team_qrels(store: AnnotationStore, dataset: Dataset) -> Qrels:
    """The task's judgements with the team's work applied: the accepted additions (grade 1), then the
    standing decisions' grades (additions and corrections; a decision replaces what the labels said)."""
    additions = store.qrels_additions(dataset.source, dataset.name)
    changes = qrels_changes(history(store, dataset=dataset.source, task=dataset.name), dataset.qrels)
    return adjudicated_qrels(extended_qrels(dataset.qrels, additions), changes)


def qrels_text(qrels: Mapping[str, Mapping[str, int]], label: str = "qrels") -> str:
    """Whole qrels as TREC text (``qid 0 docid grade`` per line). An id a TREC line cannot hold raises
    DataError (``label`` names the qrels): a full qrels file never silently loses a judgement."""
    bad = [(q, d) for q, grades in qrels.items() for d in grades if not (_trec_safe(q) and _trec_safe(d))]
    if bad:
        raise DataError(
            [Problem(label, None, f"query {q!r}, document {d!r}: an id a TREC line cannot hold") for q, d in bad[:20]]
        )
    return "".join(f"{q} 0 {d} {grade}\n" for q, grades in qrels.items() for d, grade in grades.items())


def reevaluate_adjudicated(
    run: Run, qrels: Qrels, changes: Iterable[QrelsChange], dataset_name: str = "", *, depth: int = 100
) -> tuple[Results, Results]:
    """Score ``run`` against the original and the adjudicated judgements (additions and corrections
    applied): what the reviewers' decisions change. Team judgements, not the benchmark's."""
    original = evaluate(run, qrels, dataset_name=dataset_name, depth=depth)
    adjudicated = evaluate(run, adjudicated_qrels(qrels, changes), dataset_name=dataset_name, depth=depth)
    return original, adjudicated


def _trec_safe(identifier: str) -> bool:
    return bool(identifier) and not re.search(r"\s", identifier)


def qrels_changes_text(changes: Iterable[QrelsChange]) -> str:
    """The changes as TREC qrels lines (``qid 0 docid grade``): applied after the original file, each line
    overrides the pair's grade. Ids a TREC line cannot hold (with whitespace) are left out."""
    return "".join(
        f"{c.query_id} 0 {c.doc_id} {c.grade}\n" for c in changes if _trec_safe(c.query_id) and _trec_safe(c.doc_id)
    )


QRELS_CSV_HEADER = (
    "kind",
    "query_id",
    "doc_id",
    "original_grade",
    "adjudicated_grade",
    "failure_type",
    "reviewer",
    "decided_at",
    "reason",
    "decision_id",
)


def qrels_changes_csv(changes: Iterable[QrelsChange]) -> str:
    """The changes as CSV, each with the decision behind it (an empty original grade: not judged)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(QRELS_CSV_HEADER)
    for c in changes:
        d = c.decision
        original = "" if c.original is None else c.original
        writer.writerow(
            [c.kind, c.query_id, c.doc_id, original, c.grade, d.failure_type, d.reviewer, d.decided_at, d.reason, d.id]
        )
    return buffer.getvalue()


def decisions_csv(decisions: Iterable[Decision]) -> str:
    """Every decision with its history (``supersedes``) as CSV; ``label_ids`` are space-separated."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(ADJUDICATION_COLUMNS)
    for d in decisions:
        cells = [getattr(d, name) for name in ADJUDICATION_COLUMNS]
        cells[-1] = " ".join(map(str, d.label_ids))
        writer.writerow(["" if value is None else value for value in cells])
    return buffer.getvalue()
