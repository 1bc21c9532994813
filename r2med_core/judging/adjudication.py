"""Adjudication: a reviewer settles a unit whose annotators disagree, without touching their labels.

Annotators disagree in one of two vocabularies (``annotations.Vocabulary``): on a document's relevance
grade, or on the failure type of a unit (a whole query, or a (query, document) pair). An annotator who
was *unsure* of a document (``annotations.UNSURE``) sends it here too, even alone: a reviewer gives it
its grade. A *decision*
settles one of them: a grade (stored as its ``grade_<n>`` code with that grade), or the adjudicated
failure type and, for a document, optionally the judgement grade it deserves. Decisions live in their
own table (``adjudications``, schema 4), one row each: a later decision on a unit in the same
vocabulary *supersedes* the current one (``supersedes`` names it) and the history is kept, so who
decided what, when and why can always be read back. The labels are never changed by a decision.

Rules, checked in the decision's own locked transaction so two reviewers cannot race:

* nobody adjudicates a unit they labelled (``SelfAdjudication``), as nobody reviews their own label —
  nor labels a unit they adjudicated (``annotations.check_not_own_unit``, the one rule both ways);
* a reviewer replaces only the decision they saw (``StaleDecision`` when another landed meanwhile).

The standing decisions' grades are the last layer of the team's qrels (``team``): *additions* (a pair
the task never judged) and *corrections* (a judged pair whose grade the reviewer changed).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from r2med_core.judging.annotations import (
    GRADES,
    Annotation,
    AnnotationStore,
    Unit,
    Vocabulary,
    _normalise_time,
    check_not_own_unit,
    check_storable,
    check_whole_number,
    describe,
    get_failure_type,
    grade_code,
    grade_of,
    is_unsure,
    rating_of,
    utc_now,
    vocabulary_of,
)
from r2med_core.judging.annotations import SelfAdjudication as SelfAdjudication  # re-exported: callers import it here
from r2med_core.judging.stores import ADJUDICATION_COLUMNS

#: What annotators can disagree on, and a decision settles: a unit, in one vocabulary.
Item = tuple[Unit, Vocabulary]

_SELECT = f"SELECT {', '.join(ADJUDICATION_COLUMNS)} FROM adjudications"


class StaleDecision(ValueError):
    """Another decision on the unit was recorded after the one the reviewer saw."""


@dataclass(frozen=True, kw_only=True)
class Decision:
    """One reviewer's decision on one unit. Construction validates it, so a bad one never reaches the store.

    ``grade`` (documents only): the judgement the pair deserves, None to leave the judgements as they are.
    A decision on a grade (``failure_type`` a relevance code) has the grade its code stands for (given or
    not); an older ``relevant_unjudged`` one names a grade of 1 or more. ``label_ids``: the labels on the
    unit when it was decided (what the reviewer saw). ``supersedes``: the decision this one replaced.
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
        if is_unsure(self.failure_type):
            raise ValueError("a decision gives the document its grade: 'unsure' is what it settles, not a decision")
        check_whole_number("grade", self.grade, 0)
        if self.grade is not None and self.doc_id is None:
            raise ValueError("a grade judges a (query, document) pair: a decision on a whole query has none")
        if self.failure_type == "relevant_unjudged":
            if self.grade is None or self.grade < 1:
                raise ValueError("a 'relevant but unjudged' decision needs the grade the document deserves (1 or more)")
        elif (implied := grade_of(self.failure_type)) is not None:
            if self.grade not in (None, implied):
                raise ValueError(f"a decision for grade {implied} cannot give the pair grade {self.grade}")
            object.__setattr__(self, "grade", implied)
        object.__setattr__(self, "decided_at", _normalise_time(self.decided_at, "decided_at"))
        object.__setattr__(self, "label_ids", tuple(int(i) for i in self.label_ids))

    @property
    def unit(self) -> Unit:
        return (self.dataset, self.task, self.query_id, self.doc_id)

    @property
    def vocabulary(self) -> Vocabulary:
        """What it settles: a disagreement on the grade, or on the failure type."""
        return vocabulary_of(self.failure_type)

    @property
    def item(self) -> Item:
        return (self.unit, self.vocabulary)

    @property
    def judged(self) -> int | None:
        """The grade it gives the pair, None when it leaves the judgements as they are (a decision on a
        grade always gives one: a stored one without names the grade its code stands for)."""
        return self.grade if self.grade is not None else grade_of(self.failure_type)

    @property
    def rating(self) -> str:
        """What it says, as ``annotations.rating_of`` says it of a label: the labels it settles compare to it."""
        judged = self.judged
        if self.vocabulary != "grade" or judged is None:
            return self.failure_type
        return grade_code(min(judged, GRADES[-1]))  # a grade above the scale (written by hand) rates as its top

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
    """Record ``reviewer``'s decision on ``unit`` and return it with its id: a grade (``failure_type`` a
    relevance code) or a failure type, each settling the unit's disagreement in that vocabulary.

    ``replacing``: the id of the current decision in that vocabulary the reviewer saw (None when the unit
    had none); when another decision landed since, StaleDecision is raised and nothing is written.
    SelfAdjudication when the reviewer labelled the unit (names compare case-insensitively); ValueError
    for a bad decision or a unit without labels. Labels and earlier decisions are never changed.
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
        check_not_own_unit(key, (annotator for _, annotator in labels), [decision.reviewer])
        earlier = conn.execute(
            f"SELECT id, reviewer, decided_at, failure_type FROM adjudications WHERE {_unit_where()} ORDER BY id DESC",
            key,
        ).fetchall()
        current = next((row for row in earlier if vocabulary_of(str(row[3])) == decision.vocabulary), None)
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


def current(decisions: Iterable[Decision]) -> dict[Item, Decision]:
    """The standing decision per unit and vocabulary: the latest recorded (ids grow with time in both
    databases)."""
    out: dict[Item, Decision] = {}
    for decision in sorted(decisions, key=lambda d: d.id or 0):
        out[decision.item] = decision
    return out


# --------------------------------------------------------------------------- the queue


def item_of(annotation: Annotation) -> Item:
    """The unit a label is on, and the vocabulary it rates in."""
    unit = (annotation.dataset, annotation.task, annotation.query_id, annotation.doc_id)
    return (unit, vocabulary_of(annotation))


def latest_ratings(labels: Iterable[Annotation]) -> dict[Item, dict[str, Annotation]]:
    """Each unit's label per annotator in each vocabulary: an annotator's latest grade on a document and
    their latest failure type on it stand for them side by side (one never hides the other)."""
    out: dict[Item, dict[str, Annotation]] = {}
    for annotation in sorted(labels, key=lambda a: (a.created_at, a.id or 0)):
        out.setdefault(item_of(annotation), {})[annotation.annotator] = annotation
    return out


def without_unsure(labels: Iterable[Annotation]) -> list[Annotation]:
    """``labels`` without any of an annotator's on a unit where their latest judgement is unsure: there
    they gave no grade (their earlier grades are withdrawn too), so agreement leaves them out."""
    labels = list(labels)
    unsure = {
        (item, who) for item, rated in latest_ratings(labels).items() for who, a in rated.items() if is_unsure(a)
    }
    return [a for a in labels if (item_of(a), a.annotator) not in unsure]


@dataclass(frozen=True)
class AdjudicationItem:
    """A unit whose annotators disagree in one vocabulary (``vocabulary``: on the grade, or on the failure
    type), with those labels and its standing decision in that vocabulary (None: undecided).

    ``unsure``: an annotator's latest judgement on the document is unsure (alone, or beside others' grades).
    ``reopened``: labels arrived after the decision (they were not among those the reviewer saw).
    ``suggestions``: a model's proposals on the unit, shown to the reviewer; they are not labels here,
    so they neither make a disagreement nor reopen a decision."""

    unit: Unit
    vocabulary: Vocabulary
    labels: tuple[Annotation, ...]
    decision: Decision | None
    suggestions: tuple[Annotation, ...] = ()

    @property
    def annotators(self) -> tuple[str, ...]:
        return tuple(a.annotator for a in self.labels)

    @property
    def unsure(self) -> bool:
        return any(is_unsure(a) for a in self.labels)

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
    """Every unit where two or more annotators said different things in one vocabulary — different grades
    (whichever page they were given on: ``annotations.rating_of``), or different failure types — and every
    document on which an annotator's latest judgement is unsure, oldest first. All people's labels count,
    blind or not: any disagreement needs settling. Each comes with its standing decision and the model's
    proposals on it as suggestions (a model is not an annotator: ``Annotation.by_model``)."""
    labels = list(labels)
    standing = current(decisions)
    suggested = latest_ratings(a for a in labels if a.by_model)
    items = []
    for (unit, vocabulary), rated in latest_ratings(a for a in labels if not a.by_model).items():
        if task is not None and unit[1] != task:
            continue
        unsure = any(is_unsure(a) for a in rated.values())
        if not unsure and (len(rated) < 2 or len({rating_of(a) for a in rated.values()}) < 2):
            continue
        hints = tuple(suggested.get((unit, vocabulary), {}).values())
        decision = standing.get((unit, vocabulary))
        items.append(AdjudicationItem(unit, vocabulary, tuple(rated.values()), decision, hints))
    return sorted(items, key=lambda item: min(a.created_at for a in item.labels))


def adjudication_queue(
    labels: Iterable[Annotation], decisions: Iterable[Decision], *, task: str | None = None
) -> list[AdjudicationItem]:
    """The disagreements still waiting for a decision (undecided, or reopened by later labels)."""
    return [item for item in adjudication_items(labels, decisions, task=task) if item.waiting]


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
