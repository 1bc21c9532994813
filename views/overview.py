"""Overview: what the task is, how big, how its queries and documents look."""

from __future__ import annotations

import plotly.express as px
import streamlit as st

from r2med_core.stats import dataset_summary, length_table
from views import ui

dataset = ui.current_dataset()
summary = dataset_summary(dataset)

st.title(ui.md(summary.title))
ui.demo_banner(dataset)
st.caption(ui.md(summary.description))

cols = st.columns(4)
cols[0].metric("Queries", f"{summary.n_queries:,}")
cols[1].metric("Documents", f"{summary.n_documents:,}")
cols[2].metric("Positives per query", f"{summary.mean_positives:.1f}")
cols[3].metric("Rewrites available", summary.n_rewrites)
if summary.published is not None:
    st.caption(
        f"Published size: {summary.published.n_queries} queries, {summary.published.n_documents:,} documents "
        f"({summary.published.hf_id}); source: {summary.published.source}."
    )

for line in dataset.report.lines():
    st.warning(line)

left, right = st.columns(2)
lengths = length_table(dataset)
with left:
    st.subheader("Query and document lengths")
    fig = px.histogram(
        lengths,
        x="words",
        color="kind",
        barmode="overlay",
        nbins=40,
        opacity=0.7,
        labels={"words": "length (words)", "kind": ""},
    )
    st.plotly_chart(fig, width="stretch")
with right:
    st.subheader("Relevant documents per query")
    positives = summary.positives_per_query
    fig = px.histogram(positives, x="positives", labels={"positives": "relevant documents (grade > 0)"})
    fig.update_xaxes(dtick=1)
    fig.update_layout(bargap=0.2, yaxis_title="queries")
    st.plotly_chart(fig, width="stretch")
    st.caption(f"Judgements by grade: {', '.join(f'grade {g}: {n}' for g, n in summary.grade_counts.items())}.")

st.subheader("Data source and license")
st.markdown(
    f"- **Source:** {ui.md(dataset.source)}\n- **Family:** {ui.md(summary.family)}\n"
    f"- **License:** {ui.md(summary.license)}"
)
