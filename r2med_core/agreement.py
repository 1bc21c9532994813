"""Agreement between annotators, and the review queue built on it.

A *unit* is what several annotators can label: a whole query, or a (query, document) pair, of one task.
When two or more annotators labelled the same unit, their failure types are compared: Cohen's kappa
(scikit-learn) for each pair of annotators over the units both labelled, and Fleiss' kappa (statsmodels)
when three or more annotators labelled the same units. Units whose annotators disagree are listed to be
adjudicated; together with the proposed "relevant but unjudged" additions they make the review queue.
An LLM judge's proposals (``Annotation.by_model``) are suggestions, not an annotator: they enter the
review queue as proposed additions, never the agreement or the disagreements.
``agreement_report`` gives both kappas per task before and after adjudication (``with_decisions`` says
precisely what "after" means).
"""

from __future__ import annotations

import copy
import csv
import io
import itertools
import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import fleiss_kappa

from .adjudication import Decision, current
from .annotations import Annotation

Unit = tuple[str, str, str, str | None]  # (dataset, task, query_id, doc_id or None for the whole query)


def unit_of(annotation: Annotation) -> Unit:
    return (annotation.dataset, annotation.task, annotation.query_id, annotation.doc_id)


def ratings(labels: Iterable[Annotation]) -> dict[Unit, dict[str, Annotation]]:
    """Each unit's label per annotator (an annotator's latest label on a unit stands for them)."""
    out: dict[Unit, dict[str, Annotation]] = {}
    for annotation in sorted(labels, key=lambda a: (a.created_at, a.id or 0)):
        out.setdefault(unit_of(annotation), {})[annotation.annotator] = annotation
    return out


@dataclass(frozen=True)
class PairAgreement:
    """Cohen's kappa of two annotators over the units both labelled (NaN when undefined)."""

    annotator_a: str
    annotator_b: str
    units: int
    agreed: int
    kappa: float


@dataclass(frozen=True)
class GroupAgreement:
    """Fleiss' kappa of ``raters`` annotators over the units each of them labelled."""

    annotators: tuple[str, ...]
    units: int
    kappa: float


@dataclass(frozen=True)
class Agreement:
    pairs: tuple[PairAgreement, ...]
    group: GroupAgreement | None
    shared_units: int  # units labelled by two or more annotators


def _kappa(compute, *args) -> float:  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one category only: kappa is undefined, reported as NaN
        value = float(compute(*args))
    return value if math.isfinite(value) else float("nan")


def agreement(labels: Iterable[Annotation], *, blind_only: bool = False) -> Agreement:
    """Cohen's kappa per annotator pair, and Fleiss' kappa for three or more annotators on common units.

    ``blind_only``: count only labels made blind (before the annotator saw the judgements or others'
    labels), so agreement is not inflated by people copying what they were shown. A model's proposals
    never count: agreement is between people.
    """
    labels = [a for a in labels if not a.by_model and (a.blind or not blind_only)]
    by_unit = {unit: rated for unit, rated in ratings(labels).items() if len(rated) >= 2}
    annotators = sorted({name for rated in by_unit.values() for name in rated})
    pairs = []
    for a, b in itertools.combinations(annotators, 2):
        both = [
            (rated[a].failure_type, rated[b].failure_type) for rated in by_unit.values() if a in rated and b in rated
        ]
        if not both:
            continue
        first, second = zip(*both)
        kappa = float("nan") if len(both) < 2 else _kappa(cohen_kappa_score, list(first), list(second))
        pairs.append(PairAgreement(a, b, len(both), sum(x == y for x, y in both), kappa))
    group = None
    counts = pd.Series([len(rated) for rated in by_unit.values()], dtype=int)
    if len(counts) and counts.max() >= 3:
        # Fleiss' kappa needs the same number of ratings per unit: use the most common count of 3 or more.
        raters = int(counts[counts >= 3].mode().max())
        units = [rated for rated in by_unit.values() if len(rated) == raters]
        categories = sorted({a.failure_type for rated in units for a in rated.values()})
        table = np.array([[sum(a.failure_type == c for a in rated.values()) for c in categories] for rated in units])
        names = tuple(sorted({name for rated in units for name in rated}))
        kappa = float("nan") if len(units) < 2 else _kappa(fleiss_kappa, table)
        group = GroupAgreement(names, len(units), kappa)
    return Agreement(tuple(pairs), group, len(by_unit))


def disagreements(
    labels: Iterable[Annotation], *, unresolved_only: bool = True
) -> list[tuple[Unit, dict[str, Annotation]]]:
    """Units where two or more annotators (people: a model's proposals are left out) chose different
    failure types; with ``unresolved_only``, those no reviewer has adjudicated yet."""
    out = []
    for unit, rated in ratings(a for a in labels if not a.by_model).items():
        if len(rated) < 2 or len({a.failure_type for a in rated.values()}) < 2:
            continue
        if unresolved_only and any(a.reviewer for a in rated.values()):
            continue
        out.append((unit, rated))
    return out


@dataclass(frozen=True)
class QueueItem:
    """One decision for a reviewer: a proposed addition (one label) or a disagreement (several)."""

    kind: str  # "proposed addition" or "disagreement"
    unit: Unit
    labels: tuple[Annotation, ...]

    @property
    def annotators(self) -> tuple[str, ...]:
        return tuple(a.annotator for a in self.labels)


