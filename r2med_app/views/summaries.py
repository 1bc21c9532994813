"""What pages show about a whole dataset, computed once per dataset rather than on every rerun: the
Overview's numbers and length histogram, the data facts (duplicates, shared positives, very short
documents) and the query picker's labels. A 357k-document corpus is read once per server.
"""

from __future__ import annotations

import streamlit as st

from r2med_app.views.datasets import dataset_key
from r2med_core import Dataset
from r2med_core.analysis.explore import shorten
from r2med_core.analysis.stats import (
    DataFacts,
    DatasetSummary,
    LengthHistogram,
    data_facts,
    dataset_summary,
    length_histogram,
)


@st.cache_resource(show_spinner=False, max_entries=16)
def _overview(key: str, _dataset: Dataset) -> tuple[DatasetSummary, LengthHistogram]:
    return dataset_summary(_dataset), length_histogram(_dataset)


@st.cache_resource(show_spinner=False, max_entries=16)
def _facts(key: str, _dataset: Dataset) -> DataFacts:
    return data_facts(_dataset)


def dataset_facts(dataset: Dataset) -> DataFacts:
    """Duplicates, shared positives and very short documents, computed once per dataset."""
    return _facts(dataset_key(dataset), dataset)


def dataset_overview(dataset: Dataset) -> tuple[DatasetSummary, LengthHistogram]:
    """The Overview's numbers, computed once per dataset (a 357k-document corpus is read once)."""
    return _overview(dataset_key(dataset), dataset)


@st.cache_resource(show_spinner=False, max_entries=16)
def _query_labels(key: str, _dataset: Dataset) -> dict[str, str]:
    return {qid: f"{qid} · {shorten(text, 110)}" for qid, text in _dataset.queries.items()}


def query_labels(dataset: Dataset) -> dict[str, str]:
    """The picker label of every query (id and first words), made once per dataset, not per rerun."""
    return _query_labels(dataset_key(dataset), dataset)
