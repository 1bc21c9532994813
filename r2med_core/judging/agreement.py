"""Agreement between annotators, before and after adjudication.

An *item* is what several annotators can rate: a unit (a whole query, or a (query, document) pair, of
one task) in one vocabulary (``annotations.Vocabulary``): a document's relevance grade, or a failure
type. The two are measured apart — a grade and a failure type answer different questions — and an
annotator's latest grade on a document and their latest failure type on it both count. A grade is
compared as the grade it stands for, whichever page gave it (``annotations.rating_of``). When two or
more annotators rated the same items: Cohen's kappa (scikit-learn) for each pair of annotators over the
items both rated, and Fleiss' kappa (statsmodels) when three or more rated the same items. An LLM
judge's proposals (``Annotation.by_model``) are suggestions, not an annotator: they never count here,
and neither does an annotator on a document where their latest judgement is *unsure* (no grade:
``adjudication.without_unsure``).
``agreement_report`` gives both kappas per task and vocabulary before and after adjudication
(``with_decisions`` says precisely what "after" means). Disagreements are settled on the Adjudication
page (``adjudication.adjudication_items``); proposals wait in the review queue (``team.review_queue``).
"""

from __future__ import annotations

import copy
import csv
import io
import itertools
import math
import warnings
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import fleiss_kappa

from r2med_core.judging.adjudication import Decision, current, item_of, latest_ratings, without_unsure
from r2med_core.judging.annotations import Annotation, Vocabulary, rating_of, vocabulary_of

#: Both vocabularies, in the order the pages show them.
VOCABULARIES: tuple[Vocabulary, ...] = ("grade", "failure type")


@dataclass(frozen=True)
class PairAgreement:
    """Cohen's kappa of two annotators over the items both rated (NaN when undefined: ``cohen_kappa``)."""

    annotator_a: str
    annotator_b: str
    units: int
    agreed: int
    kappa: float


@dataclass(frozen=True)
class GroupAgreement:
    """Fleiss' kappa of ``annotators`` over the items each of them rated."""

    annotators: tuple[str, ...]
    units: int
    kappa: float


@dataclass(frozen=True)
class Agreement:
    pairs: tuple[PairAgreement, ...]
    group: GroupAgreement | None
    shared_units: int  # items rated by two or more annotators


def cohen_kappa(first: Sequence[Hashable], second: Sequence[Hashable]) -> float:
    """Cohen's kappa (scikit-learn's) of two raters over the same items, ``first[i]`` against ``second[i]``.

    The one rule for an undefined kappa, NaN (which every page shows as "undefined" and every CSV as an
    empty cell): fewer than two pairs, or a rater who gave a single category throughout. With a single
    category the agreement expected by chance equals the agreement observed, so the kappa is 0 (or 0/0)
    however often the two agreed: it says nothing, and is never shown as a number.
    """
    if len(first) != len(second):
        raise ValueError(f"Cohen's kappa needs the same items on both sides, got {len(first)} and {len(second)}")
    if len(first) < 2 or len(set(first)) < 2 or len(set(second)) < 2:
        return float("nan")
    return _finite(cohen_kappa_score, list(first), list(second))


def _finite(compute: Callable[..., Any], *args: Any) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate table: undefined, reported as NaN
        value = float(compute(*args))
    return value if math.isfinite(value) else float("nan")


def agreement(labels: Iterable[Annotation], vocabulary: Vocabulary, *, blind_only: bool = False) -> Agreement:
    """Cohen's kappa per annotator pair, and Fleiss' kappa for three or more annotators on common items,
    over the ratings in ``vocabulary`` (the grades, or the failure types).

    ``blind_only``: count only labels made blind (before the annotator saw the judgements or others'
    labels), so agreement is not inflated by people copying what they were shown. A model's proposals
    never count: agreement is between people; nor does an annotator who is unsure of a document.
    """
    people = without_unsure(a for a in labels if not a.by_model)
    labels = [a for a in people if (a.blind or not blind_only) and vocabulary_of(a) == vocabulary]
    by_item = {item: rated for item, rated in latest_ratings(labels).items() if len(rated) >= 2}
    annotators = sorted({name for rated in by_item.values() for name in rated})
    pairs = []
    for a, b in itertools.combinations(annotators, 2):
        both = [(rating_of(rated[a]), rating_of(rated[b])) for rated in by_item.values() if a in rated and b in rated]
        if not both:
            continue
        first, second = zip(*both)
        kappa = cohen_kappa(first, second)
        pairs.append(PairAgreement(a, b, len(both), sum(x == y for x, y in both), kappa))
    group = None
    counts = pd.Series([len(rated) for rated in by_item.values()], dtype=int)
    if len(counts) and counts.max() >= 3:
        # Fleiss' kappa needs the same number of ratings per item: use the most common count of 3 or more.
        raters = int(counts[counts >= 3].mode().max())
        items = [rated for rated in by_item.values() if len(rated) == raters]
        categories = sorted({rating_of(a) for rated in items for a in rated.values()})
        table = np.array([[sum(rating_of(a) == c for a in rated.values()) for c in categories] for rated in items])
        names = tuple(sorted({name for rated in items for name in rated}))
        kappa = float("nan") if len(items) < 2 else _finite(fleiss_kappa, table)
        group = GroupAgreement(names, len(items), kappa)
    return Agreement(tuple(pairs), group, len(by_item))


