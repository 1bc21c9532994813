"""Descriptive statistics of a dataset for the Overview page (sizes, lengths, positives)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pandas as pd

from .data import Dataset
from .tasks import TASKS, TaskInfo

R2MED_LICENSE = "CC BY 4.0 (R2MED datasets on the Hugging Face hub)"


@dataclass(frozen=True)
class DatasetSummary:
    title: str
    description: str
    family: str
    license: str
    n_queries: int
    n_documents: int
    mean_positives: float
    n_rewrites: int
    positives_per_query: pd.DataFrame
    grade_counts: dict[int, int]
    published: TaskInfo | None


def dataset_summary(dataset: Dataset) -> DatasetSummary:
    """Counts and labels shown at the top of the Overview page."""
    rows = [
        {"query_id": qid, "positives": sum(1 for g in grades.values() if g > 0)}
        for qid, grades in dataset.qrels.items()
        if any(g > 0 for g in grades.values())
    ]
    positives = pd.DataFrame(rows, columns=["query_id", "positives"])
    grades = Counter(g for judged in dataset.qrels.values() for g in judged.values())
    published = TASKS.get(dataset.name)
    meta = dataset.meta
    return DatasetSummary(
        title=str(meta.get("name") or dataset.name),
        description=str(meta.get("description") or (f"R2MED task {dataset.name}" if published else dataset.source)),
        family=dataset.family.value if dataset.family else "not an R2MED family",
        license=str(meta.get("license") or (R2MED_LICENSE if published else "see the dataset's own terms")),
        n_queries=len(dataset.queries),
        n_documents=len(dataset.corpus),
        mean_positives=float(positives["positives"].mean()) if len(positives) else 0.0,
        n_rewrites=len(dataset.rewrites),
        positives_per_query=positives,
        grade_counts=dict(sorted(grades.items())),
        published=published,
    )


def length_table(dataset: Dataset) -> pd.DataFrame:
    """One row per query and document with its length in words (for length histograms)."""
    rows = [{"kind": "query", "words": len(text.split())} for text in dataset.queries.values()]
    rows += [{"kind": "document", "words": len(text.split())} for text in dataset.corpus.values()]
    return pd.DataFrame(rows)
