"""The judging pages' tables as they are shown: which columns a reader needs, in which order.

Why a module: a table wider than its page column hides its last columns, and on a 1000 px window the
Adjudication page lost "kappa after", Hard items its hardness and the Annotations page every column but
id, dataset, task and query. Which columns matter is a rule, made here once for every page that shows
these tables (the pages only draw what they get): the columns that say *what* was said and *on what*
come first, then who said it and its state, then the bookkeeping (task, dataset, id) last.

The short tables (an agreement report, the hardest documents) are shown whole, wrapped in the page's
column; the table of every label, which may be long, scrolls sideways with :data:`LABEL_KEY_COLUMNS`
pinned at its left.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from r2med_core.judging.agreement import ReportRow
from r2med_core.judging.annotations import TAXONOMY, vocabulary_of
from r2med_core.judging.hard import HardItem

#: The columns of :func:`labels_table` that stay in view while it scrolls sideways: which unit, and what
#: was said on it.
LABEL_KEY_COLUMNS: tuple[str, ...] = ("query", "document", "label")

#: The columns of :func:`labels_table`, in the order shown: the key ones, then who and the review state,
#: the note, then where it was seen and the bookkeeping.
LABEL_COLUMNS: tuple[str, ...] = (
    *LABEL_KEY_COLUMNS,
    "annotator",
    "status",
    "note",
    "system",
    "rank",
    "seconds",
    "blind",
    "saved",
    "task",
    "dataset",
    "id",
)


def code_label(code: object) -> str:
    """A stored label code as people read it ("Grade 0: not relevant", "Lexical trap"); an unknown code
    (another session's registered type) as stored."""
    return TAXONOMY[code].label if isinstance(code, str) and code in TAXONOMY else str(code)


def review_status(status: str, reviewer: object) -> str:
    """A label's review state as shown: proposed, or accepted / rejected by whom."""
    return f"{status} by {reviewer}" if isinstance(reviewer, str) and reviewer else status


def labels_table(frame: pd.DataFrame) -> pd.DataFrame:
    """``annotations.labels_frame`` as the Annotations page shows it: :data:`LABEL_COLUMNS`, one row per label."""

    def column(name: str) -> list[Any]:
        return list(frame[name]) if name in frame else [None] * len(frame)

    def shown(value: Any, scale: float = 1, spec: str = "{:g}") -> str:  # "" where nothing was recorded
        return "" if value is None or bool(pd.isna(value)) else spec.format(float(value) / scale)

    return pd.DataFrame(
        {
            "query": column("query_id"),
            "document": [d if isinstance(d, str) else "(the query)" for d in column("doc_id")],
            "label": [code_label(c) for c in column("failure_type")],
            "annotator": column("annotator"),
            "status": [review_status(s, r) for s, r in zip(column("status"), column("reviewer"))],
            "note": column("note"),
            "system": column("system"),
            "rank": [shown(r) for r in column("rank")],
            "seconds": [shown(t, 1000, "{:.1f}") for t in column("time_ms")],
            "blind": ["yes" if b else "" for b in column("blind")],
            "saved": [str(c or "")[:16] for c in column("created_at")],
            "task": column("task"),
            "dataset": column("dataset"),
            "id": column("id"),
        },
        columns=list(LABEL_COLUMNS),
    )


def label_counts(codes: Iterable[object]) -> pd.DataFrame:
    """How many labels say each thing: ``label`` (as read: a grade and the older code for it count as
    one), ``ratings`` ("grade" or "failure type": a relevance judgement or why a system failed) and
    ``labels``; most first."""
    counted: Counter[str] = Counter()
    ratings: dict[str, str] = {}
    for code in codes:
        label = code_label(code)
        counted[label] += 1
        ratings.setdefault(label, vocabulary_of(code) if isinstance(code, str) else "failure type")
    rows = [{"label": label, "ratings": ratings[label], "labels": n} for label, n in counted.items()]
    frame = pd.DataFrame(rows, columns=["label", "ratings", "labels"])
    return frame.sort_values(["labels", "label"], ascending=[False, True], ignore_index=True)


def _kappa(value: float) -> str:
    return "undefined" if math.isnan(value) else f"{value:.3f}"


def agreement_table(report: Sequence[ReportRow]) -> pd.DataFrame:
    """``agreement.agreement_report`` as the Adjudication page shows it: per task and ratings, who, then the
    kappas before and after adjudication (what a reviewer reads first), the items they rest on, how many
    were adjudicated, the same-rating counts and the measure."""
    return pd.DataFrame(
        [
            {
                "task": r.task,
                "ratings": f"{r.vocabulary}s",
                "annotators": " · ".join(r.annotators),
                "kappa before": _kappa(r.kappa_before),
                "kappa after": _kappa(r.kappa_after),
                "items": r.units,
                "adjudicated": r.adjudicated,
                "same rating before": "–" if r.agreed_before is None else r.agreed_before,
                "same rating after": "–" if r.agreed_after is None else r.agreed_after,
                "measure": r.measure,
            }
            for r in report
        ],
        columns=[
            "task", "ratings", "annotators", "kappa before", "kappa after", "items", "adjudicated",
            "same rating before", "same rating after", "measure",
        ],
    )  # fmt: skip


def hard_table(items: Sequence[HardItem]) -> pd.DataFrame:
    """``hard.hard_items`` as the Adjudication page shows them: which document of which query, what each
    person said, the hardness and what it is made of, then the task."""
    return pd.DataFrame(
        [
            {
                "query": h.unit[2],
                "document": h.unit[3],
                "judgements": ", ".join(code_label(code) for code in h.said),
                "hardness": f"{h.score:.1f}",
                "median time (s)": f"{h.seconds:.1f}",
                "same grade (pairs)": f"{h.agreement:.0%}",
                "task": h.unit[1],
            }
            for h in items
        ],
        columns=["query", "document", "judgements", "hardness", "median time (s)", "same grade (pairs)", "task"],
    )
