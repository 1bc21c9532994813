"""Overview, the landing page: where the chosen system fails on this task, in plain words with the
worst failures one click away; then what the task is, how big, how its queries and documents look."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from r2med_app.views import datasets, notices, summaries
from r2med_app.views.markup import md
from r2med_app.views.panels import failures
from r2med_core.judging.annotations import grade_words

dataset = datasets.current_dataset()
summary, lengths = summaries.dataset_overview(dataset)

st.title("R2MED Explorer")
st.caption(
    "Medical search where the relevant document is reached by a reasoning step (a diagnosis, a mechanism, a "
    "treatment decision), not by shared words: see where retrievers fail, and why."
)
notices.demo_banner(dataset)
st.subheader(f"Where search fails: {md(summary.title)}")
failures.landing(dataset)

st.header(md(summary.title))
st.caption(md(summary.description))

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
with left:
    st.subheader("Query and document lengths")
    bins = lengths.frame()
    fig = go.Figure()
    for kind, plural, colour in (("document", "documents", "#457b9d"), ("query", "queries", "#e76f51")):
        part = bins[bins["kind"] == kind]
        fig.add_bar(
            x=part["middle"],
            y=part["share"],
            width=float(lengths.edges[1] - lengths.edges[0]),
            name=f"{plural} (median {lengths.medians[kind]:.0f} words)",
            marker_color=colour,
            opacity=0.7,
            customdata=part[["from", "to", "count"]].to_numpy(),
            hovertemplate="%{customdata[0]}–%{customdata[1]} words: %{customdata[2]:,} (%{y:.1f}%)<extra></extra>",
        )
    fig.update_layout(barmode="overlay", xaxis_title="length (words)", yaxis_title="% of the kind's texts")
    st.plotly_chart(fig, width="stretch")
    if lengths.clipped_at is not None:
        st.caption(f"The last bar also counts the few texts longer than {lengths.clipped_at:,} words.")
with right:
    st.subheader("Relevant documents per query")
    counts = summary.positives_histogram
    fig = go.Figure(go.Bar(x=counts["positives"], y=counts["queries"], marker_color="#2a9d8f"))
    fig.update_xaxes(dtick=1)
    fig.update_layout(bargap=0.2, xaxis_title="relevant documents (grade > 0)", yaxis_title="queries")
    st.plotly_chart(fig, width="stretch")
    st.caption(f"Judgements by grade: {', '.join(f'{grade_words(g)}: {n}' for g, n in summary.grade_counts.items())}.")

st.subheader("Data facts no leaderboard shows")
facts = summaries.dataset_facts(dataset)
st.markdown("\n".join(f"- {md(line)}" for line in facts.sentences()))
if facts.duplicate_groups:
    with st.expander(f"The {len(facts.duplicate_groups):,} groups of identical documents"):
        st.dataframe(facts.duplicates_frame(dataset.corpus), hide_index=True, width="stretch")
if facts.short_documents:
    with st.expander(f"The {len(facts.short_documents):,} documents under {facts.short_words} words"):
        st.dataframe(
            {"document": list(facts.short_documents), "text": [dataset.corpus[d] for d in facts.short_documents]},
            hide_index=True,
            width="stretch",
        )

st.subheader("Data source and license")
st.markdown(
    f"- **Source:** {md(dataset.source)}\n- **Family:** {md(summary.family)}\n- **License:** {md(summary.license)}"
)
