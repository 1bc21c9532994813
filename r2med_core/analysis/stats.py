"""Descriptive statistics of a dataset for the Overview page (sizes, lengths, positives).

Everything here is computed once per dataset and is small: length distributions come back as bin
counts, never one value per document, so a 357k-document task sends a few hundred numbers to a chart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from r2med_core.data import Dataset
from r2med_core.tasks import TASKS, TaskInfo

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

    @property
    def positives_histogram(self) -> pd.DataFrame:
        """How many queries have 1, 2, 3 … relevant documents (counts, not one row per query)."""
        counts = self.positives_per_query["positives"].value_counts().sort_index()
        return pd.DataFrame({"positives": counts.index.astype(int), "queries": counts.to_numpy()})


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


def word_counts(texts: Iterable[str]) -> np.ndarray:
    """Words per text (whitespace-separated), as the Overview counts them."""
    return np.fromiter((len(text.split()) for text in texts), dtype=np.int64)


@dataclass(frozen=True)
class LengthHistogram:
    """Query and document lengths in shared bins; the last bin also holds the few longest texts."""

    edges: np.ndarray  # bin edges in words, len(bins) + 1
    counts: dict[str, np.ndarray]  # kind ("query" / "document") -> count per bin
    medians: dict[str, float]
    clipped_at: int | None  # texts longer than this were counted in the last bin

    def frame(self) -> pd.DataFrame:
        """One row per (kind, bin): its range, count and share of that kind's texts (for a bar chart)."""
        rows = []
        for kind, counts in self.counts.items():
            total = max(int(counts.sum()), 1)
            for low, high, count in zip(self.edges[:-1], self.edges[1:], counts):
                rows.append(
                    {
                        "kind": kind,
                        "from": int(low),
                        "to": int(high),
                        "middle": float(low + high) / 2,
                        "count": int(count),
                        "share": 100.0 * int(count) / total,
                    }
                )
        return pd.DataFrame(rows, columns=["kind", "from", "to", "middle", "count", "share"])


def length_histogram(dataset: Dataset, bins: int = 40, tail: float = 99.5) -> LengthHistogram:
    """Bin counts of query and document lengths in words; one pass over the corpus.

    Bins are shared by both kinds and span up to the ``tail`` percentile, so one 20,000-word document
    does not squeeze every other bar into the first bin.
    """
    lengths = {"query": word_counts(dataset.queries.values()), "document": word_counts(dataset.corpus.values())}
    everything = np.concatenate(list(lengths.values()))
    if not len(everything):
        everything = np.zeros(1, dtype=np.int64)
    top = max(int(np.ceil(np.percentile(everything, tail))), 1)
    edges = np.histogram_bin_edges(np.clip(everything, 0, top), bins=bins, range=(0, top))
    counts = {kind: np.histogram(np.clip(v, 0, top), bins=edges)[0] for kind, v in lengths.items()}
    return LengthHistogram(
        edges=edges,
        counts=counts,
        medians={kind: float(np.median(v)) if len(v) else 0.0 for kind, v in lengths.items()},
        clipped_at=top if int(everything.max()) > top else None,
    )


# --------------------------------------------------------------------------- data facts

#: A document shorter than this many words is counted as "very short" (a title, a stub, a caption).
SHORT_WORDS = 20


@dataclass(frozen=True)
class DataFacts:
    """What a leaderboard never shows about a task's data, computed from the loaded files.

    ``duplicate_groups``: document ids that share one exact text (surrounding whitespace ignored),
    largest group first; a retriever can only rank one copy first, and qrels may judge one copy and
    not the other. ``shared_positives``: documents relevant (grade > 0) to two or more queries.
    """

    n_documents: int
    duplicate_groups: tuple[tuple[str, ...], ...]
    n_positive_judgements: int
    n_positive_documents: int
    shared_positives: dict[str, int]  # document id -> how many queries judge it relevant (only 2+)
    short_documents: tuple[str, ...]
    short_words: int = SHORT_WORDS

    @property
    def n_duplicates(self) -> int:
        """Documents whose text an earlier document already has (all copies but one per group)."""
        return sum(len(group) - 1 for group in self.duplicate_groups)

    def duplicates_frame(self, corpus: dict[str, str], width: int = 120) -> pd.DataFrame:
        """One row per group of identical documents: how many copies, their ids, the text's start."""
        rows = [
            {"copies": len(group), "documents": ", ".join(group), "text": " ".join(corpus[group[0]].split())[:width]}
            for group in self.duplicate_groups
        ]
        return pd.DataFrame(rows, columns=["copies", "documents", "text"])

    def sentences(self) -> list[str]:
        """The facts as sentences for the Overview (each with its count and share)."""
        n = max(self.n_documents, 1)
        out = [
            f"{self.n_duplicates:,} of {self.n_documents:,} documents ({100 * self.n_duplicates / n:.1f} %) repeat "
            f"another document's text exactly, in {len(self.duplicate_groups):,} groups of identical texts."
        ]
        if self.n_positive_documents:
            shared = (
                f"{len(self.shared_positives):,} of them are relevant to more than one query (one to as many as "
                f"{max(self.shared_positives.values())})"
                if self.shared_positives
                else "each is relevant to one query only"
            )
            out.append(
                f"{self.n_positive_judgements:,} relevance judgements point at {self.n_positive_documents:,} "
                f"documents: {shared}."
            )
        short = len(self.short_documents)
        out.append(
            f"{short:,} {'document' if short == 1 else 'documents'} ({100 * short / n:.1f} %) "
            f"{'is' if short == 1 else 'are'} shorter than {self.short_words} words."
        )
        return out


def data_facts(dataset: Dataset, short_words: int = SHORT_WORDS) -> DataFacts:
    """Duplicate texts, documents relevant to several queries and very short documents, in one pass
    over the corpus."""
    by_text: dict[str, list[str]] = {}  # keys are the corpus's own strings (strip() returns them as is)
    short: list[str] = []
    for doc_id, text in dataset.corpus.items():
        body = text.strip()
        by_text.setdefault(body, []).append(doc_id)
        if len(body.split()) < short_words:
            short.append(doc_id)
    groups = sorted((tuple(g) for g in by_text.values() if len(g) > 1), key=lambda g: (-len(g), g[0]))
    positives = Counter(doc for judged in dataset.qrels.values() for doc, grade in judged.items() if grade > 0)
    return DataFacts(
        n_documents=len(dataset.corpus),
        duplicate_groups=tuple(groups),
        n_positive_judgements=sum(positives.values()),
        n_positive_documents=len(positives),
        shared_positives={doc: n for doc, n in positives.items() if n > 1},
        short_documents=tuple(short),
        short_words=short_words,
    )