def review_queue(
    labels: Iterable[Annotation],
    *,
    task: str | None = None,
    annotator: str | None = None,
    include_disagreements: bool = True,
) -> list[QueueItem]:
    """Proposed "relevant but unjudged" additions and unresolved disagreements, in one list (oldest
    first), optionally only one task's or those involving one annotator. An addition that is part of a
    disagreement appears once, as the disagreement; without ``include_disagreements`` (they are settled
    on the Adjudication page, ``adjudication``) it does not appear at all."""
    labels = [a for a in labels if task is None or a.task == task]
    items = [QueueItem("disagreement", unit, tuple(rated.values())) for unit, rated in disagreements(labels)]
    in_dispute = {item.unit for item in items}
    if not include_disagreements:
        items = []
    items += [
        QueueItem("proposed addition", unit_of(a), (a,))
        for a in labels
        if a.failure_type == "relevant_unjudged" and a.status == "proposed" and unit_of(a) not in in_dispute
    ]
    if annotator is not None:
        items = [item for item in items if annotator in item.annotators]
    return sorted(items, key=lambda item: min(a.created_at for a in item.labels))


# --------------------------------------------------------------------------- before and after adjudication


def with_decisions(labels: Iterable[Annotation], decisions: Iterable[Decision]) -> list[Annotation]:
    """The labels as adjudicated: on every unit with a standing decision, each label's failure type is
    the decision's (the disagreeing labels are replaced; the agreeing ones already equal it). Units
    without a decision keep their labels. Copies: the stored labels are never changed."""
    standing = current(decisions)
    out = []
    for annotation in labels:
        decision = standing.get(unit_of(annotation))
        if decision is not None and decision.failure_type != annotation.failure_type:
            annotation = copy.copy(annotation)
            object.__setattr__(annotation, "failure_type", decision.failure_type)
        out.append(annotation)
    return out


@dataclass(frozen=True)
class ReportRow:
    """One line of the agreement report: a pair's Cohen's kappa or the group's Fleiss' kappa on one task,
    before and after adjudication, over the same units (``agreed_*`` is None for Fleiss' kappa)."""

    dataset: str
    task: str
    measure: str  # "Cohen's kappa" or "Fleiss' kappa"
    annotators: tuple[str, ...]
    units: int
    adjudicated: int  # of these units, how many have a standing decision
    agreed_before: int | None
    agreed_after: int | None
    kappa_before: float
    kappa_after: float


REPORT_HEADER = (
    "dataset",
    "task",
    "measure",
    "annotators",
    "units",
    "adjudicated_units",
    "agreed_before",
    "agreed_after",
    "kappa_before",
    "kappa_after",
)


def agreement_report(
    labels: Iterable[Annotation], decisions: Iterable[Decision], *, blind_only: bool = False
) -> list[ReportRow]:
    """Agreement per task and per annotator pair, before and after adjudication.

    *Before*: ``agreement`` on the labels as saved (``blind_only``: only blind labels, as the page counts
    them with sign-in on). *After*: the same, on ``with_decisions(labels)``: every counted label on a
    decided unit takes the decision's failure type. Which labels and units count is decided before the
    replacement, so both columns measure the same units and pairs; only the failure types differ. A
    model's proposals never count.
    """
    labels = [a for a in labels if not a.by_model and (a.blind or not blind_only)]
    decisions = list(decisions)
    standing = current(decisions)
    rows: list[ReportRow] = []
    for dataset, task in sorted({(a.dataset, a.task) for a in labels}):
        mine = [a for a in labels if (a.dataset, a.task) == (dataset, task)]
        rated = {unit: r for unit, r in ratings(mine).items() if len(r) >= 2}
        before, after = agreement(mine), agreement(with_decisions(mine, decisions))
        for b, a in zip(before.pairs, after.pairs):
            shared = [u for u, r in rated.items() if b.annotator_a in r and b.annotator_b in r]
            rows.append(
                ReportRow(
                    dataset,
                    task,
                    "Cohen's kappa",
                    (b.annotator_a, b.annotator_b),
                    b.units,
                    sum(u in standing for u in shared),
                    b.agreed,
                    a.agreed,
                    b.kappa,
                    a.kappa,
                )
            )
        if before.group is not None and after.group is not None:
            counts = pd.Series([len(r) for r in rated.values()], dtype=int)
            raters = int(counts[counts >= 3].mode().max())  # as ``agreement`` chooses them
            counted = [u for u, r in rated.items() if len(r) == raters]
            rows.append(
                ReportRow(
                    dataset,
                    task,
                    "Fleiss' kappa",
                    before.group.annotators,
                    before.group.units,
                    sum(u in standing for u in counted),
                    None,
                    None,
                    before.group.kappa,
                    after.group.kappa,
                )
            )
    return rows


def report_csv(rows: Iterable[ReportRow]) -> str:
    """The report as CSV; annotators are joined with " · "; an undefined kappa is an empty cell."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(REPORT_HEADER)
    for r in rows:
        cells = [
            r.dataset,
            r.task,
            r.measure,
            " · ".join(r.annotators),
            r.units,
            r.adjudicated,
            r.agreed_before,
            r.agreed_after,
            r.kappa_before,
            r.kappa_after,
        ]
        writer.writerow(["" if c is None or (isinstance(c, float) and math.isnan(c)) else c for c in cells])
    return buffer.getvalue()
