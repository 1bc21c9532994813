"""The failure diagnosis in the app (a diagnostic, not a benchmark setting): the Metrics page's chart
of failure classes and the explorer's class column and filter. Logic lives in ``r2med_core.analysis.diagnosis``.
"""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import streamlit as st

from r2med_app.views import annotation_db, naming, state, work
from r2med_app.views.markup import md
from r2med_app.views.panels import auth
from r2med_core.analysis.diagnosis import (
    DEFAULT_ORACLE,
    FAILURE_CLASSES,
    NOT_FAILED,
    Diagnosis,
    counts_frame,
    filter_by_class,
    with_failure_class,
)
from r2med_core.data import Dataset
from r2med_core.kinds.oracle import reference_answers
from r2med_core.reporting.figures import count_axis
from r2med_core.runs import Run
from r2med_core.systems import SpecError, parse_system

COLORS = {
    "possibly unjudged": "#9e9e9e",
    "no reference answer": "#d9d9d9",
    "reasoning gap": "#f28e2b",
    "representation gap": "#4e79a7",
}


def oracle_options() -> list[str]:
    """BM25's oracle (quick, the default) first, then the offline MiniLM's and that of every plain
    retriever in play, each on the answer and on query + answer."""
    out = []
    for retriever in dict.fromkeys(["bm25", "minilm", *state.view().systems]):
        for name in (f"oracle:{retriever}", f"oracle:{retriever}+q"):
            try:
                out.append(str(parse_system(name)))
            except SpecError:
                pass  # not a plain retriever (a fusion, an imported run, a rewrite)
    return list(dict.fromkeys([DEFAULT_ORACLE, *out]))


def chosen_oracle() -> str:
    return state.view().oracle or DEFAULT_ORACLE


def get_diagnosis(dataset: Dataset, system: str) -> Diagnosis | None:
    """The system's diagnosis against the chosen oracle (the workbench's), or None while a run it needs
    waits for a click on "Compute" or could not run (its panel is drawn)."""
    oracle, store, sight = chosen_oracle(), annotation_db.annotation_store(), auth.acting().sight
    found = work.ask(
        naming.system_label(oracle),
        lambda progress: work.bench().diagnosis(
            dataset, system, oracle=oracle, store=store, sight=sight, progress=progress
        ),
    )
    return None if found is None else found[0]


def metrics_section(dataset: Dataset, runs: dict[str, Run]) -> None:
    """Metrics page: failure classes of each system on this task, as a stacked bar per system."""
    st.subheader("Failure diagnosis (diagnostic, not a benchmark metric)")
    options = oracle_options()
    st.selectbox(
        "Answer oracle",
        options,
        format_func=naming.system_label,
        key=state.bound("oracle", options, DEFAULT_ORACLE),
        on_change=state.store("oracle"),
        help="Retrieval with each query's reference answer. BM25's is quick; a dense one may need a click.",
    )
    diagnoses = {}
    for name in runs:
        found = get_diagnosis(dataset, name)
        if found is None:
            return
        diagnoses[naming.system_label(name)] = found
    if not diagnoses:
        return
    first = next(iter(diagnoses.values()))
    if not reference_answers(dataset):
        st.caption("This task has no reference answers: the oracle cannot class its failures.")
    frame = counts_frame(diagnoses)
    fig = px.bar(
        frame,
        x="system",
        y="queries",
        color="class",
        category_orders={"class": list(FAILURE_CLASSES)},
        color_discrete_map=COLORS,
        title=f"Failed queries on {dataset.name}, by class",
    )
    # Whole queries, from 0 to the most failed by one system (plotly's own axis ran 0–1 in tenths for one query).
    fig.update_layout(
        barmode="stack", yaxis=count_axis(int(frame.groupby("system")["queries"].sum().max() if len(frame) else 0))
    )
    st.plotly_chart(fig, width="stretch", key="diagnosis_bars")
    st.caption(md(first.caption(naming.system_label(first.oracle))))
    table = frame.pivot(index="system", columns="class", values="queries")[list(FAILURE_CLASSES)]
    table.insert(0, "failed", table.sum(axis=1))
    st.dataframe(table, width="stretch")


def explorer_classes(found: Diagnosis | None, table: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """Explorer: the query table with a ``failure_class`` column from the system's diagnosis and the class
    filter drawn (inside the "All queries" expander); returns the table and whether it holds the column."""
    if found is None:
        return table, False
    options = [*FAILURE_CLASSES, NOT_FAILED]
    st.multiselect(
        "Failure class (diagnostic)",
        options,
        key=state.bound("diag", options, []),
        on_change=state.store("diag"),
        placeholder="every query",
        help=md(found.caption(naming.system_label(found.oracle))) + " The oracle is chosen on the Metrics page.",
    )
    return with_failure_class(table, found), True


def filter_classes(table: pd.DataFrame) -> pd.DataFrame:
    """The rows in the chosen failure classes (all when none is chosen or the column is absent)."""
    if "failure_class" not in table:
        return table
    return filter_by_class(table, state.view().diag)
