"""Overview statistics: length histograms as bin counts, computed once per dataset."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

import r2med_app.views.summaries
from r2med_core import load_demo
from r2med_core.analysis.stats import data_facts, dataset_summary, length_histogram, word_counts
from r2med_core.data import Dataset
from tests.test_app import open_app


def _dataset(docs: list[str], queries: list[str]) -> Dataset:
    return Dataset(
        name="lengths",
        corpus={f"d{i}": t for i, t in enumerate(docs)},
        queries={f"q{i}": t for i, t in enumerate(queries)},
        qrels={"q0": {"d0": 1, "d1": 2}, "q1": {"d2": 1}},
        source="test",
    )


def test_histogram_counts_every_text_once_in_shared_bins() -> None:
    dataset = load_demo("clinical-case")
    hist = length_histogram(dataset, bins=20)
    assert len(hist.edges) == 21
    assert hist.counts["document"].sum() == len(dataset.corpus)
    assert hist.counts["query"].sum() == len(dataset.queries)
    exact = np.histogram(word_counts(dataset.corpus.values()), bins=hist.edges)[0]
    if hist.clipped_at is None:
        assert (hist.counts["document"] == exact).all()
    assert hist.medians["document"] == pytest.approx(np.median([len(t.split()) for t in dataset.corpus.values()]))
    frame = hist.frame()
    assert len(frame) == 2 * 20
    assert frame.groupby("kind")["share"].sum().round(6).tolist() == [100.0, 100.0]


def test_a_very_long_document_lands_in_the_last_bin_instead_of_stretching_the_axis() -> None:
    docs = ["word " * n for n in range(10, 210)] + ["word " * 50_000]
    hist = length_histogram(_dataset(docs, ["a b c", "d e"]), bins=10, tail=99.0)
    assert hist.clipped_at is not None and hist.clipped_at < 1000
    assert hist.edges[-1] == hist.clipped_at
    assert hist.counts["document"][-1] >= 1 and hist.counts["document"].sum() == len(docs)


def test_positives_histogram_counts_queries_per_number_of_relevant_documents() -> None:
    summary = dataset_summary(_dataset(["a", "b", "c"], ["x", "y", "z"]))
    assert summary.positives_histogram.to_dict("list") == {"positives": [1, 2], "queries": [1, 1]}
    assert summary.mean_positives == 1.5


def _values(data: object) -> np.ndarray:
    """A plotly JSON array: a list, or a typed array {"dtype", "bdata" (base64)}."""
    if isinstance(data, dict):
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"])
    return np.asarray(data)


def test_overview_sends_bins_and_computes_them_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def counting(dataset: Dataset, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        calls.append(dataset.name)
        return length_histogram(dataset, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(r2med_app.views.summaries, "length_histogram", counting)
    r2med_app.views.summaries._overview.clear()
    at = open_app("overview", task="clinical-case")
    at.run()
    at.switch_page("views/pages/overview.py").run()
    assert not at.exception and not at.error
    assert calls == ["clinical-case"]  # three renders, one pass over the corpus
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    bars = [trace for trace in chart["data"] if trace["type"] == "bar"]
    assert {len(_values(trace["x"])) for trace in bars} == {40}  # bins, not one value per document
    counts = _values(bars[0]["customdata"]).reshape(40, 3)[:, 2]
    assert counts.sum() == len(load_demo("clinical-case").corpus)
    assert len(at.get("plotly_chart")[0].proto.spec) < 20_000


def test_data_facts_count_duplicates_shared_positives_and_short_documents() -> None:
    long = "the patient had a long history of symptoms " * 4
    dataset = Dataset(
        name="facts",
        corpus={"a": long, "b": f"  {long}\n", "c": long, "d": "another " * 30, "e": "a stub", "f": "another " * 30},
        queries={"q0": "x", "q1": "y", "q2": "z"},
        qrels={"q0": {"a": 1, "d": 2, "e": 0}, "q1": {"a": 2, "d": 1}, "q2": {"a": 1, "f": 0}},
        source="test",
    )
    facts = data_facts(dataset)
    assert facts.duplicate_groups == (("a", "b", "c"), ("d", "f"))  # surrounding whitespace ignored
    assert facts.n_duplicates == 3
    assert facts.shared_positives == {"a": 3, "d": 2}  # grade 0 is not relevant
    assert (facts.n_positive_judgements, facts.n_positive_documents) == (5, 2)
    assert facts.short_documents == ("e",)
    lines = facts.sentences()
    assert lines[0] == (
        "3 of 6 documents (50.0 %) repeat another document's text exactly, in 2 groups of identical texts."
    )
    assert "5 relevance judgements point at 2 documents: 2 of them are relevant to more than one query" in lines[1]
    assert lines[2] == "1 document (16.7 %) is shorter than 20 words."
    table = facts.duplicates_frame(dataset.corpus)
    assert list(table["copies"]) == [3, 2] and table["documents"][0] == "a, b, c"


def test_the_overview_shows_the_data_facts() -> None:
    at = open_app("overview", task="clinical-case")
    texts = [m.value.replace("\\", "") for m in at.markdown]
    assert any("0 of 108 documents (0.0 %) repeat another document's text exactly" in t for t in texts)
    assert any("36 relevance judgements point at 36 documents: each is relevant to one query only." in t for t in texts)