# --------------------------------------------------------------------------- before and after adjudication


def with_decisions(labels: Iterable[Annotation], decisions: Iterable[Decision]) -> list[Annotation]:
    """The labels as adjudicated: on every item with a standing decision, each label says what the
    decision says (the disagreeing labels are replaced; the agreeing ones already say it). Items without
    a decision keep their labels. Copies: the stored labels are never changed."""
    standing = current(decisions)
    out = []
    for annotation in labels:
        decision = standing.get(item_of(annotation))
        if decision is not None and decision.rating != rating_of(annotation):
            annotation = copy.copy(annotation)
            object.__setattr__(annotation, "failure_type", decision.rating)
        out.append(annotation)
    return out


@dataclass(frozen=True)
class ReportRow:
    """One line of the agreement report: a pair's Cohen's kappa or the group's Fleiss' kappa on one task's
    ratings in one vocabulary, before and after adjudication, over the same items (``agreed_*`` is None
    for Fleiss' kappa)."""

    dataset: str
    task: str
    vocabulary: Vocabulary
    measure: str  # "Cohen's kappa" or "Fleiss' kappa"
    annotators: tuple[str, ...]
    units: int
    adjudicated: int  # of these items, how many have a standing decision
    agreed_before: int | None
    agreed_after: int | None
    kappa_before: float
    kappa_after: float


REPORT_HEADER = (
    "dataset",
    "task",
    "ratings",
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
    """Agreement per task, vocabulary (the grades, then the failure types) and annotator pair, before and
    after adjudication.

    *Before*: ``agreement`` on the labels as saved (``blind_only``: only blind labels, as the page counts
    them with sign-in on). *After*: the same, on ``with_decisions(labels)``: every counted label on a
    decided item says what the decision says. Which labels and items count is decided before the
    replacement, so both columns measure the same items and pairs; only the ratings differ. A model's
    proposals never count, nor an annotator unsure of a document (decided or not).
    """
    labels = [a for a in without_unsure(a for a in labels if not a.by_model) if a.blind or not blind_only]
    decisions = list(decisions)
    standing = current(decisions)
    rows: list[ReportRow] = []
    for dataset, task in sorted({(a.dataset, a.task) for a in labels}):
        for vocabulary in VOCABULARIES:
            mine = [a for a in labels if (a.dataset, a.task) == (dataset, task) and vocabulary_of(a) == vocabulary]
            rated = {item: r for item, r in latest_ratings(mine).items() if len(r) >= 2}
            before = agreement(mine, vocabulary)
            after = agreement(with_decisions(mine, decisions), vocabulary)
            for b, a in zip(before.pairs, after.pairs):
                shared = [i for i, r in rated.items() if b.annotator_a in r and b.annotator_b in r]
                rows.append(
                    ReportRow(
                        dataset,
                        task,
                        vocabulary,
                        "Cohen's kappa",
                        (b.annotator_a, b.annotator_b),
                        b.units,
                        sum(i in standing for i in shared),
                        b.agreed,
                        a.agreed,
                        b.kappa,
                        a.kappa,
                    )
                )
            if before.group is not None and after.group is not None:
                counts = pd.Series([len(r) for r in rated.values()], dtype=int)
                raters = int(counts[counts >= 3].mode().max())  # as ``agreement`` chooses them
                counted = [i for i, r in rated.items() if len(r) == raters]
                rows.append(
                    ReportRow(
                        dataset,
                        task,
                        vocabulary,
                        "Fleiss' kappa",
                        before.group.annotators,
                        before.group.units,
                        sum(i in standing for i in counted),
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
            r.vocabulary,
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
