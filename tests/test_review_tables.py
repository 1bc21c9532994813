"""The judging pages' tables and chart axes (``r2med_core.reporting.review_tables``, ``reporting.figures``):
which columns come first, what each cell says, and axes that mean what they show (issue 36). The browser
measures the same pages in tests/test_browser_layout.py."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from r2med_core.judging.adjudication import decide, history
from r2med_core.judging.agreement import agreement_report
from r2med_core.judging.annotations import Annotation, AnnotationStore, labels_frame
from r2med_core.judging.hard import hard_items
from r2med_core.reporting.figures import count_axis, equal_axes
from r2med_core.reporting.review_tables import (
    LABEL_COLUMNS,
    LABEL_KEY_COLUMNS,
    agreement_table,
    code_label,
    hard_table,
    label_counts,
    labels_table,
)

COMMON = {"dataset": "demo:t", "task": "t", "system": "bm25", "blind": True}


def _labels() -> list[Annotation]:
    return [
        Annotation(**COMMON, query_id="q1", doc_id="d1", failure_type="grade_2", annotator="alice", time_ms=40_000),
        Annotation(**COMMON, query_id="q1", doc_id="d1", failure_type="grade_0", annotator="bob", time_ms=20_000,
                   note="off topic"),
        Annotation(**COMMON, query_id="q1", doc_id="d2", failure_type="not_relevant", annotator="alice"),
        Annotation(**COMMON, query_id="q1", doc_id="d2", failure_type="grade_0", annotator="bob", rank=3),
        Annotation(**COMMON, query_id="q1", failure_type="missing_reasoning_step", annotator="alice"),
    ]  # fmt: skip


def test_the_labels_table_opens_on_the_unit_and_what_was_said_then_who_and_the_review() -> None:
    frame = labels_frame(_labels())
    table = labels_table(frame)
    assert list(table.columns) == list(LABEL_COLUMNS)
    assert list(table.columns[: len(LABEL_KEY_COLUMNS)]) == ["query", "document", "label"]
    assert list(table.columns[3:5]) == ["annotator", "status"]  # then who, and whether it counts yet
    assert table.columns[-1] == "id" and "dataset" in list(table.columns[-3:])  # the bookkeeping last
    first, second, third, fourth, query = table.to_dict("records")
    assert (first["query"], first["document"], first["label"], first["annotator"]) == (
        "q1", "d1", "Grade 2: highly relevant", "alice",
    )  # fmt: skip
    assert (first["seconds"], first["rank"], first["blind"], first["status"]) == ("40.0", "", "yes", "proposed")
    assert second["note"] == "off topic" and fourth["rank"] == "3"
    assert third["label"] == "Grade 0: not relevant"  # the older code reads as the grade it stands for
    assert query["document"] == "(the query)" and query["label"] == "Missing reasoning step" and query["seconds"] == ""


def test_a_reviewed_label_says_by_whom() -> None:
    reviewed = Annotation(**COMMON, query_id="q", doc_id="d", failure_type="grade_1", annotator="a", accepted=True,
                          reviewer="rev", reviewed_at="2026-01-01T00:00:00+00:00")  # fmt: skip
    frame = labels_frame([reviewed])
    assert labels_table(frame)["status"].tolist() == ["accepted by rev"]


def test_label_counts_count_a_grade_once_whichever_code_stored_it_and_say_which_are_grades() -> None:
    counts = label_counts(a.failure_type for a in _labels())
    assert counts.to_dict("records") == [
        {"label": "Grade 0: not relevant", "ratings": "grade", "labels": 3},
        {"label": "Grade 2: highly relevant", "ratings": "grade", "labels": 1},
        {"label": "Missing reasoning step", "ratings": "failure type", "labels": 1},
    ]
    assert label_counts([]).empty and list(label_counts([]).columns) == ["label", "ratings", "labels"]
    assert code_label("a_type_registered_elsewhere") == "a_type_registered_elsewhere"


def test_the_agreement_table_puts_the_kappas_right_after_who(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = AnnotationStore(tmp_path / "a.sqlite")
    for label in _labels():
        store.add(label)
    decide(store, ("demo:t", "t", "q1", "d1"), "grade_2", "rev", grade=2)
    report = agreement_report(store.list(), history(store))
    table = agreement_table(report)
    assert list(table.columns[:5]) == ["task", "ratings", "annotators", "kappa before", "kappa after"]
    (row,) = table.to_dict("records")  # one pair, on grades (the failure type has one annotator)
    assert (row["annotators"], row["items"], row["adjudicated"]) == ("alice · bob", 2, 1)
    (measured,) = report
    for column, value in (("kappa before", measured.kappa_before), ("kappa after", measured.kappa_after)):
        assert row[column] == ("undefined" if math.isnan(value) else f"{value:.3f}")
    assert (row["same rating before"], row["same rating after"]) == (1, 2)


def test_the_hard_items_table_says_which_document_what_was_said_and_how_hard() -> None:
    items = hard_items(_labels())
    table = hard_table(items)
    assert list(table.columns) == [
        "query", "document", "judgements", "hardness", "median time (s)", "same grade (pairs)", "task",
    ]  # fmt: skip
    assert table.to_dict("records") == [
        {"query": "q1", "document": "d1", "judgements": "Grade 2: highly relevant, Grade 0: not relevant",
         "hardness": "30.0", "median time (s)": "30.0", "same grade (pairs)": "0%", "task": "t"}
    ]  # fmt: skip
    assert hard_table([]).empty


@pytest.mark.parametrize(
    ("top", "ticks"),
    [(0, [0, 1]), (1, [0, 1]), (7, list(range(8))), (10, list(range(11))), (24, [0, 5, 10, 15, 20]),
     (876, list(range(0, 876, 100)))],
)  # fmt: skip
def test_a_count_axis_runs_from_0_to_the_count_in_whole_numbers(top: int, ticks: list[int]) -> None:
    axis = count_axis(top)
    assert axis["range"] == [0, max(1, top)] and axis["tickformat"] == "d" and axis["tick0"] == 0
    step = axis["dtick"]
    assert isinstance(step, int) and list(range(0, max(1, top) + 1, step)) == ticks


def test_equal_axes_give_both_axes_one_range_and_one_scale() -> None:
    layout = equal_axes(pd.Series([0.0, 0.1, 0.32]))
    x, y = layout["xaxis"], layout["yaxis"]
    assert x["range"] == y["range"] and x["range"][0] < 0.0 and x["range"][1] > 0.32
    assert (y["scaleanchor"], y["scaleratio"]) == ("x", 1)
    assert x["constrain"] == y["constrain"] == "domain"  # the plot shrinks to a square, the ranges stay equal
